#include "cache/simhash.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "util/random.h"

namespace strata::cache {
namespace {

uint64_t Fingerprint(std::string_view text) {
  auto n = NormalizeText(text);
  EXPECT_TRUE(n.ok());
  const auto f = TokenFeatures(*n);
  return SimHash(f);
}

// A sentence of `n` words drawn from a vocabulary of 2000 made-up words.
std::vector<std::string> RandomWords(util::Rng& rng, size_t n) {
  std::vector<std::string> w;
  for (size_t i = 0; i < n; ++i) w.push_back(fmt::format("w{}", rng.Below(2000)));
  return w;
}

std::string Join(const std::vector<std::string>& w) {
  std::string s;
  for (const auto& x : w) {
    if (!s.empty()) s.push_back(' ');
    s += x;
  }
  return s;
}

TEST(SimHash, IdenticalTextsHaveDistanceZero) {
  EXPECT_EQ(
      HammingDistance(Fingerprint("How do I bake bread?"), Fingerprint("how do i   BAKE bread")),
      0);
}

TEST(SimHash, IsDeterministicAcrossRunsAndReleases) {
  // Stored fingerprints depend on these values: changing the feature hash,
  // its seed or the weights must be a deliberate, visible change.
  EXPECT_EQ(FeatureHash("hello"), FeatureHash("hello"));
  EXPECT_EQ(Fingerprint("What is the capital of France?"),
            Fingerprint("what is the capital of france"));
  EXPECT_EQ(Fingerprint("What is the capital of France?"), 0x56AB0472FCC4F453ULL);
}

TEST(SimHash, SmallEditsGiveSmallDistancesOnAverage) {
  util::Rng rng(7);
  double edited = 0, unrelated = 0;
  const int n = 300;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> a = RandomWords(rng, 20);
    std::vector<std::string> b = a;
    b[rng.Below(b.size())] = fmt::format("w{}", 2000 + rng.Below(2000));  // one word replaced
    edited += HammingDistance(Fingerprint(Join(a)), Fingerprint(Join(b)));
    unrelated += HammingDistance(Fingerprint(Join(a)), Fingerprint(Join(RandomWords(rng, 20))));
  }
  edited /= n;
  unrelated /= n;
  EXPECT_LT(edited, 10.0);
  EXPECT_GT(unrelated, 28.0);
  EXPECT_LT(unrelated, 36.0);
}

TEST(SimHash, EmptyFeatureListGivesZero) { EXPECT_EQ(SimHash({}), 0u); }

TEST(SimHash, HeavierFeaturesDecideTheBits) {
  const WeightedFeature heavy{0xFFFFFFFF00000000ULL, 3.0f};
  const WeightedFeature light{0x00000000FFFFFFFFULL, 1.0f};
  const std::vector<WeightedFeature> f = {heavy, light};
  EXPECT_EQ(SimHash(f), 0xFFFFFFFF00000000ULL);
}

TEST(TokenWeight, NumbersAndRareWordsWeighMoreThanStopWords) {
  auto n = NormalizeText("the 42 not why internationalization cat");
  ASSERT_TRUE(n.ok());
  const auto& t = n->tokens;
  EXPECT_FLOAT_EQ(TokenWeight(t[0]), 0.25f);  // the
  EXPECT_FLOAT_EQ(TokenWeight(t[1]), 3.0f);   // 42
  EXPECT_FLOAT_EQ(TokenWeight(t[2]), 2.0f);   // not
  EXPECT_FLOAT_EQ(TokenWeight(t[3]), 1.0f);   // why
  EXPECT_FLOAT_EQ(TokenWeight(t[4]), 3.0f);   // long word, capped at 12 code points
  EXPECT_FLOAT_EQ(TokenWeight(t[5]), 1.5f);   // cat
  for (const Token& x : t) EXPECT_FLOAT_EQ(TokenWeight(x, /*flat=*/true), 1.0f);
}

}  // namespace
}  // namespace strata::cache
