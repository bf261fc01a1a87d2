#include "cache/simhash.h"

#include <algorithm>
#include <array>

#include "cache/internal/lexicon.h"
#include "util/hash.h"

namespace strata::cache {
namespace {

// Fixed forever: stored fingerprints depend on it.
constexpr uint64_t kFeatureSeed = 0x5354524154414c33ULL;  // "STRATAL3"

size_t CodePoints(std::string_view s) {
  size_t n = 0;
  for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

}  // namespace

uint64_t FeatureHash(std::string_view text) { return util::Hash64(text, kFeatureSeed); }

float TokenWeight(const Token& token, bool flat) {
  if (flat) return 1.0f;
  if (token.kind == TokenKind::kNumber || token.kind == TokenKind::kSymbol || token.has_digit) {
    return 3.0f;
  }
  if (internal::IsNegation(token.text)) return 2.0f;
  if (internal::IsQuestionWord(token.text)) return 1.0f;
  if (internal::IsStopWord(token.text)) return 0.25f;
  return 1.0f + static_cast<float>(std::min<size_t>(CodePoints(token.text), 12)) / 6.0f;
}

std::vector<WeightedFeature> TokenFeatures(const NormalizedText& text, bool flat) {
  std::vector<WeightedFeature> out;
  out.reserve(text.tokens.size());
  for (const Token& t : text.tokens) out.push_back({FeatureHash(t.text), TokenWeight(t, flat)});
  return out;
}

uint64_t SimHash(std::span<const WeightedFeature> features) {
  std::array<double, 64> sum{};
  for (const WeightedFeature& f : features) {
    for (int bit = 0; bit < 64; ++bit) {
      sum[static_cast<size_t>(bit)] += ((f.hash >> bit) & 1) ? f.weight : -f.weight;
    }
  }
  uint64_t out = 0;
  for (int bit = 0; bit < 64; ++bit) {
    if (sum[static_cast<size_t>(bit)] > 0) out |= uint64_t{1} << bit;
  }
  return out;
}

}  // namespace strata::cache
