#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

namespace strata::sampling {
namespace {

TEST(Sampler, ZeroTemperatureIsArgmax) {
  Sampler s({.temperature = 0.0f, .seed = 1});
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -5.0f};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(*s.Sample(logits), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> logits(100);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  SamplingParams p{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 77};
  Sampler a(p), b(p);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(*a.Sample(logits), *b.Sample(logits));
}

TEST(Sampler, TopKLimitsTheSupport) {
  std::vector<float> logits = {5, 4, 3, 2, 1, 0};
  Sampler s({.temperature = 5.0f, .top_k = 2, .top_p = 1.0f, .min_p = 0.0f, .seed = 3});
  for (int i = 0; i < 500; ++i) EXPECT_LT(*s.Sample(logits), 2);
}

TEST(Sampler, DrawsFollowTheSoftmax) {
  // Three tokens with probabilities 0.5, 0.3, 0.2: a chi-square goodness of fit.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 11});
  const int n = 30000;
  std::map<int, int> counts;
  for (int i = 0; i < n; ++i) counts[*s.Sample(logits)]++;
  const double p[] = {0.5, 0.3, 0.2};
  double chi2 = 0;
  for (int k = 0; k < 3; ++k) chi2 += std::pow(counts[k] - n * p[k], 2) / (n * p[k]);
  EXPECT_LT(chi2, 13.8);  // p = 0.001 for 2 degrees of freedom
}

TEST(Sampler, TopPKeepsTheSmallestSufficientPrefix) {
  std::vector<Candidate> c = {{0, std::log(0.5f)}, {1, std::log(0.3f)}, {2, std::log(0.2f)}};
  SortDescending(c);
  TopP(c, 0.75f);
  EXPECT_EQ(c.size(), 2u);
  std::vector<Candidate> d = {{0, std::log(0.5f)}, {1, std::log(0.3f)}, {2, std::log(0.2f)}};
  MinP(d, 0.5f);
  EXPECT_EQ(d.size(), 2u);
}

TEST(Sampler, NonFiniteLogitsAreErrors) {
  Sampler s({.temperature = 1.0f, .seed = 1});
  EXPECT_FALSE(s.Sample(std::vector<float>{0.0f, std::nanf("")}).ok());
  EXPECT_FALSE(s.Sample(std::vector<float>{std::numeric_limits<float>::infinity()}).ok());
  const float ninf = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(s.Sample(std::vector<float>{ninf, ninf}).ok());
  EXPECT_EQ(*s.Sample(std::vector<float>{ninf, 0.0f}), 1);
}

TEST(Sampler, InvalidParametersNameTheField) {
  EXPECT_NE(Validate({.temperature = -1.0f}).message().find("temperature"), std::string::npos);
  EXPECT_NE(Validate({.top_p = 0.0f}).message().find("top_p"), std::string::npos);
  EXPECT_NE(Validate({.min_p = 1.0f}).message().find("min_p"), std::string::npos);
  EXPECT_NE(Validate({.top_k = -2}).message().find("top_k"), std::string::npos);
  EXPECT_TRUE(Validate({}).ok());
}

}  // namespace
}  // namespace strata::sampling

namespace strata::sampling {
namespace {

TEST(Sampler, PenaltiesLowerRepeatedTokens) {
  std::vector<float> logits = {1.0f, 0.9f, 0.0f};
  SamplingParams p{.temperature = 0.0f, .presence_penalty = 0.5f, .frequency_penalty = 0.0f, .seed = 1};
  Sampler s(p);
  EXPECT_EQ(*s.Sample(logits), 0);  // nothing generated yet
  EXPECT_EQ(*s.Sample(logits), 1);  // token 0 now carries the presence penalty
  std::vector<float> l = {2.0f, -2.0f, 0.0f};
  SamplingParams rp;
  rp.repetition_penalty = 2.0f;
  rp.frequency_penalty = 0.25f;
  ApplyPenalties(l, {{0, 2}, {1, 1}}, rp);
  EXPECT_FLOAT_EQ(l[0], 2.0f / 2 - 0.5f);
  EXPECT_FLOAT_EQ(l[1], -2.0f * 2 - 0.25f);
  EXPECT_FLOAT_EQ(l[2], 0.0f);
  EXPECT_FALSE(Validate({.presence_penalty = 3.0f}).ok());
  EXPECT_FALSE(Validate({.repetition_penalty = 0.0f}).ok());
}

}  // namespace
}  // namespace strata::sampling
