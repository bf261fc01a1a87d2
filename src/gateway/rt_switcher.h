// gateway/rt_switcher.h — RT-Switcher: latency-feedback switching between
// quality levels.
//
// Promise: a pure controller over two latency signals, time to first token
// (TTFT) and time per output token (TPOT). Time is cut into intervals of
// `interval` (1 s by default). When an interval closes, each signal's P95
// over that interval's samples is compared with a threshold computed over a
// sliding window of the previous `window_intervals` interval P95s:
//
//   threshold = mean + 1.5 sigma of the window's P95s   (clamped to the
//               signal's floor and ceiling, when set)
//   breach:   P95 > threshold            (either signal)
//   calm:     P95 < 0.7 * threshold      (both signals calm, or idle: no
//                                          samples in the interval)
//   neutral:  otherwise (the hysteresis band [0.7, 1] x threshold, or too
//             little data) — both streaks reset.
//
// Refusals: a request the server turned away for load (a full queue, or a
// level's queue-wait limit) never gets a first token; its latency is
// unbounded. An interval with any refusal (ObserveRefusals) is a breach,
// whatever the latencies: shedding work is a worse degradation than any
// level's, and an interval that is calm only because requests were refused
// must not step back up.
//
// Holding step-ups: the controller sees latency, not load, so a level whose
// cheaper terms are what keeps latency calm would step up, breach and step
// down again, over and over. A caller that knows the level above cannot hold
// the present load (gateway/rt_control.h measures it) says so with
// HoldStepUp(why); a sustained calm then holds the level, and the decision
// says why.
//
// Why P95s on both sides: a P95 compared with mean + 1.5 sigma of the raw
// samples would breach in steady state for any right-skewed latency
// (exponential: P95 = 3 mean > 2.5 mean); compared with the spread of past
// P95s, a breach means "this interval's tail is unusual for this server".
//
// `breach_intervals` consecutive breaching intervals step down one level
// (cheaper); `calm_intervals` consecutive calm intervals step up one level.
// No switch happens sooner than `min_dwell` after the previous one, so input
// oscillating around the threshold cannot toggle the level faster than the
// dwell time. Time comes in as arguments: the controller never reads a clock.
//
// Levels are configuration (RtSwitcherOptions::levels, 0 = full quality):
// each sets the trace sampling rate, the sampling tier and scheduling caps.
// The current level is published as an immutable std::shared_ptr<const
// Policy>, swapped atomically: a request takes a snapshot when admitted and
// finishes on it, whatever happens later. Every evaluation returns a
// Decision with its reason (per-signal P95, window mean and sigma,
// threshold, streaks).
//
// Threading: Observe/Tick are thread-compatible (one owner, e.g. the
// scheduler thread); current() is thread-safe for any number of readers.
//
// Wiring (the server applies it; nothing here talks to a server):
//   auto sw = RtSwitcher::Create(options, clock.Now());   // owned by the scheduler
//   // per request, at its first token and when it ends:
//   sw->Observe(LatencySignal::kTtft, ttft, clock.Now());
//   sw->Observe(LatencySignal::kTpot, decode_time / n_tokens, clock.Now());
//   // once per interval (e.g. on the scheduler's loop), so quiet periods count:
//   for (const Decision& d : sw->Tick(clock.Now())) {
//     if (d.action == SwitchAction::kHold) continue;
//     log.Warn("rt-switcher: {}", d.Reason());
//     // counter strata_rt_switch_total{direction}, gauge strata_rt_level = d.to_level
//   }
//   // at admission (any thread):
//   std::shared_ptr<const Policy> pol = sw->current();   // kept by the request
//   if (pol->max_tokens_cap > 0) max_tokens = std::min(max_tokens, pol->max_tokens_cap);
//   params = ApplyTier(params, pol->sampling_tier);   // scheduler caps at pol->max_batch_size
//   traced = rng.Uniform() < pol->trace_sample_rate;
//   // the queue: refuse new requests while those waiting need more than
//   // pol->max_queue_wait_s to be admitted, and report the refusals:
//   sw->ObserveRefusals(n_refused, clock.Now());
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/tiers.h"
#include "util/status.h"

