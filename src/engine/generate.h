// engine/generate.h — run a fixed set of generation requests to completion.
//
// Promise: GenerateAll prefills every prompt (in chunks of at most
// max_batch_tokens tokens, several prompts per pass) and then decodes all
// unfinished requests together, one batched forward pass per step, until each
// reaches max_tokens, an end-of-generation token, or is stopped by its
// callback. Because a forward pass is batch-invariant, each request produces
// the same tokens whether it runs alone or with others. This is the engine
// behind `strata generate`; the server's scheduler (continuous batching) is
// built from the same Engine::Step.
//
// Threading: runs on the calling thread, which must own the Engine.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "engine/request.h"
#include "util/clock.h"
#include "util/status.h"

namespace strata::engine {

// Picks the next token of request `index` from its logits. The engine declares
// it; the sampling module provides implementations (adapted by the caller).
class TokenChooser {
 public:
  virtual ~TokenChooser() = default;
  virtual util::StatusOr<int32_t> Choose(size_t index, std::span<const float> logits) = 0;
};

// Picks the most likely token (lowest id on ties).
class GreedyChooser final : public TokenChooser {
 public:
  util::StatusOr<int32_t> Choose(size_t index, std::span<const float> logits) override;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // non-empty
  int32_t max_tokens = 16;      // >= 0
  bool stop_at_eog = true;      // end on the model's end-of-generation tokens
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated (without the prompt), an ending EOG token included
  FinishReason finish = FinishReason::kLength;
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prompt_seconds = 0;  // wall time of the prefill passes
  double decode_seconds = 0;  // wall time of the decode passes
  int64_t forward_passes = 0;
};

// Called for every generated token; return false to stop that request.
using TokenCallback = std::function<bool(size_t index, int32_t token)>;

struct GenerateOptions {
  int32_t max_batch_tokens = 512;  // prefill tokens per forward pass
};

util::StatusOr<std::vector<GenerationResult>> GenerateAll(
    Engine& engine, std::span<const GenerationRequest> requests, TokenChooser& chooser,
    const TokenCallback& on_token, const GenerateOptions& options, const util::Clock& clock,
    GenerationStats* stats = nullptr);

}  // namespace strata::engine
