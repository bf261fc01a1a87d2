// sampling/internal/vector_math.h — the passes over logits that the
// processors share: exp sums, moments, max, validation. Private to sampling/.
//
// Each is compiled for AVX-512, AVX2 and the baseline ISA and picked once by
// the loader (GCC target_clones). Sums run in fixed lanes of 8 and GCC keeps
// IEEE semantics (no reassociation, no FMA contraction), so every clone
// returns the same bits: tokens do not depend on the machine's ISA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "sampling/processors.h"

namespace strata::sampling::internal {

inline constexpr size_t kExpBlock = 256;  // elements per block of lane sums

struct ExpSums {
  double z = 0;   // sum of w = exp(x)
  double zx = 0;  // sum of w * x
};

// Sums of w = exp(x) and w * x, x = logit - shift <= 0, over c. Float lanes
// within a block of 256 (w <= 1 and |w x| <= 1/e, so no overflow), double
// across blocks.
ExpSums SumExp(std::span<const Candidate> c, float shift);

struct ExpMoments {
  double z = 0;    // sum of w = exp(beta * x)
  double zx = 0;   // sum of w * x
  double zxx = 0;  // sum of w * x^2
};

// The entropy solver's sums at inverse temperature beta, x = logit - shift.
// Moments in double lanes: with beta tiny and logits huge, w * x^2 can pass
// float range.
ExpMoments SumMoments(std::span<const Candidate> c, float shift, float beta);

// The largest logit of a non-empty set.
float MaxOf(std::span<const Candidate> c);

// w[i] = FastExp(Gap(c[i].logit, shift)) for i < c.size(); w has room for c.size().
void ExpWeights(std::span<const Candidate> c, float shift, float* w);

// One pass over raw logits: whether any is NaN or +inf, whether any is not
// -inf, and the largest.
struct LogitScan {
  bool invalid = false;
  bool any_finite = false;
  float max = -std::numeric_limits<float>::infinity();
};
LogitScan ScanLogits(std::span<const float> logits);

// The largest logit (the front when sorted by logit).
inline float MaxLogit(const Candidates& c) {
  return c.order == Order::kByLogit ? c.items.front().logit : MaxOf(c.items);
}

}  // namespace strata::sampling::internal
