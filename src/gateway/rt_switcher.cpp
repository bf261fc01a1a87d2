#include "gateway/rt_switcher.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace strata::gateway {

using sampling::SamplingTierName;

std::vector<Policy> DefaultLevels() {
  std::vector<Policy> v(3);
  v[0].level = 0;
  v[0].trace_sample_rate = 1.0;
  v[0].sampling_tier = SamplingTier::kEntropyTargeted;
  v[1].level = 1;
  v[1].trace_sample_rate = 0.5;
  v[1].sampling_tier = SamplingTier::kTopK;
  v[1].max_batch_size = 32;
  v[1].max_tokens_cap = 1024;
  v[1].max_queue_wait_s = 1.0;
  v[2].level = 2;
  v[2].trace_sample_rate = 0.1;
  v[2].sampling_tier = SamplingTier::kTopK;
  v[2].max_batch_size = 8;
  v[2].max_tokens_cap = 256;
  v[2].max_queue_wait_s = 0.5;
  return v;
}

util::StatusOr<std::vector<Policy>> ParseLevels(std::string_view spec) {
  std::vector<Policy> out;
  auto split = [](std::string_view text, char sep) {
    std::vector<std::string_view> parts;
    size_t start = 0;
    while (true) {
      const size_t end = text.find(sep, start);
      parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
      if (end == std::string_view::npos) return parts;
      start = end + 1;
    }
  };
  for (std::string_view item : split(spec, ',')) {
    const size_t i = out.size();
    auto bad = [&](const std::string& why) {
      return util::InvalidArgumentError(fmt::format("rt levels: item {} '{}': {}", i, item, why));
    };
    const std::vector<std::string_view> f = split(item, ':');
    if (f.size() < 4 || f.size() > 6) {
      return bad("expected TRACE_RATE:TIER:MAX_BATCH:MAX_TOKENS_CAP[:MAX_QUEUE_WAIT_S[:FALLBACK]]");
    }
    Policy p;
    p.level = static_cast<int32_t>(i);
    const std::string rate(f[0]);
    char* end = nullptr;
    p.trace_sample_rate = std::strtod(rate.c_str(), &end);
    if (rate.empty() || end != rate.c_str() + rate.size() ||
        !(p.trace_sample_rate >= 0 && p.trace_sample_rate <= 1)) {
      return bad(fmt::format("trace rate '{}' is not a number in [0, 1]", rate));
    }
    if (f[1] == "entropy") {
      p.sampling_tier = SamplingTier::kEntropyTargeted;
    } else if (f[1] == "topk") {
      p.sampling_tier = SamplingTier::kTopK;
    } else {
      return bad(fmt::format("tier '{}' is not entropy or topk", f[1]));
    }
    auto integer = [&](std::string_view text, const char* name, int64_t max,
                       int32_t& into) -> util::Status {
      const std::string t(text);
      char* e = nullptr;
      const long long v = std::strtoll(t.c_str(), &e, 10);
      if (t.empty() || e != t.c_str() + t.size() || v < 0 || v > max) {
        return bad(fmt::format("{} '{}' is not an integer in [0, {}]", name, t, max));
      }
      into = static_cast<int32_t>(v);
      return util::OkStatus();
    };
    STRATA_RETURN_IF_ERROR(integer(f[2], "max batch", 65536, p.max_batch_size));
    STRATA_RETURN_IF_ERROR(integer(f[3], "max_tokens cap", 1 << 30, p.max_tokens_cap));
    if (f.size() == 6) {
      if (f[5] != "0" && f[5] != "1") {
        return bad(fmt::format("fallback '{}' is not 0 or 1", f[5]));
      }
      p.use_fallback = f[5] == "1";
    }
    if (f.size() >= 5) {
      const std::string w(f[4]);
      char* e = nullptr;
      p.max_queue_wait_s = std::strtod(w.c_str(), &e);
      if (w.empty() || e != w.c_str() + w.size() ||
          !(p.max_queue_wait_s >= 0 && p.max_queue_wait_s <= 3600)) {
        return bad(fmt::format("max queue wait '{}' is not a number of seconds in [0, 3600]", w));
      }
    }
    out.push_back(p);
  }
  return out;
}

