// sampling/processors.h — the logits processors: small pure functions over a
// candidate set.
//
// Promise: each processor takes the candidate set by value (move it in; its
// buffer is reused) plus every input it needs, the random draw included, and
// returns its result; none keeps state or reads a clock or generator. The
// Sampler (sampler.h) applies them in this fixed order:
//
//   1. ApplyPenalties  repetition, presence, frequency (over generated tokens)
//   2. TopK            the k most likely
//   3. TopP            the smallest most-likely prefix holding mass p
//   4. MinP            drop tokens below min_p times the most likely
//   5. TypicalP        the tokens whose surprise is nearest the entropy, mass p
//   6. Temperature     divide logits by T
//   7. EntropyTarget   solve T for a target entropy; cut the tail (entropy.h)
//   8. MirostatV2      cut tokens more surprising than mu (bits)
//   9. Draw            inverse-CDF draw with the step's uniform number
//
// Probabilities in stages 2-5 and 8 are softmax(logits) of the set as it
// enters the stage. No stage sorts the vocabulary: top-k uses partial
// selection (a running threshold, then nth_element on a small buffer), top-p
// and typical-p a histogram of their ranking key that is refined only in the
// bin where the kept mass crosses p, min-p and mirostat are threshold
// filters, and the draw needs no order at all. One exp per candidate per
// stage that needs probabilities, vectorised (internal/fast_exp.h).
// Logits must be finite: -inf tokens are never candidates (FromLogits drops
// them) and NaN/+inf are rejected by the Sampler before any stage runs.
//
// Threading: pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace strata::sampling {

struct Candidate {
  int32_t id;   // token id, [0, n_vocab)
  float logit;  // finite
};

enum class Order : uint8_t {
  kById,     // ascending token id (as FromLogits builds it)
  kByLogit,  // logit descending, ties by id ascending
  kNone,
};

// The tokens still in play and their (processed) logits; never empty once a
// Sampler has validated its input.
struct Candidates {
  std::vector<Candidate> items;
  Order order = Order::kNone;
};

// True when a ranks before b: higher logit, or equal logit and lower id.
inline bool Before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Every token whose logit is not -inf, in id order. `reuse` lends its buffer.
Candidates FromLogits(std::span<const float> logits, Candidates reuse = {});

// The most likely token: highest logit, lowest id on ties; -1 when empty.
int32_t Argmax(std::span<const float> logits);

// Full sort by logit (for small sets and tests).
Candidates SortByLogit(Candidates c);

// Moves the m best candidates (by Before) to the front of c, sorted; the rest
// follow in unspecified order. O(n) for random order: a running threshold
// admits few candidates, which are compacted with nth_element.
void PartialSelect(std::span<Candidate> c, size_t m);

struct Penalties {
  float repetition = 1.0f;  // (0, 10]; divides positive logits, multiplies negative
  float presence = 0.0f;    // [-2, 2]; subtracted once from a generated token's logit
  float frequency = 0.0f;   // [-2, 2]; subtracted per occurrence
};

struct TokenCount {
  int32_t id;     // token id
  int32_t count;  // times generated, >= 1
};

// The penalised logit of a token generated `count` times (count 0: unchanged).
float PenalizedLogit(float logit, int32_t count, const Penalties& p);
// Applies PenalizedLogit to the candidates whose id has a count. `counts`
// must be sorted by id; ids outside the candidates are ignored.
Candidates ApplyPenalties(Candidates c, std::span<const TokenCount> counts, const Penalties& p);

// Keeps the k best; k <= 0 or k >= size keeps all (order unchanged).
// Otherwise the result is sorted.
Candidates TopK(Candidates c, int32_t k);
// Keeps the smallest prefix (by Before) whose probability reaches p; p >= 1
// keeps all. Order kept when sorted, else unspecified.
Candidates TopP(Candidates c, float p);
// Keeps tokens with probability >= min_p * p_max, i.e. logit >= max +
// ln(min_p); min_p <= 0 keeps all. Order preserved.
Candidates MinP(Candidates c, float min_p);
// Locally typical sampling: ranks tokens by |surprise - entropy|, which is
// |logit - mean logit| under the set's softmax (ties by Before), and keeps the
// smallest such prefix whose probability reaches p; p >= 1 keeps all. Order
// unspecified.
Candidates TypicalP(Candidates c, float p);
// Divides every logit by t (> 0). Order preserved.
Candidates Temperature(Candidates c, float t);

// Mirostat v2's cut: keeps tokens with surprise -log2 p <= mu_bits (p over the
// set as it enters), at least the most likely one. Order preserved.
Candidates MirostatV2(Candidates c, float mu_bits);
// The next mu after drawing a token of probability p_chosen from the cut set:
// mu - eta * (-log2 p_chosen - tau_bits).
float MirostatV2Update(float mu_bits, float tau_bits, float eta, double p_chosen);

struct DrawResult {
  int32_t id = -1;          // the drawn token
  double probability = 0;   // its probability in the distribution drawn from
  double entropy_nats = 0;  // entropy of that distribution
  size_t n_candidates = 0;  // size of the set drawn from
};

// Draws from softmax(logits) of c (non-empty) by inverse CDF: walks the
// candidates in their current order and returns the first whose cumulative
// probability exceeds `uniform` in [0, 1). One exp per candidate, plus at
// most one block of 256 for the walk.
DrawResult Draw(const Candidates& c, double uniform);

// softmax probabilities and entropy of a set, for tests and reports:
// probabilities in the order of c.items.
std::vector<double> Probabilities(const Candidates& c);
double Entropy(const Candidates& c);

}  // namespace strata::sampling
