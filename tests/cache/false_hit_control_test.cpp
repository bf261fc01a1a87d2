#include "cache/false_hit_control.h"

#include <gtest/gtest.h>

#include "util/random.h"

namespace strata::cache {
namespace {

FalseHitOptions ControlOptions() {
  FalseHitOptions o;
  o.max_false_hit = 0.05;
  o.floor = 0.7;
  o.min_samples = 20;
  o.window = 400;
  o.verify_share = 0.1;
  return o;
}

TEST(FalseHitControl, WarmsUpAtTheFloorVerifyingEverything) {
  FalseHitControl c(ControlOptions());
  EXPECT_EQ(c.threshold(), 0.7);
  EXPECT_EQ(c.VerifyShare(), 1.0);
  EXPECT_TRUE(c.Estimate().warming_up);
  for (int i = 0; i < 19; ++i) c.Record(0.8, true);
  EXPECT_EQ(c.VerifyShare(), 1.0);
  c.Record(0.8, true);
  EXPECT_FALSE(c.Estimate().warming_up);
  EXPECT_EQ(c.VerifyShare(), 0.1);
  EXPECT_EQ(c.threshold(), 0.8);
  // Records below the floor say nothing.
  FalseHitControl d(ControlOptions());
  for (int i = 0; i < 50; ++i) d.Record(0.5, false);
  EXPECT_TRUE(d.Estimate().warming_up);
}

// Would-be hits whose chance of being wrong falls as the similarity rises:
// wrong with probability 0.5 below 0.85, 0.01 above. The learned threshold
// lands where the verified rate is within the bound, and the estimate's
// interval covers the rate of what it serves.
TEST(FalseHitControl, LearnsTheThresholdThatKeepsTheRateUnderTheBound) {
  FalseHitControl c(ControlOptions());
  util::Rng rng(3);
  for (int i = 0; i < 400; ++i) {
    const double s = 0.7 + 0.3 * rng.Uniform();
    const bool wrong = rng.Uniform() < (s < 0.85 ? 0.5 : 0.01);
    c.Record(s, !wrong);
  }
  const FalseHitEstimate e = c.Estimate();
  EXPECT_GE(e.threshold, 0.83);
  EXPECT_LE(e.threshold, 0.9);
  EXPECT_LE(e.rate, 0.05);
  EXPECT_GE(e.samples, 20u);
  EXPECT_LE(e.lower, e.rate);
  EXPECT_GE(e.upper, e.rate);
}

TEST(FalseHitControl, ServesNothingWhenEveryThresholdFailsAndRecovers) {
  FalseHitControl c(ControlOptions());
  for (int i = 0; i < 100; ++i) c.Record(0.95, i % 2 == 0);
  EXPECT_GT(c.threshold(), 1.0) << "half wrong at every threshold";
  for (int i = 0; i < 400; ++i) c.Record(0.95, true);  // the window slides past them
  EXPECT_EQ(c.threshold(), 0.95);
  EXPECT_EQ(c.Estimate().false_hits, 0u);
}

TEST(FalseHitControl, RefusesOptionsOutOfRange) {
  FalseHitOptions o = ControlOptions();
  EXPECT_TRUE(FalseHitControl::Validate(o).ok());
  o.max_false_hit = 0;
  EXPECT_FALSE(FalseHitControl::Validate(o).ok());
  o = ControlOptions();
  o.window = 10;  // below min_samples
  EXPECT_FALSE(FalseHitControl::Validate(o).ok());
  o = ControlOptions();
  o.verify_share = 1.5;
  EXPECT_FALSE(FalseHitControl::Validate(o).ok());
}

}  // namespace
}  // namespace strata::cache
