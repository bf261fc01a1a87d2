#include "cache/eviction_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "util/random.h"

namespace strata::cache {
namespace {

using std::chrono::seconds;

TimePoint T(int s) { return TimePoint(seconds(1000 + s)); }

// Every policy must pass these (the conformance suite).
class PolicyConformance : public ::testing::TestWithParam<PolicyKind> {
 protected:
  std::unique_ptr<EvictionPolicy> Make(size_t capacity = 64) {
    PolicyOptions o;
    o.capacity = capacity;
    return NewEvictionPolicy(GetParam(), o);
  }
};

TEST_P(PolicyConformance, EmptyHasNoVictim) {
  auto p = Make();
  EXPECT_FALSE(p->Victim(T(0)).has_value());
  EXPECT_EQ(p->size(), 0u);
}

TEST_P(PolicyConformance, VictimsArePresentKeysAndEachLeavesOnce) {
  auto p = Make(16);
  util::Rng rng(3);
  std::set<uint64_t> present;
  for (int i = 0; i < 200; ++i) {
    const uint64_t k = 1 + rng.Below(60);
    if (present.count(k)) {
      p->Access(k, T(i));
    } else {
      p->Insert(k, 1, T(i));
      present.insert(k);
    }
    while (present.size() > 16) {
      auto v = p->Victim(T(i));
      ASSERT_TRUE(v.has_value());
      ASSERT_EQ(present.count(*v), 1u) << "victim " << *v << " is not in the cache";
      p->Erase(*v);
      present.erase(*v);
    }
    ASSERT_EQ(p->size(), present.size());
  }
  // Drain: every key comes out exactly once.
  while (auto v = p->Victim(T(300))) {
    ASSERT_EQ(present.erase(*v), 1u);
    p->Erase(*v);
  }
  EXPECT_TRUE(present.empty());
}

TEST_P(PolicyConformance, ErasedKeysAreNeverVictims) {
  auto p = Make();
  for (uint64_t k = 1; k <= 10; ++k) p->Insert(k, 1, T(static_cast<int>(k)));
  for (uint64_t k = 1; k <= 10; k += 2) p->Erase(k);
  p->Erase(999);          // absent: no-op
  p->Access(999, T(20));  // absent: no-op
  for (int i = 0; i < 5; ++i) {
    const auto v = p->Victim(T(30));
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(*v % 2, 0u);
    p->Erase(*v);
  }
  EXPECT_FALSE(p->Victim(T(30)).has_value());
}

// VictimAmong(allowed) names what Victim would if the keys it refuses were
// not in the policy at all: checked against a twin policy given the same
// history, from which the refused keys are erased.
TEST_P(PolicyConformance, VictimAmongIsVictimWithoutTheRefusedKeys) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto p = Make(16);
    auto twin = Make(16);
    util::Rng rng(seed);
    std::set<uint64_t> present;
    for (int i = 0; i < 120; ++i) {
      const uint64_t k = 1 + rng.Below(24);
      for (EvictionPolicy* q : {p.get(), twin.get()}) {
        if (present.count(k)) {
          q->Access(k, T(i));
        } else {
          q->Insert(k, 1, T(i));
        }
      }
      present.insert(k);
    }
    const auto all = [](uint64_t) { return true; };
    EXPECT_EQ(p->VictimAmong(T(200), all), p->Victim(T(200))) << "seed " << seed;
    const uint64_t modulus = 2 + seed % 3;
    const auto allowed = [modulus](uint64_t key) { return key % modulus == 0; };
    for (uint64_t k : present) {
      if (!allowed(k)) twin->Erase(k);
    }
    const std::optional<uint64_t> v = p->VictimAmong(T(200), allowed);
    EXPECT_EQ(v, twin->Victim(T(200))) << "seed " << seed;
    if (v) {
      EXPECT_TRUE(allowed(*v));
    }
    EXPECT_FALSE(p->VictimAmong(T(200), [](uint64_t) { return false; }).has_value());
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyConformance,
                         ::testing::Values(PolicyKind::kLru, PolicyKind::kDualFactor,
                                           PolicyKind::kWTinyLfu),
                         [](const ::testing::TestParamInfo<PolicyKind>& param_info) {
                           std::string n(PolicyKindName(param_info.param));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(LruPolicy, EvictsTheLeastRecentlyUsed) {
  auto p = NewEvictionPolicy(PolicyKind::kLru);
  p->Insert(1, 1, T(0));
  p->Insert(2, 1, T(1));
  p->Insert(3, 1, T(2));
  p->Access(1, T(3));
  EXPECT_EQ(*p->Victim(T(4)), 2u);
}

TEST(DualFactorPolicy, ScoreFollowsRecencyAndFrequency) {
  PolicyOptions o;
  o.lambda_per_s = 0.1;
  o.k = 1.0;
  auto p = NewEvictionPolicy(PolicyKind::kDualFactor, o);
  // Key 1: accessed often but long ago; key 2: once, recently.
  p->Insert(1, 1, T(0));
  for (int i = 1; i <= 9; ++i) p->Access(1, T(i));
  p->Insert(2, 1, T(10));
  // score(1) = e^{-0.1·1}·n/(n+1) with n≈10 ≈ 0.82; score(2) = 1·0.5 = 0.5: 2 goes first.
  EXPECT_EQ(*p->Victim(T(10)), 2u);
  // Much later the order holds (it never changes while time passes)...
  EXPECT_EQ(*p->Victim(T(500)), 2u);
  // ...until an access changes it: key 2 fresh again at t=60 beats key 1 last seen at t=9.
  p->Access(2, T(60));
  EXPECT_EQ(*p->Victim(T(60)), 1u);
}

TEST(WTinyLfuPolicy, FrequentKeysSurviveAScanOfOneHitWonders) {
  PolicyOptions o;
  o.capacity = 100;
  auto p = NewEvictionPolicy(PolicyKind::kWTinyLfu, o);
  std::set<uint64_t> present;
  auto touch = [&](uint64_t k, int t) {
    if (present.count(k)) {
      p->Access(k, T(t));
    } else {
      p->Insert(k, 1, T(t));
      present.insert(k);
    }
    while (present.size() > 100) {
      const uint64_t v = *p->Victim(T(t));
      p->Erase(v);
      present.erase(v);
    }
  };
  // A hot set of 50 keys, accessed repeatedly...
  for (int round = 0; round < 20; ++round)
    for (uint64_t k = 1; k <= 50; ++k) touch(k, round);
  // ...then a long scan of keys seen once.
  for (uint64_t k = 1000; k < 3000; ++k) touch(k, 100);
  int hot_left = 0;
  for (uint64_t k = 1; k <= 50; ++k) hot_left += static_cast<int>(present.count(k));
  EXPECT_GE(hot_left, 45) << "the scan flushed the hot set";
}

TEST(EvictionPolicy, NamesParse) {
  EXPECT_EQ(*ParsePolicyKind("dual-factor"), PolicyKind::kDualFactor);
  EXPECT_FALSE(ParsePolicyKind("fifo").has_value());
}

}  // namespace
}  // namespace strata::cache
