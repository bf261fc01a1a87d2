// `strata tune`: calibrate the simulator on a model, list the scenarios,
// find the knobs that matter (sensitivity) and the best trade-offs among
// them (pareto). docs/tuning.md says what each measures and writes.
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
#include "cli/tune_report.h"
#include "config/config.h"
#include "engine/engine.h"
#include "model/transformer.h"
#include "tune/scenario.h"
#include "tune/search.h"
#include "tune/simulator.h"
#include "util/clock.h"
#include "util/random.h"

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
  // simulate
  double duration_s = 0;
  // calibrate
  std::string model;
  int32_t threads = 2;
  std::string cost_out = "cost.json";
};

// The base configuration: serve's defaults, or a configuration file's values.
util::StatusOr<ServeFlags> BaseFlags(const Env& env, const std::string& path) {
  ServeFlags f;
  if (!path.empty()) {
    STRATA_ASSIGN_OR_RETURN(config::Document doc, ReadConfigFile(env, path, ServeFileSchema()));
    ApplyConfig(doc, {}, f);
  }
  return f;
}

// What the simulator models of `f`. A tier in opt-in mode serves only the
// requests that ask for it, and a scenario's never do: it counts as off.
tune::SimConfig SimConfigOf(const ServeFlags& f) {
  tune::SimConfig c;
  c.parallel = f.parallel;
  c.queue = f.queue;
  c.batch_tokens = f.batch_tokens;
  c.ctx = f.ctx;
  c.kv_tokens = f.kv_tokens;
  c.l1_bytes = static_cast<int64_t>(f.l1_bytes);
  c.l1_ttl_s = f.l1_ttl_s;
  c.coalesce = f.coalesce;
  c.l3 = f.cache.l3 == "on";
  c.l3_similarity = f.cache.l3_similarity;
  c.semantic = f.semantic.mode == "on";
  c.semantic_similarity = f.semantic.similarity;
  c.max_tokens_cap = f.max_tokens_cap;
  return c;
}

// `base` with the tuner's settings: the fields the simulator's knobs name.
// A tier switched off keeps the base's opt-in (it serves no scenario request either).
ServeFlags WithSettings(ServeFlags f, const tune::Settings& settings) {
  const tune::SimConfig base = SimConfigOf(f);
  for (const auto& [key, v] : settings) {
    if (v == tune::KnobValue(base, key)) continue;  // as it was (kv_tokens 0 stays 0)
    if (key == "engine.parallel") f.parallel = static_cast<int32_t>(v);
    if (key == "engine.batch_tokens") f.batch_tokens = static_cast<int32_t>(v);
    if (key == "engine.queue") f.queue = static_cast<int32_t>(v);
    if (key == "engine.kv_tokens") f.kv_tokens = static_cast<int32_t>(v);
    if (key == "l1.bytes") f.l1_bytes = static_cast<uint64_t>(v);
    if (key == "l1.ttl") f.l1_ttl_s = v;
    if (key == "cache.coalesce") f.coalesce = v != 0;
    if (key == "l3.mode") f.cache.l3 = v != 0 ? "on" : (f.cache.l3 == "on" ? "off" : f.cache.l3);
    if (key == "l3.similarity") f.cache.l3_similarity = v;
    if (key == "semantic.mode") {
      f.semantic.mode = v != 0 ? "on" : (f.semantic.mode == "on" ? "off" : f.semantic.mode);
    }
    if (key == "semantic.similarity") f.semantic.similarity = v;
    if (key == "limits.max_tokens_cap") f.max_tokens_cap = static_cast<int32_t>(v);
  }
  return f;
}

