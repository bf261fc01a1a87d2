// gateway/rt_control.h — the RT-Switcher (gateway/rt_switcher.h) wired to the
// scheduler: latency in, admission terms out.
//
// Promise: RtControl is the scheduler's SchedulerControl. It feeds the TTFT
// and time per output token of every generated choice into one RtSwitcher,
// evaluates it on the scheduler loop (idle time included), and turns the
// level in force into admission terms: a request being admitted takes the
// level's policy (sampling tier, max_tokens cap, whether it is traced) and
// keeps it to the end; the scheduler admits no more sequences than the
// policy's max batch size. Every switch is a log line with the decision's
// reason (window statistics, threshold) and a metric.
//
// Admission shaping: at a level with max_queue_wait_s, the scheduler refuses
// new requests (429) while max(1, ceil(rate x max_queue_wait_s)) wait, rate
// being the admissions per second over the last 5 intervals (Little's law:
// that many waiting requests start within about max_queue_wait_s), and never
// more than half the TTFT ceiling (the SLO) when one is set: under overload
// the queue stays full, so every request waits about that long, and the other
// half is for its prefill and first step. Requests
// the scheduler refused for load are reported to the switcher, for which an
// interval with refusals is a breach: it never steps up while shedding.
//
// Holding step-ups: when the switcher steps down from a level that could not
// keep up (more requests submitted than admitted over the last 5 intervals),
// its admissions per second are kept as the level's capacity, for
// `capacity_memory`. While
// the requests submitted per second (over the last 5 intervals) exceed 90 %
// of the capacity of the level above, a sustained calm does not step up: the
// calm is the cheaper level's doing, and stepping up would breach again (a
// cycle of steps whose every up-step is a latency spike). Requests differ, so
// the capacity is an estimate; after capacity_memory one more attempt
// re-measures it.
//
// KV-memory pressure: while a degraded level (>= 1) is in force and the free
// KV blocks fall below `kv_pressure_free_fraction` of the pool, the caps
// (max batch, max_tokens) are those of the next level down (halved at the
// bottom); see EffectivePolicy. Pressure ends when the free fraction is back
// above 1.5 times that (hysteresis, so the caps do not flap with every step).
//
// Threading: thread-safe. The scheduler thread calls BeforeAdmission (and,
// without a scheduler, `strata serve`'s ticker does, once per idle_tick),
// the local engine's choices Admit and Observe* there too; a remote
// backend's runs call Admit on request threads and Observe* on the HTTP
// client's I/O threads. One mutex serialises them all (held for the short
// bookkeeping of each call; Apply's log lines are written under it).
//
// Usage (the composition root):
//   STRATA_ASSIGN_OR_RETURN(auto rt, RtControl::Create({}, metrics, clock, log));
//   auto sched = Scheduler::Start(engine, {.max_running = 16, .control = rt.get()}, log);
//   GatewayOptions go{.rt_control = rt.get()};   // sinks call Admit/Observe*
//   // rt must outlive the scheduler and the gateway.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/scheduler.h"
#include "gateway/rt_switcher.h"
#include "obs/metrics.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/random.h"
#include "util/status.h"

namespace strata::gateway {

struct RtControlOptions {
  gateway::RtSwitcherOptions switcher;     // levels, interval, window, thresholds, dwell
  double kv_pressure_free_fraction = 0.1;  // [0, 1); below it a degraded level tightens its caps;
                                           // 0 = never
  uint64_t trace_seed = 0;                 // seeds the trace-sampling draws
  // >= 0; how long a level's measured capacity holds step-ups back; 0 = never.
  std::chrono::nanoseconds capacity_memory = std::chrono::minutes(5);
};

// The policy a request admitted now gets at `level`: levels[level], and under
// KV pressure at a degraded level (level >= 1) the tighter of its caps and
// those of levels[level + 1], or half its own (at least 1) at the bottom. A
// cap of 0 ("none") never wins over a set one. Level 0 is never tightened:
// at full quality the latency is fine, and the scheduler's own admission rule
// and preemption keep a full KV pool correct.
gateway::Policy EffectivePolicy(const std::vector<gateway::Policy>& levels, int32_t level,
                                bool kv_pressure);

class RtControl final : public engine::SchedulerControl {
 public:
  // InvalidArgument naming the option when one is out of range.
  static util::StatusOr<std::unique_ptr<RtControl>> Create(const RtControlOptions& options,
                                                           obs::MetricsRegistry& metrics,
                                                           const util::Clock& clock,
                                                           util::Logger& log);
  ~RtControl() override;

  // engine::SchedulerControl: reports new refusals, evaluates the intervals
  // that have ended, then returns the policy's max batch size (0 = no cap)
  // and the shaped queue limit (-1 = none).
  engine::AdmissionLimits BeforeAdmission(const engine::SchedulerStats& stats) override;
  std::chrono::milliseconds idle_tick() const override;

