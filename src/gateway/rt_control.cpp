#include "gateway/rt_control.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace strata::gateway {

namespace {

constexpr size_t kRateIntervals = 5;  // intervals the admission rate is measured over

// The tighter of two caps where 0 means "none".
int32_t TighterCap(int32_t a, int32_t b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return std::min(a, b);
}

std::string DescribePolicy(const gateway::Policy& p) {
  auto cap = [](int32_t v) { return v == 0 ? std::string("none") : std::to_string(v); };
  return fmt::format(
      "level {}: trace {:g}, sampling {}, max batch {}, max_tokens cap {}, queue wait {}", p.level,
      p.trace_sample_rate, sampling::SamplingTierName(p.sampling_tier), cap(p.max_batch_size),
      cap(p.max_tokens_cap),
      p.max_queue_wait_s > 0 ? fmt::format("{:g} s", p.max_queue_wait_s) : std::string("none"));
}

}  // namespace

gateway::Policy EffectivePolicy(const std::vector<gateway::Policy>& levels, int32_t level,
                                bool kv_pressure) {
  gateway::Policy p = levels[static_cast<size_t>(level)];
  if (!kv_pressure || level == 0) return p;
  // Why tighten here: at a degraded level latency is already bad, and with few
  // free blocks the next admissions are what forces preemptions, each of which
  // recomputes a whole sequence — work that delays every queued request's
  // first token. Fewer sequences at once and shorter generations cut the block
  // demand (each sequence holds prompt + max_tokens positions at most) before
  // that happens; requests already running keep their terms.
  if (static_cast<size_t>(level) + 1 < levels.size()) {
    const gateway::Policy& next = levels[static_cast<size_t>(level) + 1];
    p.max_batch_size = TighterCap(p.max_batch_size, next.max_batch_size);
    p.max_tokens_cap = TighterCap(p.max_tokens_cap, next.max_tokens_cap);
  } else {
    if (p.max_batch_size > 0) p.max_batch_size = std::max(1, p.max_batch_size / 2);
    if (p.max_tokens_cap > 0) p.max_tokens_cap = std::max(1, p.max_tokens_cap / 2);
  }
  return p;
}

struct RtControl::Metrics {
  explicit Metrics(obs::MetricsRegistry& reg)
      : level(reg.Gauge("strata_rt_level",
                        "RT-Switcher level in force (0 = full quality; higher = cheaper).")
                  .With({})),
        switches(reg.Counter("strata_rt_switch_total",
                             "RT-Switcher level changes, by direction (down = cheaper).",
                             {"direction"})),
        threshold(reg.Gauge("strata_rt_threshold_seconds",
                            "RT-Switcher breach threshold per signal at the last evaluation "
                            "(window mean + k sigma of interval P95s, clamped); 0 = none yet.",
                            {"signal"})),
        p95(reg.Gauge("strata_rt_p95_seconds",
                      "P95 of the signal over the last evaluated interval with enough samples.",
                      {"signal"})),
        kv_pressure(reg.Gauge("strata_rt_kv_pressure",
                              "1 while free KV blocks are below the pressure fraction, else 0.")
                        .With({})),
        max_batch(reg.Gauge("strata_rt_max_batch_size",
                            "Sequences the scheduler may run at once under the policy in force "
                            "(0 = no cap beyond --parallel).")
                      .With({})),
        max_tokens(reg.Gauge("strata_rt_max_tokens_cap",
                             "max_tokens cap for requests admitted now (0 = none).")
                       .With({})),
        max_waiting(reg.Gauge("strata_rt_max_waiting",
                              "Requests that may wait for a slot before new ones are refused "
                              "(admission shaping; 0 = no limit but --queue).")
                        .With({})) {}
  obs::GaugeValue& level;
  obs::Family<obs::CounterValue>& switches;
  obs::Family<obs::GaugeValue>& threshold;
  obs::Family<obs::GaugeValue>& p95;
  obs::GaugeValue& kv_pressure;
  obs::GaugeValue& max_batch;
  obs::GaugeValue& max_tokens;
  obs::GaugeValue& max_waiting;
};