// A configuration file of every knob of `f` that differs from serve's
// defaults ([[backend]] tables are not repeated: the comment says so).
std::string RenderConfig(const ServeFlags& f, const std::string& comment) {
  std::map<std::string, std::vector<std::string>> tables;
  bool backends = false;
  for (const ServeKnob* k : ChangedKnobs(ServeFlags{}, f)) {
    if (k->knob.type == config::Type::kTables) {
      backends = true;
      continue;
    }
    const size_t dot = k->knob.key.find('.');
    tables[k->knob.key.substr(0, dot)].push_back(k->knob.key.substr(dot + 1) + " = " + k->get(f));
  }
  std::string out;
  std::string text = comment;
  if (backends) text += "\nThe base configuration's [[backend]] tables are not repeated here.";
  for (size_t at = 0; at < text.size();) {
    const size_t nl = std::min(text.find('\n', at), text.size());
    out += "# " + text.substr(at, nl - at) + "\n";
    at = nl + 1;
  }
  for (const auto& [table, lines] : tables) {
    out += "\n[" + table + "]\n";
    for (const std::string& l : lines) out += l + "\n";
  }
  return out;
}

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
  const std::string& cost_source() const { return cost_.source; }
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
    if (!force && now - last_progress_ < std::chrono::milliseconds(500)) return;
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
    if (!f_.simulate) {
      return util::InvalidArgumentError(
          "trials on a running server are not built yet: pass --simulate (the simulator, "
          "calibrated with `strata tune calibrate`)");
    }
    if (!(f_.budget_s > 0 && f_.budget_s <= 7 * 86400)) {
      return util::InvalidArgumentError(
          fmt::format("--budget-s {} is outside (0, 604800]", f_.budget_s));
    }
    STRATA_ASSIGN_OR_RETURN(base_flags_, BaseFlags(env_, f_.config));
    base_ = SimConfigOf(base_flags_);
    if (!f_.cost.empty()) {
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
      names_.push_back(s.name);
      requests_.push_back(std::move(requests));
      scenarios_.push_back(std::move(s));
    }
    if (scenarios_.empty()) return util::FailedPreconditionError("no scenario could be loaded");
    STRATA_RETURN_IF_ERROR(env_.fs->CreateDirs(dir_));
    // The journal: a header, then one line per trial.
    const std::string path = dir_ + "/journal.jsonl";
    const Json header = {{"kind", kind},         {"scenarios", names_}, {"seed", f_.seed},
                         {"cost", cost_.source}, {"mode", "simulate"},  {"config", f_.config}};
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
    const std::string text = line.dump() + "\n";
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
    const tune::SimResult r =
        tune::Simulate(scenarios_[s], requests_[s], tune::Apply(base_, settings), cost_, f_.seed);
    tune::Measured m{.throughput = r.throughput_rps,
                     .ttft_p95_s = r.ttft_p95_s,
                     .ttft_p99_s = r.ttft_p99_s,
                     .error_rate = r.error_rate,
                     .quality = r.quality};
    ++measured_;
    cache_[key] = m;
    Json settings_json = Json::object();
    for (const auto& [k, v] : settings) settings_json[k] = v;
    const util::Status st =
        Append({{"key", key},
                {"scenario", names_[s]},
                {"settings", settings_json},
                {"measured",
                 {{"throughput", m.throughput},
                  {"ttft_p95_s", m.ttft_p95_s},
                  {"ttft_p99_s", m.ttft_p99_s},
                  {"error_rate", m.error_rate},
                  {"quality", m.quality}}},
                {"requests", r.requests},
                {"errors", r.errors},
                {"prompt_tokens", {{"all", r.prompt_tokens}, {"cached", r.cached_prompt_tokens}}},
                {"ttft_p50_s", r.ttft_p50_s},
                {"hits", {{"l1", r.l1_hits}, {"l3", r.l3_hits}, {"semantic", r.semantic_hits}}}});
    if (!st.ok()) error_ = st;  // the search stops at the next trial, and says why
    return m;
  }

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
  std::fprintf(stderr, "%s: %lld trials simulated, %lld replayed from the journal; wrote %s\n",
               what.c_str(), static_cast<long long>(t.measured()),
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
      {"front.html", FrontHtml(r, knobs, t.names(), chosen ? &*chosen : nullptr, t.cost_source())}};
  if (chosen) {
    std::string scenarios;
    for (const std::string& n : t.names()) scenarios += (scenarios.empty() ? "" : ", ") + n;
    files.emplace_back(
        "best.toml",
        RenderConfig(
            WithSettings(t.base_flags(), chosen->settings),
            fmt::format("strata tune pareto: throughput x{:.3f}, P95 TTFT x{:.3f} of the "
                        "base configuration{}, lowest quality {:.4f},\nover {} (simulated "
                        "with the cost model of {}).\nEvery knob that differs from serve's "
                        "defaults: strata serve --config best.toml.",
                        chosen->throughput_ratio, chosen->ttft_p95_ratio,
                        f.config.empty() ? " (serve's defaults)" : " (" + f.config + ")",
                        chosen->quality, scenarios, t.cost_source())));
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
  return Finished(t, "pareto");
}