std::string FormatLevels(const std::vector<Policy>& levels) {
  std::string out;
  for (const Policy& p : levels) {
    if (!out.empty()) out += ',';
    out += fmt::format("{}:{}:{}:{}:{}", p.trace_sample_rate, SamplingTierName(p.sampling_tier),
                       p.max_batch_size, p.max_tokens_cap, p.max_queue_wait_s);
    if (p.use_fallback) out += ":1";
  }
  return out;
}

std::string_view SwitchActionName(SwitchAction a) {
  switch (a) {
    case SwitchAction::kHold:
      return "hold";
    case SwitchAction::kStepDown:
      return "step down";
    case SwitchAction::kStepUp:
      return "step up";
  }
  return "?";
}

namespace {

std::string Describe(std::string_view name, const SignalStats& s, double sigmas) {
  if (s.idle) return fmt::format("{} idle", name);
  if (!s.p95_known) return fmt::format("{} too few samples ({})", name, s.n_samples);
  if (!s.has_threshold) {
    return fmt::format("{} p95 {:.4f} s, no threshold yet ({} intervals in the window)", name,
                       s.p95_s, s.n_window);
  }
  const char* rel = s.breach ? ">" : (s.calm ? "< calm fraction of" : "<=");
  const std::string how =
      !s.from_window
          ? fmt::format("the ceiling; {} intervals in the window, too few for a threshold",
                        s.n_window)
          : fmt::format("window mean {:.4f} s + {} sigma {:.4f} s over {} intervals{}", s.mean_s,
                        sigmas, s.stddev_s, s.n_window,
                        s.clamped ? ", clamped to the floor/ceiling" : "");
  return fmt::format("{} p95 {:.4f} s {} threshold {:.4f} s ({}; {} samples)", name, s.p95_s, rel,
                     s.threshold_s, how, s.n_samples);
}

}  // namespace

std::string Decision::Reason() const {
  std::string streak;
  if (breach) {
    streak = fmt::format("breach for {} intervals", breach_streak);
    if (n_refused > 0) streak += fmt::format(" ({} requests refused for load)", n_refused);
  } else if (calm) {
    streak = fmt::format("calm for {} intervals", calm_streak);
  } else {
    streak = "neutral";
  }
  if (dwell_blocked) streak += " (waiting for the minimum dwell)";
  if (!step_up_held.empty()) streak += fmt::format(" (step up held: {})", step_up_held);
  return fmt::format("{} {} -> {}: {}; {}; {}", SwitchActionName(action), from_level, to_level,
                     streak, Describe("ttft", ttft, threshold_sigmas),
                     Describe("tpot", tpot, threshold_sigmas));
}

