// The canary's ramp: segments, gates, steps, the state file.
#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tune/canary.h"
#include "util/stats.h"

namespace strata::tune {
namespace {

constexpr size_t kMaxTtftSamples = 4096;  // per segment and side: enough for a P99
constexpr size_t kBaselineWindow = 2048;  // the baseline's most recent outcomes per segment
constexpr size_t kMaxEvents = 64;         // kept, and written to the state file
constexpr std::string_view kAll = "*";
constexpr std::string_view kOther = "other";
constexpr int kStateVersion = 1;

int64_t UnixMs(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

double Ms(std::chrono::nanoseconds d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// The candidate's outcomes in the current step.
struct StepWindow {
  int64_t n = 0;
  int64_t errors = 0;
  std::deque<double> ttft_ms;  // the most recent kMaxTtftSamples
  int64_t pairs = 0;
  int64_t agreed = 0;
};

// The baseline's most recent outcomes (not reset by a step).
struct RollingWindow {
  struct Entry {
    bool error;
    double ttft_ms;  // < 0: none
  };
  std::deque<Entry> entries;
  int64_t errors = 0;
  size_t with_ttft = 0;

  void Add(bool error, double ttft_ms) {
    entries.push_back({error, ttft_ms});
    errors += error ? 1 : 0;
    with_ttft += ttft_ms >= 0 ? 1 : 0;
    if (entries.size() > kBaselineWindow) {
      errors -= entries.front().error ? 1 : 0;
      with_ttft -= entries.front().ttft_ms >= 0 ? 1 : 0;
      entries.pop_front();
    }
  }
  std::vector<double> Ttfts() const {
    std::vector<double> v;
    v.reserve(with_ttft);
    for (const Entry& e : entries) {
      if (e.ttft_ms >= 0) v.push_back(e.ttft_ms);
    }
    return v;
  }
};

struct Segment {
  StepWindow candidate;
  RollingWindow baseline;
};

double P99(std::vector<double> v) { return util::NearestRankQuantile(v, 0.99); }

struct Verdict {
  std::string reason;  // "" = passed (or not judged)
  std::string detail;
};

}  // namespace

struct CanaryController::Impl {
  Impl(const CanaryOptions& o, const util::Clock& c, util::FileSystem& f,
       obs::MetricsRegistry* metrics, util::Logger& l)
      : options(o), clock(c), fs(f), log(l) {
    if (metrics != nullptr) {
      weight_gauge = &metrics
                          ->Gauge("strata_canary_weight",
                                  "The canary candidate's share of new requests, in [0, 1].")
                          .With({});
      auto& rollbacks = metrics->Counter("strata_canary_rollbacks_total",
                                         "Canary rollbacks, by the gate that failed.", {"reason"});
      for (const char* r : {"errors", "ttft", "quality"}) rollbacks_[r] = &rollbacks.With({r});
      auto& requests = metrics->Counter(
          "strata_canary_requests_total",
          "Requests a canary judged, by side (baseline, candidate; mirrored runs included).",
          {"side"});
      requests_[0] = &requests.With({"baseline"});
      requests_[1] = &requests.With({"candidate"});
      auto& errors = metrics->Counter("strata_canary_errors_total",
                                      "Requests a canary judged that failed, by side.", {"side"});
      errors_[0] = &errors.With({"baseline"});
      errors_[1] = &errors.With({"candidate"});
      auto& mirrored = metrics->Counter(
          "strata_canary_mirrored_total",
          "Candidate answers compared with the baseline's, by result (agreed, disagreed).",
          {"result"});
      mirrored_[0] = &mirrored.With({"agreed"});
      mirrored_[1] = &mirrored.With({"disagreed"});
    }
  }

  const CanaryOptions options;
  const util::Clock& clock;
  util::FileSystem& fs;
  util::Logger& log;
  obs::GaugeValue* weight_gauge = nullptr;
  std::map<std::string, obs::CounterValue*> rollbacks_;
  obs::CounterValue* requests_[2] = {nullptr, nullptr};
  obs::CounterValue* errors_[2] = {nullptr, nullptr};
  obs::CounterValue* mirrored_[2] = {nullptr, nullptr};

  // What request threads read without the lock: the share and the phase,
  // published together by PublishLocked at every transition.
  std::atomic<double> weight{0};
  std::atomic<CanaryPhase> published_phase{CanaryPhase::kRamping};

  mutable std::mutex mu;  // guards everything below
  CanaryPhase phase = CanaryPhase::kRamping;
  size_t step = 0;  // index into options.steps while ramping
  std::chrono::steady_clock::time_point step_started;
  int64_t step_started_unix_ms = 0;
  bool hold_logged = false;
  std::map<std::string, Segment, std::less<>> segments;
  std::deque<CanaryEvent> events;

  // The ticker: Start's thread.
  std::thread ticker;
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopping = false;  // guarded by stop_mu

  int32_t PercentLocked() const {
    switch (phase) {
      case CanaryPhase::kRamping:
        return options.steps[step];
      case CanaryPhase::kPromoted:
        return 100;
      case CanaryPhase::kRolledBack:
        return 0;
    }
    return 0;
  }

  void PublishLocked() {
    const double w = PercentLocked() / 100.0;
    weight.store(w, std::memory_order_relaxed);
    published_phase.store(phase, std::memory_order_relaxed);
    if (weight_gauge != nullptr) weight_gauge->Set(w);
  }

  Segment& SegmentLocked(std::string_view name) {
    auto it = segments.find(name);
    if (it != segments.end()) return it->second;
    // "*" and "other" are always there; past the cap a new name is "other".
    if (segments.size() >= static_cast<size_t>(options.max_segments) + 2) {
      return segments[std::string(kOther)];
    }
    return segments[std::string(name)];
  }

  void StartStepLocked() {
    step_started = clock.Now();
    step_started_unix_ms = UnixMs(clock.WallNow());
    hold_logged = false;
    for (auto& [name, s] : segments) s.candidate = StepWindow{};
  }

  void AddEventLocked(CanaryEvent e) {
    events.push_back(std::move(e));
    while (events.size() > kMaxEvents) events.pop_front();
  }

  Verdict Judge(const std::string& name, const Segment& s) const {
    const StepWindow& c = s.candidate;
    const RollingWindow& b = s.baseline;
    const auto min = static_cast<int64_t>(options.min_samples);
    if (c.n >= min) {
      const double base_rate =
          b.entries.empty() ? 0 : static_cast<double>(b.errors) / b.entries.size();
      const double allowed = std::max(options.max_error_rate, base_rate);
      const double lower = util::WilsonInterval(c.errors, c.n).first;
      if (lower > allowed) {
        return {"errors",
                fmt::format("segment {}: {} of {} candidate requests failed (95 % lower bound "
                            "{:.4f} > {:.4f}; baseline {} of {})",
                            name, c.errors, c.n, lower, allowed, b.errors, b.entries.size())};
      }
    }
    if (c.ttft_ms.size() >= static_cast<size_t>(min)) {
      const double cp = P99(std::vector<double>(c.ttft_ms.begin(), c.ttft_ms.end()));
      const double slo = static_cast<double>(options.ttft_slo.count());
      if (b.with_ttft >= static_cast<size_t>(min)) {
        const double bp = P99(b.Ttfts());
        const double bound =
            options.ttft_ratio * bp + static_cast<double>(options.ttft_slack.count());
        if (cp > bound || (cp > slo && bp <= slo)) {
          return {"ttft",
                  fmt::format("segment {}: candidate P99 TTFT {:.0f} ms vs baseline {:.0f} ms "
                              "(allowed {:.0f} ms, SLO {:.0f} ms; {} and {} samples)",
                              name, cp, bp, bound, slo, c.ttft_ms.size(), b.with_ttft)};
        }
      } else if (cp > slo) {
        return {"ttft",
                fmt::format("segment {}: candidate P99 TTFT {:.0f} ms over the SLO {:.0f} ms "
                            "({} samples; too few baseline samples to compare)",
                            name, cp, slo, c.ttft_ms.size())};
      }
    }
    if (c.pairs >= options.min_pairs) {
      const double upper = util::WilsonInterval(c.agreed, c.pairs).second;
      if (upper < options.min_agreement) {
        return {"quality", fmt::format("segment {}: {} of {} mirrored answers agreed with the "
                                       "baseline's (95 % upper bound {:.3f} < {:.3f})",
                                       name, c.agreed, c.pairs, upper, options.min_agreement)};
      }
    }
    return {};
  }

  std::string Summary(const Segment& s) const {
    const StepWindow& c = s.candidate;
    std::string ttft = "-";
    if (!c.ttft_ms.empty()) {
      ttft = fmt::format("{:.0f} ms", P99(std::vector<double>(c.ttft_ms.begin(), c.ttft_ms.end())));
    }
    std::string base = "-";
    if (s.baseline.with_ttft > 0) base = fmt::format("{:.0f} ms", P99(s.baseline.Ttfts()));
    return fmt::format(
        "{} candidate requests, {} failed, P99 TTFT {} (baseline {}), {} of {} "
        "mirrored answers agreed",
        c.n, c.errors, ttft, base, c.agreed, c.pairs);
  }

  nlohmann::json EventJson(const CanaryEvent& e) const {
    return {{"at", e.at_unix_ms}, {"from", e.from_percent}, {"to", e.to_percent},
            {"what", e.what},     {"reason", e.reason},     {"detail", e.detail}};
  }

  // The state file's content.
  std::string PersistedLocked() const {
    nlohmann::json j;
    j["version"] = kStateVersion;
    j["id"] = options.id;
    j["phase"] = std::string(CanaryPhaseName(phase));
    j["step"] = step;
    j["percent"] = PercentLocked();
    j["events"] = nlohmann::json::array();
    for (const CanaryEvent& e : events) j["events"].push_back(EventJson(e));
    return j.dump(2) + "\n";
  }

  void Save(const std::string& text) {
    if (options.state_file.empty()) return;
    if (util::Status st = fs.WriteFileAtomic(options.state_file, text); !st.ok()) {
      log.Error("canary: cannot write the ramp's state to {}: {}", options.state_file,
                st.ToString());
    }
  }

  // Reads the state file; a fresh ramp when there is none, it does not
  // parse, or it is another candidate's.
  void Resume() {
    if (options.state_file.empty() || !fs.Exists(options.state_file)) return;
    auto text = fs.ReadFile(options.state_file);
    if (!text.ok()) {
      log.Warn("canary: cannot read {} ({}); starting the ramp afresh", options.state_file,
               text.status().ToString());
      return;
    }
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    const bool shaped = j.is_object() && j.value("version", 0) == kStateVersion &&
                        j.contains("id") && j["id"].is_string() && j.contains("phase") &&
                        j["phase"].is_string() && j.contains("step") &&
                        j["step"].is_number_unsigned();
    if (!shaped) {
      log.Warn("canary: {} is not a canary state file of this version; starting the ramp afresh",
               options.state_file);
      return;
    }
    if (j["id"].get<std::string>() != options.id) {
      log.Info("canary: {} is the ramp of another candidate ({}); starting afresh",
               options.state_file, j["id"].get<std::string>());
      return;
    }
    const std::string p = j["phase"].get<std::string>();
    const size_t s = j["step"].get<size_t>();
    if (p == "promoted") {
      phase = CanaryPhase::kPromoted;
    } else if (p == "rolled_back") {
      phase = CanaryPhase::kRolledBack;
    } else if (p == "ramping" && s < options.steps.size()) {
      step = s;
    } else {
      log.Warn("canary: {} holds an unknown phase or step; starting the ramp afresh",
               options.state_file);
      return;
    }
    if (j.contains("events") && j["events"].is_array()) {
      for (const auto& e : j["events"]) {
        if (!e.is_object()) continue;
        CanaryEvent ev;
        ev.at_unix_ms = e.value("at", int64_t{0});
        ev.from_percent = e.value("from", 0);
        ev.to_percent = e.value("to", 0);
        ev.what = e.value("what", std::string());
        ev.reason = e.value("reason", std::string());
        ev.detail = e.value("detail", std::string());
        events.push_back(std::move(ev));
        if (events.size() > kMaxEvents) events.pop_front();
      }
    }
    const int32_t percent = PercentLocked();
    AddEventLocked({.at_unix_ms = UnixMs(clock.WallNow()),
                    .from_percent = percent,
                    .to_percent = percent,
                    .what = "resumed",
                    .reason = "",
                    .detail = fmt::format("from {}", options.state_file)});
    switch (phase) {
      case CanaryPhase::kRamping:
        log.Info("canary: resuming the ramp at step {} of {} ({}%) from {}", step + 1,
                 options.steps.size(), percent, options.state_file);
        break;
      case CanaryPhase::kPromoted:
        log.Info("canary: the candidate was promoted (from {}); it takes every request",
                 options.state_file);
        break;
      case CanaryPhase::kRolledBack:
        log.Warn(
            "canary: the candidate was rolled back (from {}); it takes no requests until "
            "that file is removed or the canary changes",
            options.state_file);
        break;
    }
  }

  void Run() {
    std::unique_lock lock(stop_mu);
    while (!stopping) {
      stop_cv.wait_for(lock, options.tick);
      if (stopping) break;
      lock.unlock();
      Tick();
      lock.lock();
    }
  }

  void Tick() {
    std::string persisted;
    {
      std::lock_guard lock(mu);
      if (phase != CanaryPhase::kRamping) return;
      const int32_t percent = PercentLocked();
      // Each segment before all requests together, so a failure names the
      // segment it is in.
      std::vector<std::pair<const std::string*, const Segment*>> order;
      for (const auto& [name, s] : segments) {
        if (name != kAll) order.emplace_back(&name, &s);
      }
      const auto together = segments.find(kAll);
      order.emplace_back(&together->first, &together->second);
      for (const auto& [name, s] : order) {
        Verdict v = Judge(*name, *s);
        if (v.reason.empty()) continue;
        phase = CanaryPhase::kRolledBack;
        PublishLocked();
        if (auto it = rollbacks_.find(v.reason); it != rollbacks_.end()) it->second->Inc();
        log.Warn("canary: rolled back at {}% ({}): {}", percent, v.reason, v.detail);
        AddEventLocked({.at_unix_ms = UnixMs(clock.WallNow()),
                        .from_percent = percent,
                        .to_percent = 0,
                        .what = "rolled_back",
                        .reason = v.reason,
                        .detail = v.detail});
        persisted = PersistedLocked();
        break;
      }
      if (persisted.empty() && clock.Now() - step_started >= options.step_time) {
        const Segment& all = segments[std::string(kAll)];
        if (all.candidate.n < options.min_samples) {
          if (!hold_logged) {
            log.Info("canary: holding at {}%: {} of the {} candidate requests a step needs",
                     percent, all.candidate.n, options.min_samples);
            hold_logged = true;
          }
        } else {
          const std::string summary = Summary(all);
          CanaryEvent e{.at_unix_ms = UnixMs(clock.WallNow()),
                        .from_percent = percent,
                        .to_percent = 100,
                        .what = "promoted",
                        .reason = "",
                        .detail = summary};
          if (step + 1 < options.steps.size()) {
            ++step;
            e.to_percent = options.steps[step];
            e.what = "step";
            log.Info("canary: {}% -> {}%: {}", percent, e.to_percent, summary);
          } else {
            phase = CanaryPhase::kPromoted;
            log.Info("canary: promoted (the candidate takes every request): {}", summary);
          }
          AddEventLocked(std::move(e));
          StartStepLocked();
          PublishLocked();
          persisted = PersistedLocked();
        }
      }
      // Written before the lock is left: what StateJson shows of a
      // transition is on disk (the weight changed at once; a crash before
      // the write resumes the step before, the safer side).
      if (!persisted.empty()) Save(persisted);
    }
  }
};

util::Status ValidateCanaryOptions(const CanaryOptions& o) {
  using util::InvalidArgumentError;
  if (o.steps.empty() || o.steps.size() > 100) {
    return InvalidArgumentError("canary steps: give 1 to 100 percentages, the last 100");
  }
  for (size_t i = 0; i < o.steps.size(); ++i) {
    if (o.steps[i] < 1 || o.steps[i] > 100 || (i > 0 && o.steps[i] <= o.steps[i - 1])) {
      return InvalidArgumentError(
          "canary steps: each percentage in [1, 100] and above the one before it");
    }
  }
  if (o.steps.back() != 100) return InvalidArgumentError("canary steps: the last step must be 100");
  if (o.step_time < std::chrono::seconds(1) || o.step_time > std::chrono::hours(24 * 7)) {
    return InvalidArgumentError("canary step time must be in [1 s, 7 days]");
  }
  if (o.min_samples < 1 || o.min_samples > 1'000'000) {
    return InvalidArgumentError("canary min samples must be in [1, 10^6]");
  }
  if (o.min_pairs < 1 || o.min_pairs > 1'000'000) {
    return InvalidArgumentError("canary min pairs must be in [1, 10^6]");
  }
  if (!(o.max_error_rate >= 0 && o.max_error_rate < 1)) {
    return InvalidArgumentError("canary max error rate must be in [0, 1)");
  }
  if (!(o.ttft_ratio >= 1 && o.ttft_ratio <= 100)) {
    return InvalidArgumentError("canary TTFT ratio must be in [1, 100]");
  }
  if (o.ttft_slack.count() < 0 || o.ttft_slack > std::chrono::hours(1)) {
    return InvalidArgumentError("canary TTFT slack must be in [0, 1 h]");
  }
  if (o.ttft_slo.count() < 1 || o.ttft_slo > std::chrono::hours(1)) {
    return InvalidArgumentError("canary TTFT SLO must be in [1 ms, 1 h]");
  }
  if (!(o.min_agreement > 0 && o.min_agreement <= 1)) {
    return InvalidArgumentError("canary min agreement must be in (0, 1]");
  }
  if (!(o.agree_similarity > 0 && o.agree_similarity <= 1)) {
    return InvalidArgumentError("canary agreement similarity must be in (0, 1]");
  }
  if (!(o.mirror >= 0 && o.mirror <= 1)) {
    return InvalidArgumentError("canary mirror share must be in [0, 1]");
  }
  if (o.max_mirrors < 0 || o.max_mirrors > 1024) {
    return InvalidArgumentError("canary max mirrors must be in [0, 1024]");
  }
  if (o.max_segments < 1 || o.max_segments > 4096) {
    return InvalidArgumentError("canary max segments must be in [1, 4096]");
  }
  if (o.tick < std::chrono::milliseconds(10) || o.tick > std::chrono::minutes(1)) {
    return InvalidArgumentError("canary tick must be in [10 ms, 1 min]");
  }
  return util::OkStatus();
}

util::StatusOr<std::vector<int32_t>> ParseCanarySteps(std::string_view text) {
  std::vector<int32_t> steps;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    std::string_view part = text.substr(pos, comma - pos);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    int32_t v = 0;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size()) {
      return util::InvalidArgumentError(fmt::format(
          "canary steps '{}': expected comma-separated percentages such as 5,25,50,100", text));
    }
    steps.push_back(v);
    pos = comma + 1;
  }
  CanaryOptions o;
  o.steps = steps;
  STRATA_RETURN_IF_ERROR(ValidateCanaryOptions(o));
  return steps;
}

std::string_view CanaryPhaseName(CanaryPhase phase) {
  switch (phase) {
    case CanaryPhase::kRamping:
      return "ramping";
    case CanaryPhase::kPromoted:
      return "promoted";
    case CanaryPhase::kRolledBack:
      return "rolled_back";
  }
  return "ramping";
}

util::StatusOr<std::unique_ptr<CanaryController>> CanaryController::Create(
    const CanaryOptions& options, const util::Clock& clock, util::FileSystem& fs,
    obs::MetricsRegistry* metrics, util::Logger& log) {
  STRATA_RETURN_IF_ERROR(ValidateCanaryOptions(options));
  auto impl = std::make_unique<Impl>(options, clock, fs, metrics, log);
  {
    std::lock_guard lock(impl->mu);
    impl->segments[std::string(kAll)];
    impl->segments[std::string(kOther)];
    impl->Resume();
    impl->StartStepLocked();
    impl->PublishLocked();
  }
  return std::unique_ptr<CanaryController>(new CanaryController(std::move(impl), options));
}

CanaryController::CanaryController(std::unique_ptr<Impl> impl, const CanaryOptions& options)
    : impl_(std::move(impl)), options_(options) {}

CanaryController::~CanaryController() {
  {
    std::lock_guard lock(impl_->stop_mu);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  if (impl_->ticker.joinable()) impl_->ticker.join();
}

void CanaryController::Start() {
  if (impl_->ticker.joinable()) return;
  impl_->ticker = std::thread([impl = impl_.get()] { impl->Run(); });
}

double CanaryController::Weight() const { return impl_->weight.load(std::memory_order_relaxed); }

CanaryPhase CanaryController::phase() const {
  return impl_->published_phase.load(std::memory_order_relaxed);
}

int32_t CanaryController::percent() const {
  std::lock_guard lock(impl_->mu);
  return impl_->PercentLocked();
}

void CanaryController::Record(const CanaryOutcome& o) {
  const int side = o.candidate ? 1 : 0;
  if (impl_->requests_[side] != nullptr) impl_->requests_[side]->Inc();
  if (o.error && impl_->errors_[side] != nullptr) impl_->errors_[side]->Inc();
  const double ttft = o.ttft ? Ms(*o.ttft) : -1.0;
  std::lock_guard lock(impl_->mu);
  if (impl_->phase != CanaryPhase::kRamping) return;
  for (Segment* s : {&impl_->SegmentLocked(o.segment), &impl_->segments[std::string(kAll)]}) {
    if (o.candidate) {
      s->candidate.n++;
      s->candidate.errors += o.error ? 1 : 0;
      if (ttft >= 0) {
        s->candidate.ttft_ms.push_back(ttft);
        if (s->candidate.ttft_ms.size() > kMaxTtftSamples) s->candidate.ttft_ms.pop_front();
      }
    } else {
      s->baseline.Add(o.error, ttft);
    }
  }
}

void CanaryController::RecordAgreement(const std::string& segment, bool agreed) {
  if (impl_->mirrored_[agreed ? 0 : 1] != nullptr) impl_->mirrored_[agreed ? 0 : 1]->Inc();
  std::lock_guard lock(impl_->mu);
  if (impl_->phase != CanaryPhase::kRamping) return;
  for (Segment* s : {&impl_->SegmentLocked(segment), &impl_->segments[std::string(kAll)]}) {
    s->candidate.pairs++;
    s->candidate.agreed += agreed ? 1 : 0;
  }
}

void CanaryController::Tick() { impl_->Tick(); }

std::vector<CanaryEvent> CanaryController::Events() const {
  std::lock_guard lock(impl_->mu);
  return {impl_->events.begin(), impl_->events.end()};
}

std::string CanaryController::StateJson() const {
  std::lock_guard lock(impl_->mu);
  const Impl& m = *impl_;
  nlohmann::json j;
  j["id"] = m.options.id;
  j["phase"] = std::string(CanaryPhaseName(m.phase));
  j["percent"] = m.PercentLocked();
  j["step"] = m.step;
  j["steps"] = m.options.steps;
  j["step_seconds"] = std::chrono::duration<double>(m.options.step_time).count();
  j["step_started_unix_ms"] = m.step_started_unix_ms;
  j["events"] = nlohmann::json::array();
  for (const CanaryEvent& e : m.events) j["events"].push_back(m.EventJson(e));
  j["segments"] = nlohmann::json::array();
  for (const auto& [name, s] : m.segments) {
    if (s.candidate.n == 0 && s.baseline.entries.empty()) continue;
    auto p99 = [](std::vector<double> v) -> nlohmann::json {
      if (v.empty()) return nullptr;
      return P99(std::move(v));
    };
    j["segments"].push_back(
        {{"segment", name},
         {"candidate", s.candidate.n},
         {"baseline", s.baseline.entries.size()},
         {"candidate_errors", s.candidate.errors},
         {"baseline_errors", s.baseline.errors},
         {"candidate_ttft_p99_ms",
          p99(std::vector<double>(s.candidate.ttft_ms.begin(), s.candidate.ttft_ms.end()))},
         {"baseline_ttft_p99_ms", p99(s.baseline.Ttfts())},
         {"pairs", s.candidate.pairs},
         {"agreed", s.candidate.agreed}});
  }
  return j.dump();
}

}  // namespace strata::tune
