// sampling/entropy.h — entropy-targeted temperature and the entropy tail cut.
//
// Promise: SolveTemperature finds T with H(softmax(z/T)) = H* (nats) over a
// candidate set to within `tolerance_nats` in at most `max_iterations`
// entropy evaluations. Entropy rises monotonically with T from ln(k) (T -> 0,
// k = tokens tied at the top: the greedy limit) to ln(n) (T -> inf, uniform),
// so the solver brackets the root analytically — no evaluation needed: at
// beta = 1/T = tol/(2 * logit range) H >= ln(n) - tol/2, and at beta =
// ln((n-k)/(k q)) / (gap to the second logit) H <= ln(k) + tol/2 — and then
// runs Newton's method in s = ln(beta) (dH/ds = -beta^2 Var[z]), falling back
// to bisection of s whenever a Newton step leaves the bracket. Targets out of
// reach are clamped to the nearest end and reported, never an error.
//
// EntropyTarget is the processor (stage 7 of processors.h). Its tail rule,
// which makes top-k and nucleus one rule:
//
//   S is the longest prefix of the candidates ranked by logit (ties by id)
//   such that, at the temperature T_S giving softmax(z_S / T_S) entropy H*,
//   every token of S has surprise -ln p <= H* + m, i.e. p >= e^-(H* + m),
//   where m = tail_nats. The token is drawn from softmax(z_S / T_S).
//
// Because the probabilities of S sum to 1, |S| <= e^(H* + m): the rule is at
// once a top-k with k = e^(H*+m) and a probability floor, both set by the
// target. The condition holds for short prefixes and fails past one length
// (adding a least-likely token lowers T_S and raises every surprise), so the
// longest S is found by binary search over prefix lengths between
// floor(e^H*) + 1 (the shortest prefix that can reach H*) and e^(H* + m);
// only the top e^(H* + m) candidates are ever ranked. The drawn distribution
// has entropy H* exactly (to the tolerance) unless H* is out of reach.
//
// Threading: pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "sampling/processors.h"

namespace strata::sampling {

enum class EntropyClamp : uint8_t {
  kNone,         // reached within tolerance
  kAboveMax,     // H* > ln(n): drew uniformly (T = inf), entropy ln(n)
  kBelowGreedy,  // H* < ln(k): drew among the k tokens tied at the top (T = 0)
};
std::string_view EntropyClampName(EntropyClamp c);

struct SolverOptions {
  double tolerance_nats = 1e-3;    // (0, 0.1]; stop when |H - H*| < tolerance
  int32_t max_iterations = 20;     // [1, 100]; entropy evaluations at most
  double initial_temperature = 0;  // > 0: first guess (warm start); 0 = estimate from the logits
};

struct TemperatureSolution {
  double temperature = 1.0;   // T relative to the input logits; 0 = greedy, +inf = uniform
  double entropy_nats = 0.0;  // H(softmax(z/T)) achieved
  int32_t iterations = 0;     // entropy evaluations used
  EntropyClamp clamp = EntropyClamp::kNone;
  bool converged = false;  // |H - H*| < tolerance, or clamped at the reachable end
};

// Solves H(softmax(z/T)) = target_nats over the logits of c (non-empty,
// finite). When the iteration budget runs out, returns the best iterate
// (converged = false).
TemperatureSolution SolveTemperature(std::span<const Candidate> c, double target_nats,
                                     const SolverOptions& options = {});

// H(softmax(z/T)) in nats for T in [0, inf] (0 = greedy limit, inf = uniform).
double EntropyAtTemperature(std::span<const Candidate> c, double temperature);

struct EntropyTargetResult {
  Candidates kept;               // S, logits divided by T_S (shifted so the best is 0);
                                 // ranked, unless S is every candidate (no ranking needed)
  TemperatureSolution solution;  // on S: its entropy is the entropy drawn from
  int32_t solves = 0;            // SolveTemperature calls the tail search made
};

// Stage 7: solves T for target_nats and cuts the tail by the rule above with
// m = tail_nats (> 0). c must be non-empty.
EntropyTargetResult EntropyTarget(Candidates c, double target_nats, double tail_nats,
                                  const SolverOptions& options = {});

}  // namespace strata::sampling