  // The terms of a request admitted now.
  struct Admission {
    std::shared_ptr<const gateway::Policy> policy;  // immutable; kept by the request
    bool traced = false;  // drawn with probability policy->trace_sample_rate
  };
  Admission Admit();

  // A choice's time to first token (submission to first token) and its mean
  // time per output token after the first.
  void ObserveTtft(std::chrono::nanoseconds ttft);
  void ObserveTpot(std::chrono::nanoseconds tpot);

  // The switcher's level (thread-safe).
  int32_t level() const;
  // The share of requests its level traces, in [0, 1] (thread-safe): the
  // OpenTelemetry sampler's rate is multiplied by it.
  double trace_sample_rate() const;
  // One level change, as the log line says it (the dashboard lists them).
  struct Switch {
    std::chrono::system_clock::time_point at;  // wall time of the evaluation
    int32_t from_level = 0;
    int32_t to_level = 0;
    std::string reason;  // Decision::Reason()
    std::string policy;  // what new requests got from then on
  };
  // The last kRecentSwitches changes, oldest first, and the policy in force
  // now as DescribePolicy words it (thread-safe).
  static constexpr size_t kRecentSwitches = 32;
  std::vector<Switch> RecentSwitches() const;
  std::string PolicyInForce() const;
  // Whether the level in force sends requests to the fallback model.
  bool RoutesToFallback() const;
  // New options (a reload; trace_seed is kept): the switcher's levels,
  // interval, window, thresholds and dwell (RtSwitcher::Reconfigure), the KV
  // pressure fraction and the capacity memory. Requests admitted from now on
  // get the new level's policy; admitted ones keep theirs. Logged.
  // InvalidArgument, changing nothing, when an option is out of range.
  //
  // With `ramp` > 0 and new levels, a hot migration of the sampling policy:
  // a rising share (0 to 1 over `ramp`) of the choices admitted takes the
  // new levels' policy, the rest the old levels' at the same level (a
  // choice keeps what it was admitted with). A reconfiguration during a
  // ramp ramps from the levels fully in force before it.
  util::Status Reconfigure(const RtControlOptions& options,
                           std::chrono::milliseconds ramp = std::chrono::milliseconds(0));
  // The share of admissions on the newest levels: 1 when no ramp runs.
  double policy_ramp_progress() const;

 private:
  struct Metrics;
  RtControl(const RtControlOptions& options, std::unique_ptr<gateway::RtSwitcher> switcher,
            obs::MetricsRegistry& metrics, const util::Clock& clock, util::Logger& log);
  // Logs and counts `decisions`; republishes the policy when the level moved.
  void Apply(const std::vector<gateway::Decision>& decisions);
  void Publish();
  // Admissions (submissions) per second over the closed intervals kept.
  double AdmissionRate() const;
  double DemandRate() const;
  // Holds the switcher's step-ups while demand exceeds the capacity measured
  // for the level above (logs when that starts and ends).
  void GuardStepUp(std::chrono::steady_clock::time_point now);

  const util::Clock& clock_;
  util::Logger& log_;
  std::unique_ptr<Metrics> metrics_;
  mutable std::mutex mu_;  // guards everything below
  RtControlOptions options_;
  std::unique_ptr<gateway::RtSwitcher> switcher_;  // the object stays; its options may change
  util::Rng rng_;                                  // trace-sampling draws
  bool kv_pressure_ = false;
  std::shared_ptr<const gateway::Policy> policy_;  // what Admit hands out
  // A migration's ramp from the levels before (previous_levels_ empty: none).
  std::vector<gateway::Policy> previous_levels_;
  std::shared_ptr<const gateway::Policy> previous_policy_;  // their policy at the level
  std::chrono::steady_clock::time_point ramp_start_;
  std::chrono::nanoseconds ramp_{0};
  double RampProgressLocked(std::chrono::steady_clock::time_point now) const;
  int32_t admitted_open_ = 0;      // admissions in the open interval
  std::deque<int32_t> admitted_;   // admissions of the last closed intervals, oldest first
  int64_t refused_seen_ = -1;      // SchedulerStats::refused last reported; -1 = none yet
  int64_t submitted_seen_ = -1;    // SchedulerStats::submitted last seen; -1 = none yet
  int64_t submitted_open_ = 0;     // submissions seen in the open interval
  std::deque<int64_t> submitted_;  // submissions of the last closed intervals, oldest first
  struct Capacity {
    double per_s = 0;  // admissions per second while the level breached
    std::chrono::steady_clock::time_point measured{};
  };
  std::vector<Capacity> capacity_;  // per level; per_s 0 = not measured
  bool holding_ = false;            // step-ups are held
  std::deque<Switch> recent_;       // the last kRecentSwitches level changes
};

}  // namespace strata::gateway
