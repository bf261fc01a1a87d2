// `strata tune`: calibrate the simulator on a model, list the scenarios,
// find the knobs that matter (sensitivity) and the best trade-offs among
// them (pareto), each trial run on a server of its configuration
// (cli/tune_live.h) or in the simulator. docs/tuning.md says what each
// measures and writes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/serve_config.h"
#include "cli/serve_flags.h"
#include "cli/tune_live.h"
#include "cli/tune_report.h"
#include "cli/tune_tools.h"
#include "tune/live.h"
#include "tune/scenario.h"
#include "tune/search.h"
#include "tune/simulator.h"
#include "util/clock.h"

namespace strata::cli {
namespace {

using Json = nlohmann::json;

struct TuneFlags {
  // shared by sensitivity and pareto
  std::string out;
  std::string resume;
  std::vector<std::string> scenarios;
  std::string scenarios_dir = "bench/scenarios";
  bool simulate = false;
  double budget_s = 600;
  std::string config;
  std::string cost;
  uint64_t seed = 1;
  std::string log_level = "warn";
  // sensitivity
  int32_t steps = 3;
  double freeze_below = 0.05;
  // pareto
  int32_t population = 24;
  int32_t generations = 20;
  std::string frozen_from;
  double ttft_p99_slo_s = 0.8;
  double max_error_rate = 0.0002;
  // real trials and --simulate alike: seconds of each scenario; --check: picks run for real
  double trial_s = 0;
  int32_t check = 0;
  // simulate
  double duration_s = 0;
  // calibrate
  std::string model;
  int32_t threads = 2;
  std::string cost_out = "cost.json";
};

// Everything one search needs: the scenarios with their requests, the cost
// model, the journal, the budget and the progress line.
class Trials {
 public:
  static util::StatusOr<std::unique_ptr<Trials>> Open(const Env& env, const TuneFlags& f,
                                                      const std::string& kind, util::Logger& log) {
    auto t = std::unique_ptr<Trials>(new Trials(env, f, log));
    STRATA_RETURN_IF_ERROR(t->Load(kind));
    return t;
  }

  const std::vector<std::string>& names() const { return names_; }
  bool simulated() const { return f_.simulate; }
  // What the trials were measured with: the cost model, or the served model.
  std::string source() const {
    return f_.simulate ? "simulated with the cost model of " + cost_.source
                       : "measured on a server of " + model_;
  }
  const std::string& dir() const { return dir_; }
  int64_t measured() const { return measured_; }
  int64_t replayed() const { return replayed_; }
  util::Status error() const { return error_; }
  // Syncs and closes the journal.
  util::Status Finish() {
    STRATA_RETURN_IF_ERROR(journal_->Sync());
    return journal_->Close();
  }
  const tune::SimConfig& base() const { return base_; }
  std::vector<double> slos() const {
    std::vector<double> out;
    for (const tune::Scenario& s : scenarios_) out.push_back(s.ttft_p99_slo_s);
    return out;
  }
  const ServeFlags& base_flags() const { return base_flags_; }

  tune::Evaluate Evaluator(int64_t planned) {
    planned_ = planned;
    return [this](size_t s, const tune::Settings& settings) { return Evaluate(s, settings); };
  }
  // Writes `text` to DIR/name.
  util::Status Write(const std::string& name, const std::string& text) {
    return env_.fs->WriteFileAtomic(dir_ + "/" + name, text);
  }
  // A line of progress on stderr (at most twice a second unless `force`).
  void Progress(const std::string& what, bool force = false) {
    const auto now = clock_.Now();
    if (!force && now - last_progress_ < std::chrono::milliseconds(f_.simulate ? 500 : 2000)) {
      return;
    }
    last_progress_ = now;
    const double left = std::max(0.0, f_.budget_s - util::SecondsBetween(start_, now));
    std::fprintf(stderr, "trial %lld of about %lld (%lld from the journal): %s; %.0f s left\n",
                 static_cast<long long>(measured_ + replayed_), static_cast<long long>(planned_),
                 static_cast<long long>(replayed_), what.c_str(), left);
  }

 private:
  Trials(const Env& env, const TuneFlags& f, util::Logger& log)
      : env_(env), f_(f), log_(log), clock_(util::RealClock()), start_(clock_.Now()) {}

