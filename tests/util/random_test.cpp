#include "util/random.h"

#include <gtest/gtest.h>

#include <cmath>

namespace strata::util {
namespace {

TEST(Rng, SameSeedSameSequence) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs |= x != c.Next();
  }
  EXPECT_TRUE(differs);
}

TEST(Rng, SequenceIsFixedAcrossReleases) {
  // Stored seeds must keep meaning the same draws: pin the first outputs.
  Rng r(0);
  EXPECT_EQ(r.Next(), 0x99ec5f36cb75f2b4ULL);
  EXPECT_EQ(r.Next(), 0xbf6e1f784956452aULL);
}

TEST(Rng, UniformAndBelowStayInRange) {
  Rng r(7);
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = r.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    ASSERT_LT(r.Below(10), 10u);
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.01);
}

TEST(Rng, NormalHasUnitVariance) {
  Rng r(9);
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = r.Normal();
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.02);
}

}  // namespace
}  // namespace strata::util
