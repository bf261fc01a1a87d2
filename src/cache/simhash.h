// cache/simhash.h — weighted 64-bit SimHash of normalized request text.
//
// Promise: SimHash folds weighted features into a 64-bit fingerprint: bit i is
// set when the weights of the features whose hash has bit i set outweigh
// those whose hash has it clear (Charikar's sign-of-sum). Texts that share
// most of their weight get fingerprints at a small Hamming distance; unrelated
// texts land near 32 bits apart. Deterministic: feature hashes are XXH3 with a
// fixed seed (util/hash.h), so fingerprints may be stored and compared across
// processes and releases.
//
// Weights (TokenWeight) are built in, not learned, so one tenant's traffic
// never shifts another's scores: a token weighs by how much of a request's
// meaning it usually carries — numbers, symbols and words with digits (the
// "slots" of a request) 3, negations 2, question words 1, other words
// 1 + min(length, 12)/6 (rare words are long: 1.17–3), stop words 0.25.
// `strata eval l3` measures the weighted form against flat weights.
//
// Threading: pure functions.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "cache/text_normalize.h"

namespace strata::cache {

struct WeightedFeature {
  uint64_t hash = 0;  // FeatureHash of the feature's text
  float weight = 0;   // > 0
};

// XXH3 of the text under the fixed seed every fingerprint uses.
uint64_t FeatureHash(std::string_view text);

// The built-in weight of one normalized token (see above); flat = true gives 1
// to every token (for comparisons).
float TokenWeight(const Token& token, bool flat = false);

// One feature per token occurrence: its FeatureHash and TokenWeight.
std::vector<WeightedFeature> TokenFeatures(const NormalizedText& text, bool flat = false);

// Sign-of-weighted-sum fingerprint; 0 for no features.
uint64_t SimHash(std::span<const WeightedFeature> features);

inline int HammingDistance(uint64_t a, uint64_t b) { return std::popcount(a ^ b); }

}  // namespace strata::cache
