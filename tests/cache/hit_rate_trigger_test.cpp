#include "cache/hit_rate_trigger.h"

#include <gtest/gtest.h>

#include "cache/false_hit_control.h"

namespace strata::cache {
namespace {

// Records `hits` hits then misses, `n` lookups in all; the last event.
std::optional<HitRateEvent> Feed(HitRateTrigger& t, int n, int hits, bool learning = false) {
  std::optional<HitRateEvent> last;
  for (int i = 0; i < n; ++i) {
    if (auto e = t.Record(i < hits, learning)) last = e;
  }
  return last;
}

TEST(HitRateTrigger, FiresBelowTheFloorAndReportsTheRateAfterRelearning) {
  HitRateTrigger t({.floor = 0.5, .window = 10, .cooldown = 1});
  EXPECT_FALSE(t.rate().has_value());
  EXPECT_FALSE(Feed(t, 10, 6).has_value()) << "0.6 is above the floor";
  EXPECT_DOUBLE_EQ(*t.rate(), 0.6);
  auto fired = Feed(t, 10, 2);
  ASSERT_TRUE(fired.has_value());
  EXPECT_EQ(fired->kind, HitRateEvent::Kind::kTriggered);
  EXPECT_DOUBLE_EQ(fired->before, 0.2);
  EXPECT_EQ(t.triggers(), 1u);
  // While the tier re-learns its windows do not count: the after-window is
  // the first clean one.
  EXPECT_FALSE(Feed(t, 7, 0).has_value());
  EXPECT_FALSE(Feed(t, 1, 0, /*learning=*/true).has_value());
  auto settled = Feed(t, 10, 9);
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->kind, HitRateEvent::Kind::kSettled);
  EXPECT_DOUBLE_EQ(settled->before, 0.2);
  EXPECT_DOUBLE_EQ(settled->after, 0.9);
  // One window of cooldown, then it may fire again.
  EXPECT_FALSE(Feed(t, 10, 0).has_value());
  auto again = Feed(t, 10, 0);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->kind, HitRateEvent::Kind::kTriggered);
  EXPECT_EQ(t.triggers(), 2u);
}

TEST(HitRateTrigger, FloorZeroIsOffAndOptionsAreChecked) {
  HitRateTrigger off({.floor = 0, .window = 10, .cooldown = 0});
  EXPECT_FALSE(Feed(off, 100, 0).has_value());
  EXPECT_TRUE(HitRateTrigger::Validate({}).ok());
  EXPECT_FALSE(HitRateTrigger::Validate({.floor = 1.0}).ok());
  EXPECT_FALSE(HitRateTrigger::Validate({.floor = -0.1}).ok());
  EXPECT_FALSE(HitRateTrigger::Validate({.floor = 0.5, .window = 9}).ok());
}

TEST(FalseHitControl, RelearnKeepsOnlyRecentChecksAndWarmsUpAgain) {
  FalseHitControl c(
      {.max_false_hit = 0.1, .floor = 0.8, .verify_share = 0.1, .min_samples = 20, .window = 100});
  for (int i = 0; i < 100; ++i) c.Record(0.95, /*agreed=*/true);
  EXPECT_FALSE(c.Estimate().warming_up);
  EXPECT_DOUBLE_EQ(c.VerifyShare(), 0.1);
  c.Relearn();  // 25 newest kept: still enough at the floor
  EXPECT_EQ(c.Estimate().samples, 25u);
  EXPECT_FALSE(c.Estimate().warming_up);
  FalseHitControl few(
      {.max_false_hit = 0.1, .floor = 0.8, .verify_share = 0.1, .min_samples = 50, .window = 100});
  for (int i = 0; i < 100; ++i) few.Record(0.95, true);
  few.Relearn();
  EXPECT_TRUE(few.Estimate().warming_up) << "25 left, 50 needed: every would-be hit verified";
  EXPECT_DOUBLE_EQ(few.VerifyShare(), 1.0);
}

}  // namespace
}  // namespace strata::cache
