#include "cli/tune_tools.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/tune_report.h"
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "model/transformer.h"
#include "tune/scenario.h"
#include "tune/simulator.h"
#include "tune/trace.h"
#include "util/clock.h"
#include "util/random.h"

namespace strata::cli {
namespace {

using Json = nlohmann::json;

}  // namespace

// The engine's costs on this machine: a prefill chunk's time per token, a
// decode step's fixed and per-sequence time, and attention's per context token.
int RunTuneCalibrate(const Env& env, const std::string& model_flag, int32_t threads,
                     const std::string& out) {
  if (threads < 1 || threads > 256) return UsageError("-t must be in [1, 256]");
  auto log = MakeLogger("info");
  auto path = ResolveModelPath(env, model_flag, *log);
  if (!path.ok()) return ReportError(path.status());
  auto loaded = model::Model::Load(*env.fs, *path, {}, *log);
  if (!loaded.ok()) return ReportError(loaded.status());
  const model::Model& m = **loaded;
  engine::EngineOptions eo;
  eo.n_threads = threads;
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
               path->c_str(), threads);
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
  cost.source = fmt::format("{} ({}, {} threads, {})", *path, m.WeightTypeSummary(), threads,
                            kernels::IsaName(eng.kernels().isa));
  if (util::Status st = env.fs->WriteFileAtomic(out, tune::CostModelJson(cost)); !st.ok()) {
    return ReportError(st);
  }
  std::printf(
      "prefill %.3f ms/token + %.4f us per token before it; a decode step %.2f ms + %.3f ms per "
      "sequence + %.3f us per context token; wrote %s\n",
      cost.prefill_s_per_token * 1e3, cost.prefill_attention_s_per_token * 1e6, cost.step_s * 1e3,
      cost.decode_s_per_sequence * 1e3, cost.attention_s_per_token * 1e6, out.c_str());
  return kExitOk;
}

int RunTuneSimulate(const Env& env, const TuneSimulateArgs& f) {
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
  if (!f.json_out.empty()) {
    if (util::Status st = env.fs->WriteFileAtomic(f.json_out, out.dump(2) + "\n"); !st.ok()) {
      return ReportError(st);
    }
  }
  return kExitOk;
}

int RunTuneScenarios(const Env& env, const std::string& scenarios_dir) {
  auto all = tune::LoadScenarios(*env.fs, scenarios_dir);
  if (!all.ok()) return ReportError(all.status());
  for (const tune::Scenario& s : *all) {
    std::string matter;
    for (const std::string& m : s.metrics) matter += (matter.empty() ? "" : ", ") + m;
    std::printf("%-22s %s\n%-22s judged on: %s\n", s.name.c_str(), s.description.c_str(), "",
                matter.c_str());
  }
  return kExitOk;
}

}  // namespace strata::cli
