// L1 hit latency. The budget: a hit is served in well under 1 ms
// inside the process.
//
//   BM_L1Find         ResponseCache::Find of a present key among 10,000
//                     entries, for prompts of 256 and 2048 tokens (the key
//                     holds every token and is compared in full on a hit).
//   BM_GatewayL1Hit   a whole hit through the gateway: validate, render the
//                     chat template, tokenize, build the key, find it, and read
//                     every replayed event, as the HTTP layer does. Args:
//                     completion tokens stored, top logprobs (0 = none).
//   BM_GatewayTokenizeOnly  the template and tokenizer alone (most of a hit).
//   BM_GatewayMiss    the same request with the cache bypassed (a real
//                     generation on a tiny random model), for the ratio.
//
// The model is the tiny random-weight model of the unit tests (64 wide, 2
// layers) with a 2048-token context; only the miss depends on its size.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "cache/response_cache.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "gateway/gateway.h"
#include "testing/tiny_model.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata {
namespace {

class Blob final : public cache::CachedValue {
 public:
  explicit Blob(size_t n) : bytes_(n, 'x') {}
  uint64_t ByteSize() const override { return bytes_.size(); }

 private:
  std::string bytes_;
};

cache::CacheKey PromptKey(int32_t n_tokens, int32_t variant) {
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
  for (int32_t i = 0; i < n_tokens; ++i)
    tokens[static_cast<size_t>(i)] = (i * 7919 + variant) % 32000;
  cache::CacheKeyBuilder b("tenant-a");
  b.U64(0x1234).I32s(tokens).I32(64).F32(0.0f).U64(0);
  return b.Build();
}

void BM_L1Find(benchmark::State& state) {
  const auto n_tokens = static_cast<int32_t>(state.range(0));
  constexpr int kEntries = 10'000;
  cache::ResponseCacheOptions o;
  o.max_bytes = 1ull << 30;
  auto l1 = std::move(cache::ResponseCache::Create(o, util::RealClock(), util::Rng(1))).value();
  std::vector<cache::CacheKey> keys;
  for (int i = 0; i < kEntries; ++i) {
    keys.push_back(PromptKey(n_tokens, i));
    l1->Insert(keys.back(), std::make_shared<Blob>(2048), std::chrono::milliseconds(50));
  }
  size_t i = 0;
  for (auto _ : state) {
    cache::Lookup l = l1->Find(keys[i]);
    benchmark::DoNotOptimize(l.value);
    if (l.kind == cache::Lookup::Kind::kMiss) state.SkipWithError("miss");
    i = (i + 7) % keys.size();
  }
}
BENCHMARK(BM_L1Find)->Arg(256)->Arg(2048)->Unit(benchmark::kMicrosecond);

// A served tiny model with L1 on.
struct Served {
  Served() {
    model::SyntheticShape shape = testing::TinyShape();
    shape.n_ctx = 2048;
    tiny = testing::MakeTinyModel(kernels::TensorType::kF32, 1, shape);
    engine::EngineOptions eo;
    eo.n_ctx = 2048;
    eo.n_seq_max = 4;
    eng = std::move(engine::Engine::Create(*tiny.model, eo, *log)).value();
    sched = std::move(engine::Scheduler::Start(*eng, {}, *log)).value();
    gateway::GatewayOptions go;
    go.model_name = "tiny";
    go.max_tokens_cap = 256;
    go.l1.max_bytes = 64u << 20;
    go.coalesce = true;
    gw = std::move(
             gateway::Gateway::Create(*tiny.model, *sched, metrics, go, util::RealClock(), *log))
             .value();
  }
  ~Served() {
    gw.reset();
    sched.reset();
  }
  // Starts `r` and reads every event; returns how it was served.
  gateway::CacheOutcome Run(const gateway::CompletionRequest& r, size_t* bytes) {
    auto g = gw->Start(r);
    if (!g.ok()) return gateway::CacheOutcome::kL3;  // never: flagged by the caller
    const auto far = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (true) {
      auto e = (*g)->Next(far);
      if (!e.ok()) break;
      *bytes += e->text.size();
    }
    return (*g)->cache_outcome();
  }

  std::unique_ptr<util::Logger> log = util::NewNullLogger();
  obs::MetricsRegistry metrics;
  testing::TinyModel tiny;
  std::unique_ptr<engine::Engine> eng;
  std::unique_ptr<engine::Scheduler> sched;
  std::unique_ptr<gateway::Gateway> gw;
};

gateway::CompletionRequest ChatRequest(int32_t max_tokens, int32_t top_logprobs) {
  gateway::CompletionRequest r;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the little dog ran after the ball in the garden ";
  r.messages = {{"system", "You are a helpful assistant."}, {"user", text}};
  r.max_tokens = max_tokens;
  r.top_logprobs = top_logprobs;
  r.sampling.temperature = 0.0f;
  return r;
}

void BM_GatewayL1Hit(benchmark::State& state) {
  Served s;
  const auto r =
      ChatRequest(static_cast<int32_t>(state.range(0)), static_cast<int32_t>(state.range(1)));
  size_t bytes = 0;
  s.Run(r, &bytes);  // the miss that stores it
  state.counters["prompt_tokens"] = static_cast<double>(s.gw->Tokenize(r)->size());
  for (auto _ : state) {
    if (s.Run(r, &bytes) != gateway::CacheOutcome::kL1) state.SkipWithError("not an L1 hit");
  }
  benchmark::DoNotOptimize(bytes);
}
BENCHMARK(BM_GatewayL1Hit)
    ->Args({64, 0})
    ->Args({256, 0})
    ->Args({64, 5})
    ->Unit(benchmark::kMicrosecond);

// The part of a hit that is not the cache: chat template and tokenizer.
void BM_GatewayTokenizeOnly(benchmark::State& state) {
  Served s;
  const auto r = ChatRequest(64, 0);
  for (auto _ : state) {
    auto tokens = s.gw->Tokenize(r);
    benchmark::DoNotOptimize(tokens);
  }
}
BENCHMARK(BM_GatewayTokenizeOnly)->Unit(benchmark::kMicrosecond);

void BM_GatewayMiss(benchmark::State& state) {
  Served s;
  auto r = ChatRequest(static_cast<int32_t>(state.range(0)), 0);
  r.response_cache = false;
  size_t bytes = 0;
  for (auto _ : state) {
    if (s.Run(r, &bytes) != gateway::CacheOutcome::kMiss) state.SkipWithError("not a miss");
  }
  benchmark::DoNotOptimize(bytes);
}
BENCHMARK(BM_GatewayMiss)->Arg(64)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