// The engine's costs on this machine: a prefill chunk's time per token, a
// decode step's fixed and per-sequence time, and attention's per context token.
int RunCalibrate(const Env& env, const TuneFlags& f) {
  if (f.threads < 1 || f.threads > 256) return UsageError("-t must be in [1, 256]");
  auto log = MakeLogger(f.log_level == "warn" ? "info" : f.log_level);
  auto path = ResolveModelPath(env, f.model, *log);
  if (!path.ok()) return ReportError(path.status());
  auto loaded = model::Model::Load(*env.fs, *path, {}, *log);
  if (!loaded.ok()) return ReportError(loaded.status());
  const model::Model& m = **loaded;
  engine::EngineOptions eo;
  eo.n_threads = f.threads;
  eo.n_ctx = std::min(m.config().n_ctx_train > 0 ? m.config().n_ctx_train : 4096, 4096);
  eo.n_seq_max = 16;
  auto created = engine::Engine::Create(m, eo, *log);
  if (!created.ok()) return ReportError(created.status());
  engine::Engine& eng = **created;
  const util::Clock& clock = util::RealClock();
  util::Rng rng(7);
  auto tokens = [&](int32_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t)
      x = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(m.config().n_vocab)));
    return t;
  };
  const int32_t chunk = std::min(256, eo.n_ctx / 4);
  // Sequences of `context` tokens each, then `steps` decode steps of all of
  // them together: seconds per step (the median of 3 runs).
  auto step_time = [&](int32_t batch, int32_t context, int32_t steps) -> util::StatusOr<double> {
    std::vector<double> runs;
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<engine::SeqId> seqs;
      std::vector<std::vector<int32_t>> prompts;
      for (int32_t b = 0; b < batch; ++b) {
        seqs.push_back(eng.NewSequence());
        prompts.push_back(tokens(context));
        engine::Engine::Work w{seqs.back(), prompts.back(), true};
        STRATA_RETURN_IF_ERROR(eng.Step(std::span(&w, 1)).status());
      }
      const std::vector<int32_t> one = tokens(steps);
      const auto t0 = clock.Now();
      for (int32_t s = 0; s < steps; ++s) {
        std::vector<engine::Engine::Work> works;
        for (engine::SeqId q : seqs) {
          works.push_back({q, std::span(one).subspan(static_cast<size_t>(s), 1), true});
        }
        STRATA_RETURN_IF_ERROR(eng.Step(works).status());
      }
      runs.push_back(util::SecondsBetween(t0, clock.Now()) / steps);
      for (engine::SeqId q : seqs) eng.FreeSequence(q);
    }
    std::sort(runs.begin(), runs.end());
    return runs[1];
  };
  std::fprintf(stderr,
               "calibrating on %s with %d threads: prefill, then decode at batch 1, 4, "
               "8 and 16 ...\n",
               path->c_str(), f.threads);
  // Prefill: a chunk at a time, as the scheduler feeds a prompt.
  std::vector<double> prefill;
  for (int rep = 0; rep < 3; ++rep) {
    const engine::SeqId s = eng.NewSequence();
    const std::vector<int32_t> p = tokens(chunk * 2);
    const auto t0 = clock.Now();
    for (int32_t i = 0; i < 2; ++i) {
      engine::Engine::Work w{s, std::span(p).subspan(static_cast<size_t>(i * chunk), chunk),
                             i == 1};
      if (auto st = eng.Step(std::span(&w, 1)); !st.ok()) return ReportError(st.status());
    }
    prefill.push_back(util::SecondsBetween(t0, clock.Now()) / (2.0 * chunk));
    eng.FreeSequence(s);
  }
  std::sort(prefill.begin(), prefill.end());
  tune::CostModel cost;
  cost.prefill_s_per_token = prefill[1];
  // Prefill's attention: a chunk at a long context against the chunks above
  // (whose tokens attended to `chunk` tokens before them on average).
  const int32_t deep = std::max(chunk * 2, std::min(2048, eo.n_ctx - chunk - 8));
  std::vector<double> late;
  for (int rep = 0; rep < 3; ++rep) {
    const engine::SeqId s = eng.NewSequence();
    const std::vector<int32_t> p = tokens(deep + chunk);
    for (int32_t at = 0; at < deep; at += chunk) {
      const int32_t k = std::min(chunk, deep - at);
      engine::Engine::Work w{s, std::span(p).subspan(static_cast<size_t>(at), k), false};
      if (auto st = eng.Step(std::span(&w, 1)); !st.ok()) return ReportError(st.status());
    }
    const auto t0 = clock.Now();
    engine::Engine::Work w{s, std::span(p).subspan(static_cast<size_t>(deep), chunk), true};
    if (auto st = eng.Step(std::span(&w, 1)); !st.ok()) return ReportError(st.status());
    late.push_back(util::SecondsBetween(t0, clock.Now()) / chunk);
    eng.FreeSequence(s);
  }
  std::sort(late.begin(), late.end());
  cost.prefill_attention_s_per_token =
      std::max(0.0, (late[1] - cost.prefill_s_per_token) / (deep + chunk / 2.0 - chunk));
  // The short chunks' own attention, taken out of the per-token time.
  cost.prefill_s_per_token =
      std::max(0.0, cost.prefill_s_per_token - cost.prefill_attention_s_per_token * chunk);
  // Decode: t(B) = step + B·per_sequence, by least squares over B = 1, 4, 8, 16 at a short
  // context (the batches a server runs; a line fitted to small ones alone overstates 16).
  const int32_t short_ctx = 32, long_ctx = std::min(eo.n_ctx - 64, 1024);
  std::vector<std::pair<double, double>> points;
  for (int32_t b : {1, 4, 8, 16}) {
    auto t = step_time(b, short_ctx, 16);
    if (!t.ok()) return ReportError(t.status());
    points.emplace_back(b, *t);
  }
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double n = static_cast<double>(points.size());
  const double slope = std::max(0.0, (n * sxy - sx * sy) / (n * sxx - sx * sx));
  cost.decode_s_per_sequence = slope;
  cost.step_s = std::max(0.0, (sy - slope * sx) / n);
  // Attention: the same batch at a long context.
  auto at_long = step_time(4, long_ctx, 16);
  if (!at_long.ok()) return ReportError(at_long.status());
  const double at_short = cost.step_s + 4 * cost.decode_s_per_sequence;
  cost.attention_s_per_token =
      std::max(0.0, (*at_long - at_short) / (4.0 * (long_ctx - short_ctx)));
  cost.source = fmt::format("{} ({}, {} threads, {})", *path, m.WeightTypeSummary(), f.threads,
                            kernels::IsaName(eng.kernels().isa));
  if (util::Status st = env.fs->WriteFileAtomic(f.cost_out, tune::CostModelJson(cost)); !st.ok()) {
    return ReportError(st);
  }
  std::printf(
      "prefill %.3f ms/token + %.4f us per token before it; a decode step %.2f ms + %.3f ms per "
      "sequence + %.3f us per context token; wrote %s\n",
      cost.prefill_s_per_token * 1e3, cost.prefill_attention_s_per_token * 1e6, cost.step_s * 1e3,
      cost.decode_s_per_sequence * 1e3, cost.attention_s_per_token * 1e6, f.cost_out.c_str());
  return kExitOk;
}