  util::Status Load(const std::string& kind) {
    dir_ = !f_.resume.empty() ? f_.resume : f_.out;
    if (dir_.empty()) return util::InvalidArgumentError("--out DIR (or --resume DIR) is required");
    if (f_.check < 0 || f_.check > 64) {
      return util::InvalidArgumentError("--check must be in [0, 64]");
    }
    if (f_.check > 0 && !f_.simulate) {
      return util::InvalidArgumentError(
          "--check runs the simulator's picks for real: it goes with --simulate");
    }
    if (!(f_.trial_s >= 0 && f_.trial_s <= 86400)) {
      return util::InvalidArgumentError(
          fmt::format("--trial-s {} is outside [0, 86400]", f_.trial_s));
    }
    if (f_.threads < 1 || f_.threads > 1024) {
      return util::InvalidArgumentError("--threads must be in [1, 1024]");
    }
    if (!(f_.budget_s > 0 && f_.budget_s <= 7 * 86400)) {
      return util::InvalidArgumentError(
          fmt::format("--budget-s {} is outside (0, 604800]", f_.budget_s));
    }
    STRATA_ASSIGN_OR_RETURN(base_flags_, BaseFlags(env_, f_.config));
    base_ = SimConfigOf(base_flags_);
    const bool live = !f_.simulate || f_.check > 0;
    if (live && !base_flags_.backends.specs.empty()) {
      // A trial server runs the local engine on -m MODEL; upstreams are
      // not carried to it, so it would measure something else.
      return util::InvalidArgumentError(
          "real trials serve a local model (-m); the configuration's [[backend]] upstreams are "
          "not carried to trial servers: leave its [[backend]] tables out");
    }
    if (live) {
      // The trials' model: -m, else the configuration's, else serve's default.
      std::string flag = f_.model;
      if (flag.empty() && !base_flags_.model.empty()) flag = base_flags_.model.front();
      if (const size_t eq = flag.find('='); eq != std::string::npos) flag = flag.substr(eq + 1);
      STRATA_ASSIGN_OR_RETURN(model_, ResolveModelPath(env_, flag, log_));
    }
    if (!f_.simulate) {
      // Real trials measure; no cost model is read.
    } else if (!f_.cost.empty()) {
      STRATA_ASSIGN_OR_RETURN(std::string text, env_.fs->ReadFile(f_.cost));
      auto cost = tune::ParseCostModel(text);
      if (!cost.ok()) return util::InvalidArgumentError("--cost: " + cost.status().message());
      cost_ = *cost;
    } else {
      log_.Warn(
          "no --cost: the simulator uses its built-in cost model ({}); `strata tune calibrate "
          "-m MODEL` measures yours",
          cost_.source);
    }
    STRATA_ASSIGN_OR_RETURN(std::vector<tune::Scenario> all,
                            tune::LoadScenarios(*env_.fs, f_.scenarios_dir, f_.scenarios));
    for (tune::Scenario& s : all) {
      if (f_.trial_s > 0) s.duration_s = std::min(s.duration_s, f_.trial_s);
      std::vector<tune::RequestSpec> trace;
      if (s.arrival == tune::ArrivalProcess::kTrace) {
        auto text = env_.fs->ReadFile(s.trace);
        if (!text.ok()) {
          std::fprintf(stderr, "scenario %s skipped: its trace %s cannot be read (%s)\n",
                       s.name.c_str(), s.trace.c_str(), text.status().message().c_str());
          continue;
        }
        STRATA_ASSIGN_OR_RETURN(tune::ParsedTrace parsed, tune::ParseTrace(s.trace_format, *text));
        trace = std::move(parsed.requests);
      }
      STRATA_ASSIGN_OR_RETURN(auto requests, tune::Requests(s, f_.seed, &trace));
      if (live) {
        tune::PromptPool pool;
        if (!s.prompt_file.empty()) {
          auto text = env_.fs->ReadFile(s.prompt_file);
          auto parsed = text.ok() ? tune::ParsePromptPool(*text)
                                  : util::StatusOr<tune::PromptPool>(text.status());
          if (parsed.ok()) {
            pool = std::move(*parsed);
          } else {
            log_.Warn("scenario {}: its prompts file {} cannot be used ({}); made-up questions",
                      s.name, s.prompt_file, parsed.status().message());
          }
        }
        texts_.emplace_back(s, requests, pool, f_.seed);
        references_.emplace_back();
      }
      names_.push_back(s.name);
      requests_.push_back(std::move(requests));
      scenarios_.push_back(std::move(s));
    }
    if (scenarios_.empty()) return util::FailedPreconditionError("no scenario could be loaded");
    STRATA_RETURN_IF_ERROR(env_.fs->CreateDirs(dir_));
    // The journal: a header, then one line per trial.
    const std::string path = dir_ + "/journal.jsonl";
    Json header = {{"kind", kind},        {"scenarios", names_},
                   {"seed", f_.seed},     {"mode", f_.simulate ? "simulate" : "real"},
                   {"config", f_.config}, {"trial_s", f_.trial_s}};
    if (f_.simulate) header["cost"] = cost_.source;
    if (!f_.simulate) header["model"] = model_;
    if (!f_.resume.empty()) {
      auto text = env_.fs->ReadFile(path);
      if (!text.ok()) {
        return util::InvalidArgumentError(
            fmt::format("--resume {}: no journal there ({})", dir_, text.status().message()));
      }
      STRATA_RETURN_IF_ERROR(Replay(*text, header));
    }
    // The journal is rewritten whole (what was replayed, read into memory
    // above), then every trial is appended as it ends: an interrupted run
    // loses at most the trial it was in.
    STRATA_ASSIGN_OR_RETURN(journal_, env_.fs->NewWritableFile(path));
    STRATA_RETURN_IF_ERROR(Append(header));
    for (const Json& line : kept_) STRATA_RETURN_IF_ERROR(Append(line));
    if (live) {
      LiveTrialOptions lo;
      lo.model = model_;
      lo.threads = f_.threads;
      lo.dir = dir_;
      STRATA_ASSIGN_OR_RETURN(live_, LiveTrials::Create(env_, lo, log_));
    }
    return util::OkStatus();
  }

