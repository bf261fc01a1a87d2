// sampling/sampler.h — from logits to the next token.
//
// Promise: a Sampler turns one step's logits into a token id by the fixed
// pipeline of processors.h, in this order:
//
//   logit bias -> penalties -> top-k -> top-p -> min-p -> typical-p
//     -> temperature -> entropy target -> mirostat v2 -> draw
//
// The logit bias (OpenAI's logit_bias) adds a number in [-100, 100] to the
// logits of named tokens; -100 bans the token outright (its logit becomes
// -inf), +100 all but forces it.
//
// A stage whose parameter is "off" is skipped. temperature = 0 means greedy:
// argmax after the penalties, every later stage skipped. With target_entropy
// set, the temperature stage is skipped (the solved T replaces it) and the
// entropy tail rule of entropy.h cuts the candidates; top-k/top-p/min-p/
// typical-p still apply first, so set them off (0 / 1 / 0 / 1) to let the
// entropy rule be the only cut. Mirostat v2 keeps its mu per Sampler (per
// request), starting at 2 * tau.
//
// Reproducible: each Sampler owns its generator, seeded from params.seed, and
// consumes exactly one uniform draw per token (greedy included), so the same
// seed, parameters and logits sequence give the same tokens whether the
// request runs alone or in a batch of any composition. Logits that are NaN or
// +inf are an InvalidArgument error, never sampled; -inf marks a masked token.
//
// Threading: a Sampler is thread-compatible (one per request).
//
// Usage:
//   SamplingParams p{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 7};
//   STRATA_RETURN_IF_ERROR(Validate(p));
//   Sampler s(p);
//   STRATA_ASSIGN_OR_RETURN(int32_t token, s.Sample(logits));
//   // or, with what the step did (entropy drawn from, clamping, ...):
//   STRATA_ASSIGN_OR_RETURN(StepReport r, s.SampleWithReport(logits));
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "sampling/entropy.h"
#include "sampling/processors.h"
#include "util/random.h"
#include "util/status.h"

namespace strata::sampling {

struct SamplingParams {
  float temperature = 0.8f;        // [0, 100]; 0 = greedy (argmax)
  int32_t top_k = 40;              // [0, n_vocab]; 0 = off
  float top_p = 0.95f;             // (0, 1]; 1 = off
  float min_p = 0.05f;             // [0, 1); 0 = off
  float presence_penalty = 0.0f;   // [-2, 2]; subtracted once from every generated token's logit
  float frequency_penalty = 0.0f;  // [-2, 2]; subtracted per occurrence
  float repetition_penalty =
      1.0f;  // (0, 10]; 1 = off; divides positive logits, multiplies negative
  uint64_t seed = 0;
  float typical_p = 1.0f;          // (0, 1]; 1 = off; locally typical sampling
  float target_entropy = -1.0f;    // nats, [0, 100]; < 0 = off; targets above ln(candidates)
                                   // or below the greedy limit are clamped and reported
  float entropy_tail_nats = 3.0f;  // [0.05, 20]; m of the entropy tail rule (keep p >= e^-(H*+m))
  bool mirostat = false;           // Mirostat v2; exclusive with target_entropy
  float mirostat_tau_bits = 5.0f;  // bits, (0, 40]; target surprise (llama.cpp's mirostat_tau)
  float mirostat_eta = 0.1f;       // (0, 1]; learning rate of mu
  // (token id, bias in [-100, 100]) sorted by id, each id once, at most
  // kMaxLogitBias; -100 bans the token. Ids beyond the logits are refused by
  // Sample (the caller checks them against its vocabulary first).
  std::vector<std::pair<int32_t, float>> logit_bias = {};
};

inline constexpr size_t kMaxLogitBias = 1024;

// InvalidArgument naming the field when a parameter is out of range.
util::Status Validate(const SamplingParams& params);

// What one step did, for reports and metrics.
struct StepReport {
  int32_t token = -1;
  double entropy_nats = 0;  // entropy of the distribution drawn from (0 when greedy)
  double probability = 1;   // of the token in that distribution
  size_t n_candidates = 1;  // tokens left after every cut
  double temperature = 0;   // effective T on the penalised logits (solved under target_entropy;
                            // 0 = greedy, +inf = uniform)
  EntropyClamp entropy_clamp = EntropyClamp::kNone;  // target_entropy out of reach this step
  int32_t solver_iterations = 0;                     // entropy evaluations (target_entropy only)
  float mirostat_mu_bits = 0;                        // mu after this step's update (mirostat only)
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // InvalidArgument when logits contain NaN or +inf, are empty or are all
  // -inf. The chosen token is recorded for the penalties of later steps.
  util::StatusOr<int32_t> Sample(std::span<const float> logits);
  // The same step (same draw, same token), with its report.
  util::StatusOr<StepReport> SampleWithReport(std::span<const float> logits);

  const SamplingParams& params() const { return params_; }
  float mirostat_mu_bits() const { return mu_bits_; }

 private:
  SamplingParams params_;
  util::Rng rng_;
  float mu_bits_;                   // Mirostat v2 state
  std::vector<TokenCount> counts_;  // generated tokens by id, for the penalties
  Candidates scratch_;              // candidate buffer reused across steps
  std::vector<float> biased_;       // the step's logits with the logit bias added
};

}  // namespace strata::sampling