// One configuration in the simulator, per scenario: what `tune check`
// compares with a real run.
int RunSimulate(const Env& env, const TuneFlags& f) {
  auto base = BaseFlags(env, f.config);
  if (!base.ok()) return UsageError(base.status().message());
  tune::CostModel cost;
  if (!f.cost.empty()) {
    auto text = env.fs->ReadFile(f.cost);
    if (!text.ok()) return ReportError(text.status());
    auto parsed = tune::ParseCostModel(*text);
    if (!parsed.ok()) return UsageError("--cost: " + parsed.status().message());
    cost = *parsed;
  }
  auto all = tune::LoadScenarios(*env.fs, f.scenarios_dir, f.scenarios);
  if (!all.ok()) return UsageError(all.status().message());
  if (f.duration_s < 0 || f.duration_s > 86400)
    return UsageError("--duration must be in [0, 86400]");
  Json out = Json::object();
  for (tune::Scenario s : *all) {
    if (f.duration_s > 0) s.duration_s = f.duration_s;
    std::vector<tune::RequestSpec> trace;
    if (s.arrival == tune::ArrivalProcess::kTrace) {
      auto text = env.fs->ReadFile(s.trace);
      if (!text.ok()) {
        std::fprintf(stderr, "scenario %s skipped: %s\n", s.name.c_str(),
                     text.status().message().c_str());
        continue;
      }
      auto parsed = tune::ParseTrace(s.trace_format, *text);
      if (!parsed.ok()) return ReportError(parsed.status());
      trace = std::move(parsed->requests);
    }
    auto requests = tune::Requests(s, f.seed, &trace);
    if (!requests.ok()) return ReportError(requests.status());
    if (s.warmup_s >= s.duration_s) {
      std::fprintf(stderr, "scenario %s: its warm-up (%.0f s) covers the whole duration: no TTFT\n",
                   s.name.c_str(), s.warmup_s);
    }
    const tune::SimResult r = tune::Simulate(s, *requests, SimConfigOf(*base), cost, f.seed);
    std::printf(
        "%-22s %5lld requests  %7.3f req/s  TTFT P50/P95/P99 %6.0f / %6.0f / %6.0f ms  "
        "errors %.4f  quality %.4f  hits l1 %lld l3 %lld semantic %lld  cached prompt "
        "%.0f%%\n",
        s.name.c_str(), static_cast<long long>(r.requests), r.throughput_rps, r.ttft_p50_s * 1e3,
        r.ttft_p95_s * 1e3, r.ttft_p99_s * 1e3, r.error_rate, r.quality,
        static_cast<long long>(r.l1_hits), static_cast<long long>(r.l3_hits),
        static_cast<long long>(r.semantic_hits),
        r.prompt_tokens > 0 ? 100.0 * r.cached_prompt_tokens / r.prompt_tokens : 0.0);
    out[s.name] = {{"requests", r.requests},     {"throughput_rps", r.throughput_rps},
                   {"ttft_p50_s", r.ttft_p50_s}, {"ttft_p95_s", r.ttft_p95_s},
                   {"ttft_p99_s", r.ttft_p99_s}, {"error_rate", r.error_rate},
                   {"quality", r.quality},       {"output_tokens_per_s", r.output_tokens_per_s}};
  }
  if (!f.out.empty()) {
    if (util::Status st = env.fs->WriteFileAtomic(f.out, out.dump(2) + "\n"); !st.ok()) {
      return ReportError(st);
    }
  }
  return kExitOk;
}

