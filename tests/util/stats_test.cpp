#include "util/stats.h"

#include <gtest/gtest.h>

#include <vector>

namespace strata::util {
namespace {

TEST(WilsonIntervalTest, NoTrialsIsTheWholeRange) {
  EXPECT_EQ(WilsonInterval(0, 0), std::make_pair(0.0, 1.0));
}

TEST(WilsonIntervalTest, KnownValues) {
  // 1 of 20 at 95 %: [0.0089, 0.2361] (Wilson 1927, as tabulated by Newcombe 1998).
  auto [lo, hi] = WilsonInterval(1, 20);
  EXPECT_NEAR(lo, 0.0089, 1e-4);
  EXPECT_NEAR(hi, 0.2361, 1e-4);
  // All successes: the upper end is 1, the lower end below it.
  auto [lo2, hi2] = WilsonInterval(10, 10);
  EXPECT_DOUBLE_EQ(hi2, 1.0);
  EXPECT_NEAR(lo2, 0.7225, 1e-4);
  // None: the lower end is 0.
  EXPECT_DOUBLE_EQ(WilsonInterval(0, 10).first, 0.0);
}

TEST(WilsonIntervalTest, NarrowsWithMoreTrials) {
  auto a = WilsonInterval(5, 10);
  auto b = WilsonInterval(500, 1000);
  EXPECT_LT(b.second - b.first, a.second - a.first);
  EXPECT_LT(b.first, 0.5);
  EXPECT_GT(b.second, 0.5);
}

TEST(NearestRankQuantileTest, Ranks) {
  std::vector<double> v{5, 1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(NearestRankQuantile(v, 0.5), 3);
  EXPECT_DOUBLE_EQ(NearestRankQuantile(v, 0.0), 1);
  EXPECT_DOUBLE_EQ(NearestRankQuantile(v, 1.0), 5);
  EXPECT_DOUBLE_EQ(NearestRankQuantile(v, 0.99), 5);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_DOUBLE_EQ(NearestRankQuantile(hundred, 0.99), 99);
  std::vector<double> none;
  EXPECT_DOUBLE_EQ(NearestRankQuantile(none, 0.99), 0);
}

}  // namespace
}  // namespace strata::util
