// Time per Sampler::Sample call for each sampling policy at vocabulary sizes
// of 32,000 (Llama 2) and 152,064 (Qwen2). The budget is 5% of one
// decode step of a ~1B model (~28 ms here), i.e. <= 1.4 ms per token.
//
// Logits are synthetic but shaped like a language model's: a Gaussian body
// (sigma 2) with a few dozen boosted tokens, eight different vectors cycled
// so that no branch pattern or cache line is learned across calls.
#include <benchmark/benchmark.h>

#include <vector>

#include "sampling/sampler.h"
#include "util/random.h"

namespace strata::sampling {
namespace {

std::vector<std::vector<float>> MakeLogits(size_t n_vocab) {
  util::Rng rng(42);
  std::vector<std::vector<float>> out(8, std::vector<float>(n_vocab));
  for (auto& v : out) {
    for (auto& x : v) x = static_cast<float>(2.0 * rng.Normal());
    for (int i = 0; i < 40; ++i)
      v[rng.Below(n_vocab)] += 4.0f + 8.0f * static_cast<float>(rng.Uniform());
  }
  return out;
}

SamplingParams Off(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 7;
  return p;
}

SamplingParams Policy(int which) {
  SamplingParams p = Off(1.0f);
  switch (which) {
    case 0:  // greedy
      p.temperature = 0.0f;
      break;
    case 1:  // top-k 40 + top-p 0.95, T 0.8
      p.temperature = 0.8f;
      p.top_k = 40;
      p.top_p = 0.95f;
      break;
    case 2:  // min-p 0.05
      p.min_p = 0.05f;
      break;
    case 3:  // entropy-targeted, H* = 2.5 nats, m = 3
      p.target_entropy = 2.5f;
      break;
    case 4:  // mirostat v2, tau 5 bits
      p.mirostat = true;
      break;
    case 5:  // fixed temperature 0.8 over the whole vocabulary
      p.temperature = 0.8f;
      break;
    case 6:  // top-p 0.95 alone (nucleus over the whole vocabulary)
      p.top_p = 0.95f;
      break;
    case 7:  // typical-p 0.95 alone
      p.typical_p = 0.95f;
      break;
  }
  return p;
}

const char* kNames[] = {"greedy",    "topk40_topp0.95", "minp0.05", "entropy2.5",
                        "mirostat5", "temp0.8_full",    "topp0.95", "typical0.95"};

void BM_Sample(benchmark::State& state) {
  const auto logits = MakeLogits(static_cast<size_t>(state.range(1)));
  Sampler s(Policy(static_cast<int>(state.range(0))));
  size_t i = 0;
  for (auto _ : state) {
    auto t = s.Sample(logits[i++ % logits.size()]);
    benchmark::DoNotOptimize(t);
  }
  state.SetLabel(kNames[state.range(0)]);
}

BENCHMARK(BM_Sample)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7}, {32000, 152064}})
    ->ArgNames({"policy", "vocab"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace strata::sampling

BENCHMARK_MAIN();