util::StatusOr<std::unique_ptr<RtControl>> RtControl::Create(const RtControlOptions& options,
                                                             obs::MetricsRegistry& metrics,
                                                             const util::Clock& clock,
                                                             util::Logger& log) {
  if (options.capacity_memory.count() < 0) {
    return util::InvalidArgumentError("rt_control: capacity_memory must be >= 0");
  }
  if (!(options.kv_pressure_free_fraction >= 0 && options.kv_pressure_free_fraction < 1)) {
    return util::InvalidArgumentError(
        fmt::format("rt_control: kv_pressure_free_fraction {} is outside [0, 1)",
                    options.kv_pressure_free_fraction));
  }
  STRATA_ASSIGN_OR_RETURN(auto sw, gateway::RtSwitcher::Create(options.switcher, clock.Now()));
  return std::unique_ptr<RtControl>(new RtControl(options, std::move(sw), metrics, clock, log));
}

RtControl::RtControl(const RtControlOptions& options, std::unique_ptr<gateway::RtSwitcher> switcher,
                     obs::MetricsRegistry& metrics, const util::Clock& clock, util::Logger& log)
    : clock_(clock),
      log_(log),
      metrics_(std::make_unique<Metrics>(metrics)),
      options_(options),
      switcher_(std::move(switcher)),
      rng_(options.trace_seed),
      capacity_(options.switcher.levels.size()) {
  Publish();
}

RtControl::~RtControl() = default;

std::chrono::milliseconds RtControl::idle_tick() const {
  // One evaluation per interval is all the switcher needs; never sleep past a second.
  std::lock_guard<std::mutex> lock(mu_);
  const auto iv = std::chrono::duration_cast<std::chrono::milliseconds>(options_.switcher.interval);
  return std::clamp(iv, std::chrono::milliseconds(1), std::chrono::milliseconds(1000));
}

int32_t RtControl::level() const { return switcher_->current()->level; }

double RtControl::trace_sample_rate() const { return switcher_->current()->trace_sample_rate; }

bool RtControl::RoutesToFallback() const { return switcher_->current()->use_fallback; }

util::Status RtControl::Reconfigure(const RtControlOptions& o, std::chrono::milliseconds ramp) {
  if (ramp.count() < 0 || ramp > std::chrono::hours(24)) {
    return util::InvalidArgumentError(
        fmt::format("rt_control: policy ramp {} ms is outside [0, 1 day]", ramp.count()));
  }
  if (o.capacity_memory.count() < 0) {
    return util::InvalidArgumentError("rt_control: capacity_memory must be >= 0");
  }
  if (!(o.kv_pressure_free_fraction >= 0 && o.kv_pressure_free_fraction < 1)) {
    return util::InvalidArgumentError(fmt::format(
        "rt_control: kv_pressure_free_fraction {} is outside [0, 1)", o.kv_pressure_free_fraction));
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<gateway::Policy> before = switcher_->options().levels;
  STRATA_RETURN_IF_ERROR(switcher_->Reconfigure(o.switcher));
  const auto now = clock_.Now();
  const bool ramping = !previous_levels_.empty() && RampProgressLocked(now) < 1;
  if (ramp.count() > 0 && FormatLevels(before) != FormatLevels(o.switcher.levels)) {
    // A ramp still running starts again from the levels it began with.
    if (!ramping) previous_levels_ = std::move(before);
    ramp_start_ = now;
    ramp_ = ramp;
    log_.Info("rt-switcher: policy migration: new admissions move to the new levels over {:.1f} s",
              std::chrono::duration<double>(ramp).count());
  } else if (ramp.count() == 0) {
    previous_levels_.clear();
    previous_policy_ = nullptr;
  }
  const uint64_t seed = options_.trace_seed;
  options_ = o;
  options_.trace_seed = seed;
  capacity_.resize(o.switcher.levels.size());
  Publish();
  log_.Info("rt-switcher: reconfigured: levels {}; level {}; new requests get {}",
            FormatLevels(o.switcher.levels), switcher_->level(), DescribePolicy(*policy_));
  return util::OkStatus();
}

std::vector<RtControl::Switch> RtControl::RecentSwitches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {recent_.begin(), recent_.end()};
}

std::string RtControl::PolicyInForce() const {
  std::lock_guard<std::mutex> lock(mu_);
  return DescribePolicy(*policy_);
}