  util::Status Replay(const std::string& text, const Json& header) {
    size_t at = 0;
    bool first = true;
    while (at < text.size()) {
      const size_t nl = std::min(text.find('\n', at), text.size());
      const std::string line = text.substr(at, nl - at);
      at = nl + 1;
      if (line.empty()) continue;
      Json j = Json::parse(line, nullptr, false);
      if (first) {
        first = false;
        if (j != header) {
          return util::InvalidArgumentError(
              fmt::format("--resume {}: its journal is of another run ({}); this one is {}", dir_,
                          j.is_discarded() ? "unreadable" : j.dump(), header.dump()));
        }
        continue;
      }
      // A line cut short by an interruption ends the journal.
      if (j.is_discarded() || !j.is_object() || !j.contains("key") || !j.contains("measured"))
        break;
      const Json& m = j["measured"];
      tune::Measured v;
      v.throughput = m.value("throughput", 0.0);
      v.ttft_p95_s = m.value("ttft_p95_s", 0.0);
      v.ttft_p99_s = m.value("ttft_p99_s", 0.0);
      v.error_rate = m.value("error_rate", 0.0);
      v.quality = m.value("quality", 1.0);
      cache_[j["key"].get<std::string>()] = v;
      kept_.push_back(std::move(j));
    }
    return util::OkStatus();
  }

