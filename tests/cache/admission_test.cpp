#include "cache/admission.h"

#include <gtest/gtest.h>

#include <string>

#include "cache/policy_sim.h"
#include "cache/response_cache.h"
#include "testing/fake_clock.h"
#include "util/random.h"

namespace strata::cache {
namespace {

AdmissionOptions On(double gain = 4.0, uint32_t window = 64) {
  return {.enabled = true,
          .gain = gain,
          .min_probability = 0.05,
          .watch_factor = 2.0,
          .window = window};
}

TEST(AdmissionGate, DisabledAdmitsEverythingAndCountsNothing) {
  AdmissionGate g(AdmissionOptions{});
  EXPECT_TRUE(g.Admit(1, 10, 0.999));
  EXPECT_EQ(g.stats().offered, 0u);
  EXPECT_EQ(g.probability(), 1.0);
}

TEST(AdmissionGate, AdmitsEverythingUntilNewKeysAreShownNotToComeBack) {
  AdmissionGate g(On());
  EXPECT_EQ(g.reuse_ratio(), 1.0);
  EXPECT_TRUE(g.Admit(1, 8, 0.99));
}

TEST(AdmissionGate, NewKeysThatNeverComeBackDriveTheProbabilityToTheFloor) {
  AdmissionGate g(On());
  // Watch list: max(16, 2 x 8) keys; each new key pushes the oldest out unseen.
  for (uint64_t k = 1; k <= 500; ++k) {
    g.RecordLookup(k, false);
    g.Admit(k, 8, 0.5);
  }
  EXPECT_EQ(g.reuse_ratio(), 0.0);
  EXPECT_DOUBLE_EQ(g.probability(), 0.05);
  EXPECT_FALSE(g.Admit(1000, 8, 0.06));
  EXPECT_TRUE(g.Admit(1001, 8, 0.04));
}

TEST(AdmissionGate, AKeyThatCameBackIsAlwaysAdmitted) {
  AdmissionGate g(On());
  for (uint64_t k = 1; k <= 500; ++k) g.Admit(k, 8, 0.99);  // all new, none back: p = floor
  g.Admit(7'000, 8, 0.99);                                  // first time: turned away, watched
  g.RecordLookup(7'000, false);                             // asked for again while watched
  EXPECT_TRUE(g.Admit(7'000, 8, 0.99)) << "it came back: admitted whatever the draw";
  EXPECT_EQ(g.stats().returned, 1u);
}

TEST(AdmissionGate, TheProbabilityIsGainTimesTheShareOfNewKeysThatCameBack) {
  AdmissionGate g(On(4.0, 1024));
  // Every fifth new key is asked for again while watched: r = 0.2, p = 0.8.
  for (uint64_t k = 1; k <= 5000; ++k) {
    g.Admit(k, 8, 0.0);
    if (k % 5 == 0) g.RecordLookup(k, true);
  }
  EXPECT_NEAR(g.reuse_ratio(), 0.2, 0.01);
  EXPECT_NEAR(g.probability(), 0.8, 0.04);
  AdmissionGate h(On(2.0, 1024));
  for (uint64_t k = 1; k <= 5000; ++k) {
    h.Admit(k, 8, 0.0);
    if (k % 5 == 0) h.RecordLookup(k, true);
  }
  EXPECT_NEAR(h.probability(), 0.4, 0.02);
}

TEST(ValidateAdmission, NamesTheFieldOutOfRange) {
  EXPECT_TRUE(ValidateAdmission(On()).ok());
  AdmissionOptions o = On();
  o.gain = 0;
  EXPECT_NE(ValidateAdmission(o).message().find("gain"), std::string::npos);
  o = On();
  o.min_probability = 0;
  EXPECT_NE(ValidateAdmission(o).message().find("min_probability"), std::string::npos);
  o = On();
  o.watch_factor = 100;
  EXPECT_NE(ValidateAdmission(o).message().find("watch_factor"), std::string::npos);
  o = On();
  o.window = 4;
  EXPECT_NE(ValidateAdmission(o).message().find("window"), std::string::npos);
}

// Where a small cache churns under skewed demand, the gate keeps out entries
// that would be evicted unread: more hits, far fewer replacements.
TEST(AdmissionSimulation, RaisesHitsAndCutsReplacementsWhereTheCacheChurns) {
  const auto stream =
      ZipfWorkload(20'000, 200'000, 0.8, 3, TimePoint{}, std::chrono::microseconds(1000));
  for (PolicyKind kind : {PolicyKind::kLru, PolicyKind::kDualFactor}) {
    SCOPED_TRACE(std::string(PolicyKindName(kind)));
    PolicyOptions po;
    po.capacity = 200;
    auto p1 = NewEvictionPolicy(kind, po);
    auto p2 = NewEvictionPolicy(kind, po);
    const SimResult all = SimulatePolicy(*p1, stream, 200);
    const SimResult gated = SimulatePolicy(*p2, stream, 200, On(4.0, 4096), 9);
    EXPECT_GT(gated.hit_ratio(), all.hit_ratio());
    EXPECT_LT(gated.evictions * 3, all.evictions * 2);
    EXPECT_EQ(gated.hits + gated.misses, stream.size());
    EXPECT_EQ(gated.stores + gated.rejected, gated.misses);
  }
}

TEST(AdmissionSimulation, IsDeterministicForASeed) {
  const auto stream =
      ZipfWorkload(5'000, 50'000, 1.0, 4, TimePoint{}, std::chrono::microseconds(1000));
  auto a = NewEvictionPolicy(PolicyKind::kLru);
  auto b = NewEvictionPolicy(PolicyKind::kLru);
  const SimResult ra = SimulatePolicy(*a, stream, 100, On(), 17);
  const SimResult rb = SimulatePolicy(*b, stream, 100, On(), 17);
  EXPECT_EQ(ra.hits, rb.hits);
  EXPECT_EQ(ra.evictions, rb.evictions);
}

class SizedBlob final : public CachedValue {
 public:
  uint64_t ByteSize() const override { return 100; }
};

CacheKey AdmKey(int i) { return CacheKeyBuilder("t").I32(i).Build(); }

TEST(ResponseCacheAdmission, EntriesThatFitAreAlwaysStoredAndAFullColdCacheTurnsMostAway) {
  testing::FakeClock clock;
  ResponseCacheOptions o;
  const uint64_t entry = AdmKey(0).bytes.size() + 100 + kEntryOverheadBytes;
  o.max_bytes = entry * 10;
  o.max_entry_bytes = entry;
  o.admission = On(4.0, 64);
  auto c = std::move(ResponseCache::Create(o, clock, util::Rng(3))).value();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(c->Find(AdmKey(i)).kind, Lookup::Kind::kMiss);
    EXPECT_TRUE(c->Insert(AdmKey(i), std::make_shared<SizedBlob>(), std::chrono::milliseconds(1)))
        << "room left: no admission draw";
  }
  int stored = 0;
  for (int i = 10; i < 410; ++i) {
    EXPECT_EQ(c->Find(AdmKey(i)).kind, Lookup::Kind::kMiss);
    stored += c->Insert(AdmKey(i), std::make_shared<SizedBlob>(), std::chrono::milliseconds(1));
  }
  const ResponseCacheStats s = c->Stats();
  EXPECT_EQ(s.entries, 10u);
  EXPECT_EQ(s.stores, 10u + static_cast<uint64_t>(stored));
  EXPECT_EQ(s.not_admitted, 400u - static_cast<uint64_t>(stored));
  EXPECT_GT(stored, 5);   // p >= 0.05
  EXPECT_LT(stored, 80);  // and falls to 0.05 once new keys are seen not to come back
  // Replacing a live entry is not a new admission: always stored.
  int live = -1;
  for (int i = 0; i < 410 && live < 0; ++i) {
    if (c->Peek(AdmKey(i)) != nullptr) live = i;
  }
  ASSERT_GE(live, 0);
  for (int i = 0; i < 50; ++i) {
    EXPECT_TRUE(
        c->Insert(AdmKey(live), std::make_shared<SizedBlob>(), std::chrono::milliseconds(1)));
  }
  EXPECT_EQ(c->Stats().entries, 10u);
}

TEST(ResponseCacheAdmission, OutOfRangeAdmissionOptionsAreRejected) {
  testing::FakeClock clock;
  ResponseCacheOptions o;
  o.admission = On();
  o.admission.gain = -2;
  auto c = ResponseCache::Create(o, clock, util::Rng(1));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("gain"), std::string::npos);
}

}  // namespace
}  // namespace strata::cache