double RtControl::AdmissionRate() const {
  if (admitted_.empty()) return 0;
  int64_t n = 0;
  for (int32_t a : admitted_) n += a;
  const double span_s =
      std::chrono::duration<double>(options_.switcher.interval).count() * admitted_.size();
  return n / span_s;
}

double RtControl::DemandRate() const {
  if (submitted_.empty()) return 0;
  int64_t n = 0;
  for (int64_t a : submitted_) n += a;
  const double span_s =
      std::chrono::duration<double>(options_.switcher.interval).count() * submitted_.size();
  return n / span_s;
}

void RtControl::GuardStepUp(std::chrono::steady_clock::time_point now) {
  const int32_t level = switcher_->level();
  std::string why;
  if (level > 0 && options_.capacity_memory.count() > 0) {
    const Capacity& above = capacity_[static_cast<size_t>(level - 1)];
    const double demand = DemandRate();
    if (above.per_s > 0 && now - above.measured < options_.capacity_memory &&
        demand > 0.9 * above.per_s) {
      why = fmt::format(
          "{:.1f} requests/s submitted, above 90% of the {:.1f}/s level {} served "
          "when it last breached {:.0f} s ago",
          demand, above.per_s, level - 1,
          std::chrono::duration<double>(now - above.measured).count());
    }
  }
  if (why.empty() != !holding_) {
    holding_ = !why.empty();
    if (holding_) {
      log_.Info("rt-switcher: holding level {}: {}", level, why);
    } else {
      log_.Info("rt-switcher: level {} may step up again", level);
    }
  }
  switcher_->HoldStepUp(std::move(why));
}

engine::AdmissionLimits RtControl::BeforeAdmission(const engine::SchedulerStats& stats) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = clock_.Now();
  // Refusals since the last call (the scheduler counts them on the threads that submit).
  if (refused_seen_ >= 0 && stats.refused > refused_seen_) {
    Apply(switcher_->ObserveRefusals(
        static_cast<int32_t>(std::min<int64_t>(stats.refused - refused_seen_, 1 << 30)), now));
  }
  refused_seen_ = stats.refused;
  if (submitted_seen_ >= 0)
    submitted_open_ += std::max<int64_t>(0, stats.submitted - submitted_seen_);
  submitted_seen_ = stats.submitted;
  GuardStepUp(now);
  Apply(switcher_->Tick(now));
  if (stats.kv_blocks_total > 0 && options_.kv_pressure_free_fraction > 0) {
    const double free = 1.0 - static_cast<double>(stats.kv_blocks_used) / stats.kv_blocks_total;
    const double enter = options_.kv_pressure_free_fraction;
    const bool pressure = kv_pressure_ ? free < 1.5 * enter : free < enter;
    if (pressure != kv_pressure_) {
      kv_pressure_ = pressure;
      log_.Info("rt-switcher: KV pressure {}: {} of {} blocks free ({:.1f}%, {} below {:.1f}%)",
                pressure ? "on" : "off", stats.kv_blocks_total - stats.kv_blocks_used,
                stats.kv_blocks_total, 100 * free, pressure ? "entered" : "left",
                100 * (pressure ? enter : 1.5 * enter));
      Publish();
    }
  }
  engine::AdmissionLimits limits{.max_running = policy_->max_batch_size, .max_waiting = -1};
  if (policy_->max_queue_wait_s > 0) {
    double wait_s = policy_->max_queue_wait_s;
    const double slo_s = options_.switcher.ttft.ceiling_s;
    if (slo_s > 0) wait_s = std::min(wait_s, 0.5 * slo_s);
    const double n = std::ceil(AdmissionRate() * wait_s);
    limits.max_waiting = static_cast<int32_t>(std::clamp(n, 1.0, 1e6));
  }
  metrics_->max_waiting.Set(limits.max_waiting < 0 ? 0 : limits.max_waiting);
  return limits;
}

RtControl::Admission RtControl::Admit() {
  std::lock_guard<std::mutex> lock(mu_);
  ++admitted_open_;
  Admission a;
  a.policy = policy_;
  // Always draw, so the sequence of decisions depends only on the seed and the
  // number of admissions.
  const double u = rng_.Uniform();
  if (!previous_levels_.empty()) {
    const double v = rng_.Uniform();
    const double progress = RampProgressLocked(clock_.Now());
    if (progress >= 1) {
      previous_levels_.clear();
      previous_policy_ = nullptr;
    } else if (v >= progress && previous_policy_ != nullptr) {
      a.policy = previous_policy_;
    }
  }
  const double rate = a.policy->trace_sample_rate;
  a.traced = rate >= 1.0 || u < rate;
  return a;
}