  util::Status Append(const Json& line) {
    // (An upstream's error text may be cut inside a UTF-8 sequence: replaced, never thrown.)
    const std::string text = line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    return journal_->Append(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }

  std::optional<tune::Measured> Evaluate(size_t s, const tune::Settings& settings) {
    std::string key = names_[s];
    for (const auto& [k, v] : settings) key += fmt::format(",{}={}", k, v);
    if (auto it = cache_.find(key); it != cache_.end()) {
      ++replayed_;
      return it->second;
    }
    if (!error_.ok() || util::SecondsBetween(start_, clock_.Now()) > f_.budget_s) {
      return std::nullopt;
    }
    Json settings_json = Json::object();
    for (const auto& [k, v] : settings) settings_json[k] = v;
    Json line = {{"key", key}, {"scenario", names_[s]}, {"settings", settings_json}};
    std::optional<tune::Measured> measured =
        f_.simulate ? Simulated(s, settings, line) : Live(s, settings, line);
    if (!measured) return std::nullopt;
    const tune::Measured& m = *measured;
    ++measured_;
    cache_[key] = m;
    line["measured"] = {{"throughput", m.throughput},
                        {"ttft_p95_s", m.ttft_p95_s},
                        {"ttft_p99_s", m.ttft_p99_s},
                        {"error_rate", m.error_rate},
                        {"quality", m.quality}};
    const util::Status st = Append(line);
    if (!st.ok()) error_ = st;  // the search stops at the next trial, and says why
    return m;
  }

  tune::Measured Simulated(size_t s, const tune::Settings& settings, Json& line) {
    const tune::SimResult r =
        tune::Simulate(scenarios_[s], requests_[s], tune::Apply(base_, settings), cost_, f_.seed);
    line["requests"] = r.requests;
    line["errors"] = r.errors;
    line["prompt_tokens"] = {{"all", r.prompt_tokens}, {"cached", r.cached_prompt_tokens}};
    line["ttft_p50_s"] = r.ttft_p50_s;
    line["hits"] = {{"l1", r.l1_hits}, {"l3", r.l3_hits}, {"semantic", r.semantic_hits}};
    return {.throughput = r.throughput_rps,
            .ttft_p95_s = r.ttft_p95_s,
            .ttft_p99_s = r.ttft_p99_s,
            .error_rate = r.error_rate,
            .quality = r.quality};
  }

 public:
  // Scenario `s` replayed on a server of `settings` (a real trial). A
  // configuration whose server cannot run it counts as failing every
  // request; the base configuration failing stops the search (error()).
  std::optional<tune::Measured> Live(size_t s, const tune::Settings& settings, Json& line) {
    const ServeFlags flags = WithSettings(base_flags_, settings);
    auto progress = [&](size_t done, size_t of) {
      Progress(fmt::format("scenario {} on a server: {} of {} requests done", names_[s], done, of));
    };
    auto r = live_->Run(scenarios_[s], requests_[s], texts_[s], flags, references_[s], progress);
    if (!r.ok()) {
      if (ChangedKnobs(base_flags_, flags).empty()) {
        error_ = r.status();
        return std::nullopt;
      }
      log_.Warn(
          "scenario {}: a configuration could not be measured ({}); it counts as failing "
          "every request",
          names_[s], r.status().message());
      line["failed"] = r.status().message();
      return tune::Measured{
          .throughput = 0, .ttft_p95_s = 1e6, .ttft_p99_s = 1e6, .error_rate = 1, .quality = 0};
    }
    for (const std::string& e : r->first_errors) {
      log_.Warn("scenario {}: {}", names_[s], e);
    }
    if (r->answered == 0 && ChangedKnobs(base_flags_, flags).empty()) {
      error_ = util::FailedPreconditionError(fmt::format(
          "scenario {}: the base configuration answered none of {} requests{}", names_[s],
          r->requests, r->first_errors.empty() ? "" : " (" + r->first_errors.front() + ")"));
      return std::nullopt;
    }
    line["requests"] = r->requests;
    line["errors"] = r->errors;
    line["ttft_p50_s"] = r->ttft_p50_s;
    line["served"] = r->served;
    line["approximate_hits"] = r->approximate_hits;
    line["false_hits"] = r->false_hits;
    line["compared"] = {{"pairs", r->compared}, {"agreed", r->agreed}};
    line["log_likelihood_per_token"] = r->log_likelihood;
    if (!r->first_errors.empty()) line["first_errors"] = r->first_errors;
    return r->measured;
  }

 private:
  const Env& env_;
  const TuneFlags& f_;
  util::Logger& log_;
  const util::Clock& clock_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_progress_{};
  std::string dir_;
  ServeFlags base_flags_;
  tune::SimConfig base_;
  tune::CostModel cost_;
  std::vector<tune::Scenario> scenarios_;
  std::vector<std::string> names_;
  std::vector<std::vector<tune::WorkloadRequest>> requests_;
  std::string model_;                         // real trials' GGUF
  std::vector<tune::ScenarioText> texts_;     // real trials: per scenario
  std::vector<tune::References> references_;  // real trials: per scenario
  std::unique_ptr<LiveTrials> live_;
  std::map<std::string, tune::Measured> cache_;
  std::vector<Json> kept_;
  std::unique_ptr<util::WritableFile> journal_;
  int64_t planned_ = 0, measured_ = 0, replayed_ = 0;
  util::Status error_;
};

// A search that could not start: a usage error for what the flags (or the
// files they name) got wrong, a failure otherwise.
int OpenFailed(const util::Status& st) {
  return st.code() == util::StatusCode::kInvalidArgument ? UsageError(st.message())
                                                         : ReportError(st);
}

int Finished(Trials& t, const std::string& what) {
  if (util::Status st = t.Finish(); !st.ok()) return ReportError(st);
  if (!t.error().ok()) return ReportError(t.error());
  std::fprintf(stderr, "%s: %lld trials %s, %lld replayed from the journal; wrote %s\n",
               what.c_str(), static_cast<long long>(t.measured()),
               t.simulated() ? "simulated" : "run on a server",
               static_cast<long long>(t.replayed()), t.dir().c_str());
  return kExitOk;
}

int RunSensitivity(const Env& env, const TuneFlags& f) {
  if (f.steps < 1 || f.steps > 8) return UsageError("--steps must be in [1, 8]");
  if (!(f.freeze_below >= 0 && f.freeze_below <= 100)) {
    return UsageError("--freeze-below must be in [0, 100]");
  }
  auto log = MakeLogger(f.log_level);
  auto trials = Trials::Open(env, f, "sensitivity", *log);
  if (!trials.ok()) return OpenFailed(trials.status());
  Trials& t = **trials;
  const std::vector<tune::TuneKnob> knobs = tune::KnobsFor(t.base());
  int64_t planned = 0;
  for (const tune::TuneKnob& k : knobs) {
    for (int32_t d = -f.steps; d <= f.steps; ++d) {
      const auto j = static_cast<int64_t>(k.base) + d;
      planned += d != 0 && j >= 0 && j < static_cast<int64_t>(k.values.size());
    }
  }
  planned = (planned + 1) * static_cast<int64_t>(t.names().size());
  tune::Evaluate inner = t.Evaluator(planned);
  tune::Evaluate evaluate = [&](size_t s, const tune::Settings& x) {
    t.Progress(fmt::format("scenario {}", t.names()[s]));
    return inner(s, x);
  };
  const tune::SensitivityResult r =
      tune::Sensitivity(t.names(), knobs, f.steps, f.freeze_below, evaluate);
  std::string frozen;
  for (const std::string& k : r.frozen) frozen += k + "\n";
  for (const auto& [name, text] :
       {std::pair{"sensitivity.csv", SensitivityCsv(r)},
        std::pair{"sensitivity.svg", SensitivitySvg(r, t.names(), knobs, f.freeze_below)},
        std::pair{"frozen.txt", frozen}}) {
    if (util::Status st = t.Write(name, text); !st.ok()) return ReportError(st);
  }
  std::printf("%-22s %s\n", "knob", "largest sensitivity over the scenarios");
  for (const tune::TuneKnob& k : knobs) {
    double largest = 0;
    for (const tune::SensitivityRow& row : r.rows) {
      if (row.knob == k.key) largest = std::max(largest, row.largest());
    }
    const bool is_frozen = std::find(r.frozen.begin(), r.frozen.end(), k.key) != r.frozen.end();
    std::printf("%-22s %.3f%s\n", k.key.c_str(), largest, is_frozen ? "  (frozen)" : "");
  }
  if (!r.complete) {
    std::fprintf(stderr, "the time budget ran out before every trial; --resume %s goes on\n",
                 t.dir().c_str());
  }
  return Finished(t, "sensitivity");
}

// --check N: the base configuration, the chosen point and the next best
// of the front (by throughput ratio over TTFT ratio), up to N besides the
// base, each run on a server on every scenario beside what the simulator
// predicted: check.csv, and the simulator's errors on stdout.
int CheckPicks(Trials& t, const tune::ParetoResult& r,
               const std::optional<tune::ParetoPoint>& chosen, int32_t n) {
  std::vector<std::pair<std::string, const tune::ParetoPoint*>> picks = {{"base", &r.base}};
  if (chosen) picks.emplace_back("chosen", &*chosen);
  std::vector<const tune::ParetoPoint*> front;
  for (const tune::ParetoPoint& p : r.front) front.push_back(&p);
  std::sort(front.begin(), front.end(), [](const auto* a, const auto* b) {
    return a->throughput_ratio / a->ttft_p95_ratio > b->throughput_ratio / b->ttft_p95_ratio;
  });
  for (const tune::ParetoPoint* p : front) {
    if (static_cast<int32_t>(picks.size()) > n) break;
    if ((chosen && p->settings == chosen->settings) || p->settings == r.base.settings) continue;
    picks.emplace_back(fmt::format("front-{}", picks.size() - (chosen ? 1 : 0)), p);
  }
  std::fprintf(stderr, "checking %zu configurations on a server, on %zu scenarios each ...\n",
               picks.size(), t.names().size());
  std::string csv =
      "point,scenario,sim_throughput,real_throughput,sim_ttft_p95_s,real_ttft_p95_s,"
      "ttft_p95_error,sim_quality,real_quality,sim_error_rate,real_error_rate\n";
  std::vector<double> p95_errors, rps_errors;
  std::printf("%-9s %-22s %17s %23s %8s %15s %17s\n", "point", "scenario", "req/s sim / real",
              "P95 TTFT ms sim / real", "error", "quality sim/real", "errors sim / real");
  for (const auto& [label, p] : picks) {
    for (size_t i = 0; i < t.names().size() && i < p->per_scenario.size(); ++i) {
      const tune::Measured& sim = p->per_scenario[i];
      Json unused;
      const std::optional<tune::Measured> real = t.Live(i, p->settings, unused);
      if (!real) return ReportError(t.error());
      const double err =
          real->ttft_p95_s > 0 ? (sim.ttft_p95_s - real->ttft_p95_s) / real->ttft_p95_s : 0;
      if (real->ttft_p95_s > 0) p95_errors.push_back(std::abs(err));
      if (real->throughput > 0) {
        rps_errors.push_back(std::abs(sim.throughput - real->throughput) / real->throughput);
      }
      csv += fmt::format("{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.6f},{:.6f}\n",
                         label, t.names()[i], sim.throughput, real->throughput, sim.ttft_p95_s,
                         real->ttft_p95_s, err, sim.quality, real->quality, sim.error_rate,
                         real->error_rate);
      std::printf("%-9s %-22s %8.2f / %6.2f %11.0f / %9.0f %+7.0f%% %7.3f / %5.3f %8.4f / %6.4f\n",
                  label.c_str(), t.names()[i].c_str(), sim.throughput, real->throughput,
                  sim.ttft_p95_s * 1e3, real->ttft_p95_s * 1e3, err * 100, sim.quality,
                  real->quality, sim.error_rate, real->error_rate);
    }
  }
  if (util::Status st = t.Write("check.csv", csv); !st.ok()) return ReportError(st);
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf(
      "the simulator's median absolute error: P95 TTFT %.0f%%, throughput %.0f%% (%zu runs; "
      "check.csv)\n",
      median(p95_errors) * 100, median(rps_errors) * 100, p95_errors.size());
  return kExitOk;
}

int RunPareto(const Env& env, const TuneFlags& f) {
  if (f.population < 4 || f.population > 1024)
    return UsageError("--population must be in [4, 1024]");
  if (f.generations < 0 || f.generations > 10000) {
    return UsageError("--generations must be in [0, 10000]");
  }
  if (!(f.ttft_p99_slo_s > 0) || !(f.max_error_rate >= 0 && f.max_error_rate < 1)) {
    return UsageError("--ttft-p99-slo must be > 0 and --max-error-rate in [0, 1)");
  }
  auto log = MakeLogger(f.log_level);
  auto trials = Trials::Open(env, f, "pareto", *log);
  if (!trials.ok()) return OpenFailed(trials.status());
  Trials& t = **trials;
  std::vector<tune::TuneKnob> knobs = tune::KnobsFor(t.base());
  if (!f.frozen_from.empty()) {
    auto text = env.fs->ReadFile(f.frozen_from + "/frozen.txt");
    if (!text.ok()) {
      return UsageError(
          fmt::format("--frozen-from {}: {}", f.frozen_from, text.status().message()));
    }
    std::erase_if(knobs, [&](const tune::TuneKnob& k) {
      return text->find(k.key + "\n") != std::string::npos;
    });
    std::fprintf(stderr, "searching %zu knobs (the rest frozen by %s)\n", knobs.size(),
                 f.frozen_from.c_str());
  }
  if (knobs.empty()) return UsageError("every knob is frozen: nothing to search");
  tune::ParetoOptions o{.population = f.population,
                        .generations = f.generations,
                        .seed = f.seed,
                        .constraints = {.ttft_p99_slo_s = f.ttft_p99_slo_s,
                                        .per_scenario_slo_s = t.slos(),
                                        .max_error_rate = f.max_error_rate}};
  const int64_t planned = static_cast<int64_t>(f.population) * (f.generations + 1) *
                          static_cast<int64_t>(t.names().size());
  tune::Evaluate evaluate = t.Evaluator(planned);
  std::string best_so_far = "measuring the first generation";
  auto progress = [&](int32_t gen, int32_t of, const tune::ParetoResult& now) {
    auto chosen = tune::ChoosePoint(now);
    best_so_far = chosen ? fmt::format(
                               "generation {} of {}: front of {}, best throughput ×{:.2f} at P95 "
                               "TTFT ×{:.2f}, quality {:.4f}",
                               gen, of, now.front.size(), chosen->throughput_ratio,
                               chosen->ttft_p95_ratio, chosen->quality)
                         : fmt::format("generation {} of {}: no feasible point yet", gen, of);
    t.Progress(best_so_far, /*force=*/true);
  };
  tune::Evaluate with_progress = [&](size_t s, const tune::Settings& x) {
    t.Progress(best_so_far);
    return evaluate(s, x);
  };
  const tune::ParetoResult r = tune::Pareto(t.names().size(), knobs, o, with_progress, progress);
  const std::optional<tune::ParetoPoint> chosen = tune::ChoosePoint(r);
  std::vector<std::pair<std::string, std::string>> files = {
      {"front.csv", FrontCsv(r, knobs)},
      {"front.html", FrontHtml(r, knobs, t.names(), chosen ? &*chosen : nullptr, t.source())}};
  if (chosen) {
    std::string scenarios;
    for (const std::string& n : t.names()) scenarios += (scenarios.empty() ? "" : ", ") + n;
    files.emplace_back(
        "best.toml",
        RenderConfig(
            WithSettings(t.base_flags(), chosen->settings),
            fmt::format("strata tune pareto: throughput x{:.3f}, P95 TTFT x{:.3f} of the "
                        "base configuration{}, lowest quality {:.4f},\nover {} ({}).\nEvery "
                        "knob that differs from serve's defaults: strata serve --config "
                        "best.toml.",
                        chosen->throughput_ratio, chosen->ttft_p95_ratio,
                        f.config.empty() ? " (serve's defaults)" : " (" + f.config + ")",
                        chosen->quality, scenarios, t.source())));
  }
  for (const auto& [name, text] : files) {
    if (util::Status st = t.Write(name, text); !st.ok()) return ReportError(st);
  }
  if (chosen) {
    std::printf("chosen: throughput x%.3f, P95 TTFT x%.3f, quality %.4f (base %.4f)\n",
                chosen->throughput_ratio, chosen->ttft_p95_ratio, chosen->quality, r.base.quality);
    for (size_t i = 0; i < t.names().size() && i < chosen->per_scenario.size(); ++i) {
      const tune::Measured& a = r.base.per_scenario[i];
      const tune::Measured& b = chosen->per_scenario[i];
      std::printf(
          "  %-22s %7.3f -> %7.3f req/s   P95 TTFT %7.0f -> %7.0f ms   quality %.4f -> "
          "%.4f\n",
          t.names()[i].c_str(), a.throughput, b.throughput, a.ttft_p95_s * 1e3, b.ttft_p95_s * 1e3,
          a.quality, b.quality);
    }
  } else {
    std::printf(
        "no configuration met the constraints (P99 TTFT within each scenario's SLO, "
        "default %.3f s; error rate <= %g) without losing quality; see front.html. The "
        "base configuration:\n",
        f.ttft_p99_slo_s, f.max_error_rate);
    for (size_t i = 0; i < t.names().size() && i < r.base.per_scenario.size(); ++i) {
      const tune::Measured& a = r.base.per_scenario[i];
      // The best any configuration measured did on this scenario alone.
      double best_p99 = a.ttft_p99_s, best_errors = a.error_rate;
      for (const tune::ParetoPoint& p : r.evaluated) {
        if (i >= p.per_scenario.size()) continue;
        best_p99 = std::min(best_p99, p.per_scenario[i].ttft_p99_s);
        best_errors = std::min(best_errors, p.per_scenario[i].error_rate);
      }
      const bool unreachable =
          best_p99 > o.constraints.SloFor(i) || best_errors > o.constraints.max_error_rate;
      std::printf("  %-22s %7.3f req/s   P99 TTFT %7.0f ms (SLO %.0f)   errors %.4f%s\n",
                  t.names()[i].c_str(), a.throughput, a.ttft_p99_s * 1e3,
                  o.constraints.SloFor(i) * 1e3, a.error_rate,
                  unreachable ? fmt::format("   no configuration met it (best P99 {:.0f} ms, "
                                            "errors {:.4f}): raise its SLO or leave it out",
                                            best_p99 * 1e3, best_errors)
                                    .c_str()
                              : "");
    }
  }
  if (!r.complete) {
    std::fprintf(stderr,
                 "the time budget ran out before the last generation; --resume %s goes on\n",
                 t.dir().c_str());
  }
  if (f.check > 0) {
    if (const int rc = CheckPicks(t, r, chosen, f.check); rc != kExitOk) return rc;
  }
  return Finished(t, "pareto");
}

void SearchFlags(CLI::App* cmd, TuneFlags& f) {
  cmd->add_option("--out", f.out, "Directory for the results and the journal");
  cmd->add_option("--resume", f.resume,
                  "Go on with an interrupted run from its directory's journal (the same flags)");
  cmd->add_option("--scenario", f.scenarios, "Scenarios to run (repeatable; default: all)");
  cmd->add_option("--scenarios-dir", f.scenarios_dir, "Where the scenario files are")
      ->capture_default_str();
  cmd->add_flag("--simulate", f.simulate,
                "Evaluate configurations with the calibrated simulator (thousands per minute); "
                "without it, each trial runs the scenario on a strata serve of its configuration");
  cmd->add_option("-m,--model", f.model,
                  "Real trials: the GGUF model they serve (default: the configuration's, else as "
                  "for serve)");
  cmd->add_option("-t,--threads", f.threads, "Real trials: the server's forward-pass threads")
      ->capture_default_str();
  cmd->add_option("--trial-s", f.trial_s,
                  "Seconds of each scenario's arrivals a trial replays (0 = the scenario's "
                  "duration); the simulator uses the same");
  cmd->add_option("--budget-s", f.budget_s,
                  "Seconds the search may take; it stops with what it "
                  "has, resumable")
      ->capture_default_str();
  cmd->add_option("--config", f.config,
                  "The configuration to start from (a strata serve TOML file; default: serve's "
                  "defaults)");
  cmd->add_option("--cost", f.cost, "The cost model (strata tune calibrate's JSON)");
  cmd->add_option("--seed", f.seed, "Seed of the workloads and the search")->capture_default_str();
  cmd->add_option("--log-level", f.log_level, "debug, info, warn, error or off")
      ->capture_default_str();
}

}  // namespace

Command RegisterTune(CLI::App& app) {
  auto f = std::make_shared<TuneFlags>();
  auto which = std::make_shared<std::string>();
  CLI::App* tune = app.add_subcommand(
      "tune", "Find the settings that balance throughput, time to first token and quality");
  tune->require_subcommand(1);
  CLI::App* cal = tune->add_subcommand(
      "calibrate", "Measure the engine's costs on this machine for the simulator");
  cal->add_option("-m,--model", f->model, "GGUF model file (default: as for generate)");
  cal->add_option("-t,--threads", f->threads, "Threads of the forward pass")->capture_default_str();
  cal->add_option("-o,--output", f->cost_out, "The cost model file to write")
      ->capture_default_str();
  cal->callback([which] { *which = "calibrate"; });
  CLI::App* sim = tune->add_subcommand(
      "simulate",
      "One configuration in the simulator: per scenario, throughput, TTFT, errors, "
      "quality and cache hits");
  sim->add_option("--config", f->config, "The configuration (default: serve's defaults)");
  sim->add_option("--cost", f->cost, "The cost model (strata tune calibrate's JSON)");
  sim->add_option("--scenario", f->scenarios, "Scenarios to run (repeatable; default: all)");
  sim->add_option("--scenarios-dir", f->scenarios_dir, "Where the scenario files are")
      ->capture_default_str();
  sim->add_option("--duration", f->duration_s, "Seconds of arrivals instead of each scenario's");
  sim->add_option("--seed", f->seed, "Seed of the workloads")->capture_default_str();
  sim->add_option("--json", f->out, "Also write the numbers to this file");
  sim->callback([which] { *which = "simulate"; });
  CLI::App* list = tune->add_subcommand("scenarios", "List the scenarios and what they measure");
  list->add_option("--scenarios-dir", f->scenarios_dir, "Where the scenario files are")
      ->capture_default_str();
  list->callback([which] { *which = "scenarios"; });
  CLI::App* sens = tune->add_subcommand(
      "sensitivity",
      "Move each knob alone around the base configuration on every scenario: a normalised "
      "sensitivity matrix (CSV, SVG heat map) and the knobs too weak to tune (frozen.txt)");
  SearchFlags(sens, *f);
  sens->add_option("--steps", f->steps, "Values tried on each side of each knob's base value")
      ->capture_default_str();
  sens->add_option("--freeze-below", f->freeze_below,
                   "Freeze knobs whose largest sensitivity is below this")
      ->capture_default_str();
  sens->callback([which] { *which = "sensitivity"; });
  CLI::App* par = tune->add_subcommand(
      "pareto",
      "Search the knobs (NSGA-II) for the front of throughput, P95 TTFT and quality under the "
      "P99 TTFT SLO and error-rate constraints: front.csv, front.html and best.toml");
  SearchFlags(par, *f);
  par->add_option("--population", f->population, "Configurations per generation")
      ->capture_default_str();
  par->add_option("--generations", f->generations, "Generations")->capture_default_str();
  par->add_option("--check", f->check,
                  "With --simulate: run the base, the chosen point and the next best front points, "
                  "this many besides the base, on a server and report the simulator's error "
                  "(check.csv)")
      ->capture_default_str();
  par->add_option("--frozen-from", f->frozen_from,
                  "A sensitivity run's directory: its frozen knobs stay at their base value");
  par->add_option("--ttft-p99-slo", f->ttft_p99_slo_s,
                  "Seconds of P99 TTFT every scenario must "
                  "stay within")
      ->capture_default_str();
  par->add_option("--max-error-rate", f->max_error_rate,
                  "Error rate every scenario must stay "
                  "within")
      ->capture_default_str();
  par->callback([which] { *which = "pareto"; });
  return {tune, [f, which](const Env& env) {
            if (*which == "calibrate")
              return RunTuneCalibrate(env, f->model, f->threads, f->cost_out);
            if (*which == "scenarios") return RunTuneScenarios(env, f->scenarios_dir);
            if (*which == "simulate") {
              return RunTuneSimulate(env, {.config = f->config,
                                           .cost = f->cost,
                                           .scenarios = f->scenarios,
                                           .scenarios_dir = f->scenarios_dir,
                                           .duration_s = f->duration_s,
                                           .seed = f->seed,
                                           .json_out = f->out});
            }
            if (*which == "sensitivity") return RunSensitivity(env, *f);
            return RunPareto(env, *f);
          }};
}

}  // namespace strata::cli