namespace strata::gateway {

using sampling::SamplingTier;

struct Policy {
  int32_t level = 0;               // index into RtSwitcherOptions::levels; 0 = full quality
  double trace_sample_rate = 1.0;  // [0, 1]; fraction of requests traced
  SamplingTier sampling_tier = SamplingTier::kEntropyTargeted;
  int32_t max_batch_size = 0;  // [0, 65536] sequences per step; 0 = no cap
  int32_t max_tokens_cap = 0;  // >= 0 generated tokens per request; 0 = no cap
  // [0, 3600] seconds; 0 = no limit. Admission shaping: new requests are
  // refused while those already waiting would take longer than this to be
  // admitted at the recent admission rate (so a queue never holds more wait
  // than this; under overload a long queue adds latency, not throughput).
  double max_queue_wait_s = 0;
  // Requests for any other model go to the fallback model (`strata serve
  // --rt-fallback`, e.g. a smaller one) while this level is in force.
  bool use_fallback = false;
};

// The default ladder: {1.0, entropy-targeted, no caps} -> {0.5, top-k, batch
// 32, 1024 tokens, queue wait 1 s} -> {0.1, top-k, batch 8, 256 tokens, queue
// wait 0.5 s}.
std::vector<Policy> DefaultLevels();

// Levels from text, one per comma-separated item, level 0 first:
// "TRACE_RATE:TIER:MAX_BATCH:MAX_TOKENS_CAP[:MAX_QUEUE_WAIT_S[:FALLBACK]]" with
// TIER "entropy" or "topk", 0 meaning no cap (or limit), and FALLBACK 1 to
// send requests to the fallback model at that level (0, the default, not), e.g.
// "1:entropy:0:0:0,0.5:topk:32:1024:1,0.1:topk:8:256:0.5" (the default
// ladder). InvalidArgument naming the item and field otherwise.
util::StatusOr<std::vector<Policy>> ParseLevels(std::string_view spec);
// The inverse of ParseLevels.
std::string FormatLevels(const std::vector<Policy>& levels);

enum class LatencySignal : uint8_t { kTtft, kTpot };

struct SignalLimits {
  double floor_s = 0.0;    // [0, inf) seconds; the threshold is never below this
  double ceiling_s = 0.0;  // [0, inf) seconds; 0 = none; never above this (an SLO)
};

struct RtSwitcherOptions {
  std::vector<Policy> levels = DefaultLevels();                 // >= 1; levels[i].level must be i
  std::chrono::nanoseconds interval = std::chrono::seconds(1);  // > 0; one evaluation each
  int32_t min_interval_samples = 5;   // [1, 1e6]; fewer: that interval's P95 is unknown
  int32_t window_intervals = 60;      // [2, 1e5]; interval P95s giving mean and sigma
  int32_t min_window_intervals = 10;  // [2, window_intervals]; fewer: no threshold (but the
                                      // ceiling, if set)
  double threshold_sigmas = 1.5;      // [0, 10]; threshold = mean + this * sigma
  double calm_fraction = 0.7;         // (0, 1); calm below this * threshold
  SignalLimits ttft;                  // clamps of the TTFT threshold
  SignalLimits tpot;                  // clamps of the TPOT threshold
  int32_t breach_intervals = 5;       // [1, 1e6]; consecutive breaching intervals to step down
  int32_t calm_intervals = 10;        // [1, 1e6]; consecutive calm intervals to step up
  std::chrono::nanoseconds min_dwell = std::chrono::seconds(10);  // >= 0; between switches
};

enum class SwitchAction : uint8_t { kHold, kStepDown, kStepUp };
std::string_view SwitchActionName(SwitchAction a);

// One signal in one interval.
struct SignalStats {
  int32_t n_samples = 0;   // in the interval
  bool idle = false;       // no samples
  bool p95_known = false;  // n_samples >= min_interval_samples
  double p95_s = 0;        // nearest-rank P95 of the interval
  int32_t n_window = 0;    // known P95s in the window (before this interval)
  double mean_s = 0;       // of the window's P95s
  double stddev_s = 0;     // of the window's P95s (population)
  bool has_threshold = false;
  double threshold_s = 0;    // clamp(mean + k sigma, floor, ceiling)
  bool from_window = false;  // mean and sigma were computed (enough intervals in the window)
  bool clamped = false;      // the floor or ceiling decided the threshold
  bool breach = false;
  bool calm = false;  // below calm_fraction * threshold
};

struct Decision {
  SwitchAction action = SwitchAction::kHold;
  int32_t from_level = 0;
  int32_t to_level = 0;
  std::chrono::steady_clock::time_point interval_end;  // when the evaluation happened
  SignalStats ttft, tpot;
  bool breach = false;  // this interval, over both signals
  bool calm = false;
  int32_t breach_streak = 0;  // consecutive intervals, including this one
  int32_t calm_streak = 0;
  int32_t n_refused = 0;        // requests refused for load in the interval (a breach if > 0)
  bool dwell_blocked = false;   // a sustained streak waits for min_dwell
  std::string step_up_held;     // a sustained calm did not step up, because of this
  double threshold_sigmas = 0;  // k of the options, for the reason text
  // e.g. "step down 0 -> 1: breach for 3 intervals; tpot p95 0.0600 s >
  // threshold 0.0215 s (window mean 0.0200 s + 1.5 sigma 0.0010 s over 60
  // intervals, 10 samples); ttft idle" — for the log line.
  std::string Reason() const;
};

class RtSwitcher {
 public:
  // InvalidArgument naming the field when an option is out of range. The
  // first interval starts at `start`.
  static util::StatusOr<std::unique_ptr<RtSwitcher>> Create(
      const RtSwitcherOptions& options, std::chrono::steady_clock::time_point start);