int RunScenarios(const Env& env, const TuneFlags& f) {
  auto all = tune::LoadScenarios(*env.fs, f.scenarios_dir);
  if (!all.ok()) return ReportError(all.status());
  for (const tune::Scenario& s : *all) {
    std::string matter;
    for (const std::string& m : s.metrics) matter += (matter.empty() ? "" : ", ") + m;
    std::printf("%-22s %s\n%-22s judged on: %s\n", s.name.c_str(), s.description.c_str(), "",
                matter.c_str());
  }
  return kExitOk;
}

void SearchFlags(CLI::App* cmd, TuneFlags& f) {
  cmd->add_option("--out", f.out, "Directory for the results and the journal");
  cmd->add_option("--resume", f.resume,
                  "Go on with an interrupted run from its directory's journal (the same flags)");
  cmd->add_option("--scenario", f.scenarios, "Scenarios to run (repeatable; default: all)");
  cmd->add_option("--scenarios-dir", f.scenarios_dir, "Where the scenario files are")
      ->capture_default_str();
  cmd->add_flag("--simulate", f.simulate,
                "Evaluate configurations with the calibrated simulator (thousands per minute)");
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
            if (*which == "calibrate") return RunCalibrate(env, *f);
            if (*which == "scenarios") return RunScenarios(env, *f);
            if (*which == "simulate") return RunSimulate(env, *f);
            if (*which == "sensitivity") return RunSensitivity(env, *f);
            return RunPareto(env, *f);
          }};
}

}  // namespace strata::cli