namespace {

util::Status ValidateSwitcherOptions(const RtSwitcherOptions& o) {
  auto bad = [](const std::string& m) { return util::InvalidArgumentError("rt_switcher: " + m); };
  if (o.levels.empty()) return bad("levels is empty");
  for (size_t i = 0; i < o.levels.size(); ++i) {
    const Policy& p = o.levels[i];
    if (p.level != static_cast<int32_t>(i)) {
      return bad(fmt::format("levels[{}].level is {}, must be {}", i, p.level, i));
    }
    if (!(p.trace_sample_rate >= 0 && p.trace_sample_rate <= 1)) {
      return bad(
          fmt::format("levels[{}].trace_sample_rate {} is outside [0, 1]", i, p.trace_sample_rate));
    }
    if (p.max_batch_size < 0 || p.max_batch_size > 65536) {
      return bad(
          fmt::format("levels[{}].max_batch_size {} is outside [0, 65536]", i, p.max_batch_size));
    }
    if (p.max_tokens_cap < 0) {
      return bad(fmt::format("levels[{}].max_tokens_cap {} is negative", i, p.max_tokens_cap));
    }
    if (!(p.max_queue_wait_s >= 0 && p.max_queue_wait_s <= 3600)) {
      return bad(fmt::format("levels[{}].max_queue_wait_s {} is outside [0, 3600]", i,
                             p.max_queue_wait_s));
    }
  }
  if (o.interval.count() <= 0) return bad("interval must be positive");
  if (o.min_interval_samples < 1 || o.min_interval_samples > 1'000'000) {
    return bad(fmt::format("min_interval_samples {} is outside [1, 1e6]", o.min_interval_samples));
  }
  if (o.window_intervals < 2 || o.window_intervals > 100'000) {
    return bad(fmt::format("window_intervals {} is outside [2, 1e5]", o.window_intervals));
  }
  if (o.min_window_intervals < 2 || o.min_window_intervals > o.window_intervals) {
    return bad(fmt::format("min_window_intervals {} is outside [2, window_intervals = {}]",
                           o.min_window_intervals, o.window_intervals));
  }
  if (!(o.threshold_sigmas >= 0 && o.threshold_sigmas <= 10)) {
    return bad(fmt::format("threshold_sigmas {} is outside [0, 10]", o.threshold_sigmas));
  }
  if (!(o.calm_fraction > 0 && o.calm_fraction < 1)) {
    return bad(fmt::format("calm_fraction {} is outside (0, 1)", o.calm_fraction));
  }
  for (const auto& [name, l] : {std::pair{"ttft", o.ttft}, std::pair{"tpot", o.tpot}}) {
    if (!(l.floor_s >= 0 && std::isfinite(l.floor_s)) ||
        !(l.ceiling_s >= 0 && std::isfinite(l.ceiling_s))) {
      return bad(fmt::format("{}.floor_s {} / ceiling_s {} must be finite and >= 0", name,
                             l.floor_s, l.ceiling_s));
    }
    if (l.ceiling_s > 0 && l.ceiling_s < l.floor_s) {
      return bad(fmt::format("{}.ceiling_s {} is below floor_s {}", name, l.ceiling_s, l.floor_s));
    }
  }
  if (o.breach_intervals < 1 || o.breach_intervals > 1'000'000) {
    return bad(fmt::format("breach_intervals {} is outside [1, 1e6]", o.breach_intervals));
  }
  if (o.calm_intervals < 1 || o.calm_intervals > 1'000'000) {
    return bad(fmt::format("calm_intervals {} is outside [1, 1e6]", o.calm_intervals));
  }
  if (o.min_dwell.count() < 0) return bad("min_dwell must be >= 0");
  return util::OkStatus();
}

}  // namespace

util::StatusOr<std::unique_ptr<RtSwitcher>> RtSwitcher::Create(
    const RtSwitcherOptions& o, std::chrono::steady_clock::time_point start) {
  STRATA_RETURN_IF_ERROR(ValidateSwitcherOptions(o));
  return std::unique_ptr<RtSwitcher>(new RtSwitcher(o, start));
}

RtSwitcher::RtSwitcher(const RtSwitcherOptions& options,
                       std::chrono::steady_clock::time_point start)
    : options_(options), interval_start_(start) {
  for (const Policy& p : options_.levels) snapshots_.push_back(std::make_shared<const Policy>(p));
  current_.store(snapshots_[0]);
}

util::Status RtSwitcher::Reconfigure(const RtSwitcherOptions& o) {
  STRATA_RETURN_IF_ERROR(ValidateSwitcherOptions(o));
  options_ = o;
  snapshots_.clear();
  for (const Policy& p : options_.levels) snapshots_.push_back(std::make_shared<const Policy>(p));
  level_ = std::min(level_, static_cast<int32_t>(snapshots_.size()) - 1);
  current_.store(snapshots_[static_cast<size_t>(level_)]);
  for (Signal* s : {&ttft_, &tpot_}) {
    while (s->window.size() > static_cast<size_t>(options_.window_intervals)) {
      s->window.pop_front();
    }
  }
  breach_streak_ = 0;
  calm_streak_ = 0;
  return util::OkStatus();
}

std::vector<Decision> RtSwitcher::Observe(LatencySignal signal, std::chrono::nanoseconds latency,
                                          std::chrono::steady_clock::time_point now) {
  std::vector<Decision> out;
  CloseIntervals(now, out);
  Signal& s = signal == LatencySignal::kTtft ? ttft_ : tpot_;
  s.interval_s.push_back(std::chrono::duration<double>(latency).count());
  return out;
}

std::vector<Decision> RtSwitcher::ObserveRefusals(int32_t n,
                                                  std::chrono::steady_clock::time_point now) {
  std::vector<Decision> out;
  CloseIntervals(now, out);
  refused_ += std::max(n, 0);
  return out;
}

std::vector<Decision> RtSwitcher::Tick(std::chrono::steady_clock::time_point now) {
  std::vector<Decision> out;
  CloseIntervals(now, out);
  return out;
}