  // Closes (and evaluates) every interval that ended at or before `now`, then
  // records one sample taken at `now` in the open interval. A time before the
  // open interval's start is taken as its start.
  std::vector<Decision> Observe(LatencySignal signal, std::chrono::nanoseconds latency,
                                std::chrono::steady_clock::time_point now);
  // Closes (and evaluates) every interval that ended at or before `now`, then
  // records `n` requests refused for load at `now` in the open interval.
  std::vector<Decision> ObserveRefusals(int32_t n, std::chrono::steady_clock::time_point now);
  // Closes and evaluates every interval that ended at or before `now`.
  std::vector<Decision> Tick(std::chrono::steady_clock::time_point now);
  // While `why` is not empty, a sustained calm does not step up (evaluations
  // that follow see it; the decision carries `why`). Empty: step-ups allowed.
  void HoldStepUp(std::string why) { hold_up_ = std::move(why); }

  // Takes new options (a reload): the level stays, lowered to the last of
  // the new levels if it is past them; the window keeps its newest
  // window_intervals P95s; the breach and calm streaks start again, so no
  // switch follows from evidence judged by the old thresholds. The open
  // interval runs on. InvalidArgument, changing nothing, as Create.
  util::Status Reconfigure(const RtSwitcherOptions& options);

  // The policy in force; thread-safe.
  std::shared_ptr<const Policy> current() const { return current_.load(); }
  int32_t level() const { return level_; }
  const RtSwitcherOptions& options() const { return options_; }

 private:
  struct Signal {
    std::vector<double> interval_s;  // samples of the open interval
    std::deque<double> window;       // known P95s of previous intervals, oldest first
  };
  RtSwitcher(const RtSwitcherOptions& options, std::chrono::steady_clock::time_point start);
  void CloseIntervals(std::chrono::steady_clock::time_point now, std::vector<Decision>& out);
  SignalStats Evaluate(Signal& s, const SignalLimits& limits);
  Decision CloseOne(std::chrono::steady_clock::time_point end);

  RtSwitcherOptions options_;
  std::vector<std::shared_ptr<const Policy>> snapshots_;  // one immutable Policy per level
  std::atomic<std::shared_ptr<const Policy>> current_;    // what readers see
  int32_t level_ = 0;
  Signal ttft_, tpot_;
  std::chrono::steady_clock::time_point interval_start_;  // of the open interval
  bool switched_ = false;
  std::chrono::steady_clock::time_point last_switch_{};
  int32_t breach_streak_ = 0, calm_streak_ = 0;
  int32_t refused_ = 0;  // in the open interval
  std::string hold_up_;  // non-empty: step-ups are held, for this reason
};

}  // namespace strata::gateway
