// sampling/sampler.h — from logits to the next token.
//
// Promise: a Sampler turns one step's logits into a token id by a fixed,
// documented pipeline: repetition/presence/frequency penalties over the tokens
// generated so far, top-k, top-p (nucleus), min-p, temperature, then a seeded
// draw (or argmax when temperature is 0). The same seed, parameters and
// logits give the same token on every run, alone or in any batch, because each
// request owns its generator and consumes exactly one draw per token. Logits
// that are NaN or +inf are rejected with an error, never sampled.
//
// Threading: a Sampler is thread-compatible (one per request). The processing
// functions are pure.
//
// Usage:
//   SamplingParams p{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 7};
//   STRATA_RETURN_IF_ERROR(Validate(p));
//   Sampler s(p);
//   STRATA_ASSIGN_OR_RETURN(int32_t token, s.Sample(logits));
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "util/random.h"
#include "util/status.h"

namespace strata::sampling {

struct SamplingParams {
  float temperature = 0.8f;  // [0, 100]; 0 = greedy (argmax)
  int32_t top_k = 40;        // [0, n_vocab]; 0 = off
  float top_p = 0.95f;       // (0, 1]; 1 = off
  float min_p = 0.05f;       // [0, 1); 0 = off
  float presence_penalty = 0.0f;    // [-2, 2]; subtracted once from every generated token's logit
  float frequency_penalty = 0.0f;   // [-2, 2]; subtracted per occurrence
  float repetition_penalty = 1.0f;  // (0, 10]; 1 = off; divides positive logits, multiplies negative
  uint64_t seed = 0;
};

// InvalidArgument naming the field when a parameter is out of range.
util::Status Validate(const SamplingParams& params);

struct Candidate {
  int32_t id;
  float logit;
};

// The processing steps, each a pure function over the candidate set. They keep
// candidates sorted by logit (descending, ties by id ascending) once sorted.
void SortDescending(std::vector<Candidate>& c);
// Keeps the k most likely (partial selection; the result is sorted).
void TopK(std::vector<Candidate>& c, int32_t k);
// Keeps the smallest prefix whose probability (at temperature 1) reaches p; sorted input.
void TopP(std::vector<Candidate>& c, float p);
// Drops candidates with probability below min_p times the most likely one's.
void MinP(std::vector<Candidate>& c, float min_p);
// Draws from softmax(logit / temperature) with `uniform` in [0, 1).
int32_t Draw(const std::vector<Candidate>& c, float temperature, double uniform);
// Applies the penalties to `logits` in place, given how often each token has
// been generated (token id -> count).
void ApplyPenalties(std::span<float> logits, const std::vector<std::pair<int32_t, int32_t>>& counts,
                    const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // InvalidArgument when logits contain NaN or +inf, or are empty. The chosen
  // token is recorded for the penalties of later steps.
  util::StatusOr<int32_t> Sample(std::span<const float> logits);

  const SamplingParams& params() const { return params_; }

 private:
  // The pipeline after penalties; `u` is this step's uniform draw.
  int32_t Choose(std::span<const float> logits, double u);

  SamplingParams params_;
  util::Rng rng_;
  std::vector<Candidate> candidates_;
  std::vector<float> penalized_;                    // scratch copy when penalties apply
  std::vector<std::pair<int32_t, int32_t>> counts_;  // generated token -> occurrences
};

}  // namespace strata::sampling
