#include "sampling/tiers.h"

#include <gtest/gtest.h>

namespace strata::sampling {
namespace {

TEST(SamplingTiers, TheTopKTierTurnsOffTheExpensivePolicies) {
  SamplingParams p;
  p.target_entropy = 2.0f;
  p.typical_p = 0.9f;
  p.top_k = 0;
  const SamplingParams q = ApplyTier(p, SamplingTier::kTopK);
  EXPECT_LT(q.target_entropy, 0.0f);
  EXPECT_EQ(q.typical_p, 1.0f);
  EXPECT_EQ(q.top_k, 40);
  EXPECT_TRUE(Validate(q).ok());
  p.top_k = 10;
  EXPECT_EQ(ApplyTier(p, SamplingTier::kTopK).top_k, 10);
  EXPECT_EQ(ApplyTier(p, SamplingTier::kEntropyTargeted).target_entropy, 2.0f);
}

}  // namespace
}  // namespace strata::sampling
