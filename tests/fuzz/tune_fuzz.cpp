// Fuzz target: the tuner's readers — a scenario file (tune/scenario.h), a
// cost model (tune/simulator.h), the three trace formats (tune/trace.h) and
// a prompts file (tune/live.h) — and, for what reads, the requests, their
// texts and one simulated run of a small slice. Whatever the bytes: no crash, no hang, every error
// an error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tune/live.h"
#include "tune/scenario.h"
#include "tune/simulator.h"
#include "tune/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  using namespace strata::tune;
  (void)ParseCostModel(text);
  auto pool = ParsePromptPool(text);
  if (pool.ok() &&
      (pool->questions.empty() || pool->questions.size() != pool->paraphrases.size())) {
    std::abort();
  }
  for (TraceFormat f : {TraceFormat::kAzure, TraceFormat::kMooncake, TraceFormat::kBurstGpt}) {
    auto t = ParseTrace(f, text);
    if (!t.ok()) continue;
    for (const RequestSpec& r : t->requests) {
      if (r.arrival_s < 0 || r.prompt_tokens < 0 || r.output_tokens < 0) std::abort();
    }
  }
  auto s = ParseScenario(text, "fuzz.toml");
  if (!s.ok()) return 0;
  // A bounded run: at most a few hundred requests of small sizes.
  Scenario small = *s;
  small.max_requests = std::min<int32_t>(small.max_requests > 0 ? small.max_requests : 200, 200);
  small.duration_s = std::min(small.duration_s, 30.0);
  small.prompt_tokens = std::min(small.prompt_tokens, 512);
  small.system_tokens = std::min(small.system_tokens, 512);
  small.output_tokens = std::min(small.output_tokens, 64);
  small.turns = std::min(small.turns, 4);
  std::vector<RequestSpec> trace = {
      {.arrival_s = 0, .prompt_tokens = 100, .output_tokens = 10, .hash_ids = {}},
      {.arrival_s = 1, .prompt_tokens = 300, .output_tokens = 20, .hash_ids = {}}};
  auto requests = Requests(small, 1, &trace);
  if (!requests.ok()) return 0;
  SimConfig c;
  c.l3 = c.semantic = true;
  const SimResult r = Simulate(small, *requests, c, CostModel(), 1);
  const ScenarioText texts(small, *requests, pool.ok() ? *pool : PromptPool{}, 1);
  for (size_t i = 0; i < requests->size(); ++i) {
    if (texts.Question(i).empty()) std::abort();
  }
  if (r.answered + r.errors != r.requests || r.quality < 0 || r.quality > 1) std::abort();
  return 0;
}