void RtSwitcher::CloseIntervals(std::chrono::steady_clock::time_point now,
                                std::vector<Decision>& out) {
  while (now - interval_start_ >= options_.interval) {
    interval_start_ += options_.interval;
    out.push_back(CloseOne(interval_start_));
  }
}

SignalStats RtSwitcher::Evaluate(Signal& s, const SignalLimits& limits) {
  SignalStats st;
  st.n_samples = static_cast<int32_t>(s.interval_s.size());
  st.idle = s.interval_s.empty();
  st.p95_known = st.n_samples >= options_.min_interval_samples;
  if (st.p95_known) {
    // Nearest rank: the smallest sample with at least 95% of samples at or below it.
    const size_t rank = static_cast<size_t>(std::ceil(0.95 * st.n_samples));
    std::nth_element(s.interval_s.begin(),
                     s.interval_s.begin() + static_cast<std::ptrdiff_t>(rank - 1),
                     s.interval_s.end());
    st.p95_s = s.interval_s[rank - 1];
  }
  s.interval_s.clear();
  st.n_window = static_cast<int32_t>(s.window.size());
  if (st.n_window >= options_.min_window_intervals) {
    double sum = 0;
    for (double x : s.window) sum += x;
    st.mean_s = sum / st.n_window;
    double ss = 0;
    for (double x : s.window) ss += (x - st.mean_s) * (x - st.mean_s);
    st.stddev_s = std::sqrt(ss / st.n_window);
    const double raw = st.mean_s + options_.threshold_sigmas * st.stddev_s;
    st.threshold_s = std::max(limits.floor_s, raw);
    if (limits.ceiling_s > 0) st.threshold_s = std::min(st.threshold_s, limits.ceiling_s);
    st.clamped = st.threshold_s != raw;
    st.from_window = true;
    st.has_threshold = true;
  } else if (limits.ceiling_s > 0) {
    st.threshold_s = limits.ceiling_s;  // no history yet: the SLO alone
    st.has_threshold = true;
  }
  if (st.p95_known && st.has_threshold) {
    st.breach = st.p95_s > st.threshold_s;
    st.calm = st.p95_s < options_.calm_fraction * st.threshold_s;
  }
  if (st.p95_known) {
    s.window.push_back(st.p95_s);
    if (s.window.size() > static_cast<size_t>(options_.window_intervals)) s.window.pop_front();
  }
  return st;
}

Decision RtSwitcher::CloseOne(std::chrono::steady_clock::time_point end) {
  Decision d;
  d.interval_end = end;
  d.threshold_sigmas = options_.threshold_sigmas;
  d.from_level = d.to_level = level_;
  d.ttft = Evaluate(ttft_, options_.ttft);
  d.tpot = Evaluate(tpot_, options_.tpot);
  auto calm_or_idle = [](const SignalStats& s) { return s.calm || s.idle; };
  d.n_refused = refused_;
  refused_ = 0;
  d.breach = d.ttft.breach || d.tpot.breach || d.n_refused > 0;
  d.calm = !d.breach && calm_or_idle(d.ttft) && calm_or_idle(d.tpot);
  if (d.breach) {
    ++breach_streak_;
    calm_streak_ = 0;
  } else if (d.calm) {
    ++calm_streak_;
    breach_streak_ = 0;
  } else {
    breach_streak_ = calm_streak_ = 0;
  }
  d.breach_streak = breach_streak_;
  d.calm_streak = calm_streak_;
  const int32_t bottom = static_cast<int32_t>(options_.levels.size()) - 1;
  int32_t next = level_;
  if (d.breach && breach_streak_ >= options_.breach_intervals && level_ < bottom) {
    next = level_ + 1;
  } else if (d.calm && calm_streak_ >= options_.calm_intervals && level_ > 0) {
    if (!hold_up_.empty()) {
      d.step_up_held = hold_up_;
      return d;
    }
    next = level_ - 1;
  }
  if (next == level_) return d;
  if (switched_ && end - last_switch_ < options_.min_dwell) {
    d.dwell_blocked = true;
    return d;
  }
  d.action = next > level_ ? SwitchAction::kStepDown : SwitchAction::kStepUp;
  d.to_level = next;
  level_ = next;
  current_.store(snapshots_[static_cast<size_t>(level_)]);
  switched_ = true;
  last_switch_ = end;
  breach_streak_ = calm_streak_ = 0;
  return d;
}

}  // namespace strata::gateway