double RtControl::RampProgressLocked(std::chrono::steady_clock::time_point now) const {
  if (previous_levels_.empty() || ramp_.count() <= 0) return 1;
  const double p =
      std::chrono::duration<double>(now - ramp_start_) / std::chrono::duration<double>(ramp_);
  return std::clamp(p, 0.0, 1.0);
}

double RtControl::policy_ramp_progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  return RampProgressLocked(clock_.Now());
}

void RtControl::ObserveTtft(std::chrono::nanoseconds ttft) {
  std::lock_guard<std::mutex> lock(mu_);
  Apply(switcher_->Observe(gateway::LatencySignal::kTtft, ttft, clock_.Now()));
}

void RtControl::ObserveTpot(std::chrono::nanoseconds tpot) {
  std::lock_guard<std::mutex> lock(mu_);
  Apply(switcher_->Observe(gateway::LatencySignal::kTpot, tpot, clock_.Now()));
}

void RtControl::Apply(const std::vector<gateway::Decision>& decisions) {
  bool moved = false;
  for (const gateway::Decision& d : decisions) {
    // One closed interval: its admissions and submissions join the rate windows.
    admitted_.push_back(admitted_open_);
    admitted_open_ = 0;
    if (admitted_.size() > kRateIntervals) admitted_.pop_front();
    submitted_.push_back(submitted_open_);
    submitted_open_ = 0;
    if (submitted_.size() > kRateIntervals) submitted_.pop_front();
    for (const auto& [name, s] : {std::pair{"ttft", &d.ttft}, std::pair{"tpot", &d.tpot}}) {
      metrics_->threshold.With({name}).Set(s->has_threshold ? s->threshold_s : 0.0);
      if (s->p95_known) metrics_->p95.With({name}).Set(s->p95_s);
    }
    if (d.action == gateway::SwitchAction::kHold) {
      log_.Debug("rt-switcher: {}", d.Reason());
      continue;
    }
    metrics_->switches.With({d.action == gateway::SwitchAction::kStepDown ? "down" : "up"}).Inc();
    moved = true;
    if (d.action == gateway::SwitchAction::kStepDown && DemandRate() > 1.05 * AdmissionRate()) {
      // The level could not keep up (more submitted than admitted): what it
      // served is its capacity. A breach without that (a slow host, long
      // prompts) says nothing about load, and holds nothing back.
      capacity_[static_cast<size_t>(d.from_level)] = {AdmissionRate(), d.interval_end};
    }
    const gateway::Policy now =
        EffectivePolicy(switcher_->options().levels, d.to_level, kv_pressure_);
    std::string policy = DescribePolicy(now);
    if (kv_pressure_) policy += " (caps tightened: KV pressure)";
    log_.Warn("rt-switcher: {}; new requests get {}", d.Reason(), policy);
    recent_.push_back({.at = clock_.WallNow(),
                       .from_level = d.from_level,
                       .to_level = d.to_level,
                       .reason = d.Reason(),
                       .policy = std::move(policy)});
    if (recent_.size() > kRecentSwitches) recent_.pop_front();
  }
  if (moved) Publish();
}

void RtControl::Publish() {
  const int32_t level = switcher_->level();
  policy_ = std::make_shared<const gateway::Policy>(
      EffectivePolicy(switcher_->options().levels, level, kv_pressure_));
  if (!previous_levels_.empty()) {
    const auto top = static_cast<int32_t>(previous_levels_.size()) - 1;
    previous_policy_ = std::make_shared<const gateway::Policy>(
        EffectivePolicy(previous_levels_, std::min(level, top), kv_pressure_));
  }
  metrics_->level.Set(level);
  metrics_->kv_pressure.Set(kv_pressure_ ? 1 : 0);
  metrics_->max_batch.Set(policy_->max_batch_size);
  metrics_->max_tokens.Set(policy_->max_tokens_cap);
}

}  // namespace strata::gateway
