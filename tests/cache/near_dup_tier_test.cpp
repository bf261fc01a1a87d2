// NearDupIndex as a response tier: stored answers, jittered TTLs, the
// observer's events, admission, and the byte form of prepared texts.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <set>
#include <string>

#include "cache/near_dup.h"
#include "testing/fake_clock.h"

namespace strata::cache {
namespace {

using std::chrono::seconds;

class Answer final : public CachedValue {
 public:
  explicit Answer(std::string text) : text_(std::move(text)) {}
  uint64_t ByteSize() const override { return sizeof(*this) + text_.size(); }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

class Counting final : public TierObserver {
 public:
  void OnHit() override { ++hits; }
  void OnMiss() override { ++misses; }
  void OnEarlyRefresh() override {}
  void OnStore(uint64_t b) override {
    ++entries;
    bytes += static_cast<int64_t>(b);
  }
  void OnRemove(uint64_t b, RemoveReason r) override {
    --entries;
    bytes -= static_cast<int64_t>(b);
    evictions += r == RemoveReason::kEvicted;
    expirations += r == RemoveReason::kExpired;
    replaced += r == RemoveReason::kReplaced;
  }
  int hits = 0, misses = 0, evictions = 0, expirations = 0, replaced = 0;
  int64_t entries = 0, bytes = 0;
};

NearDupText TierPrep(std::string_view s) { return PrepareNearDupText(s).value(); }

class NearDupTierTest : public ::testing::Test {
 protected:
  std::unique_ptr<NearDupIndex> Make(NearDupOptions o, uint64_t seed = 1) {
    auto r = NearDupIndex::Create(o, clock_, util::Rng(seed), &observer_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(r).value();
  }
  testing::FakeClock clock_;
  Counting observer_;
  const std::string ns_ = NearDupNamespace("tenant-a", "model-1");
};

TEST_F(NearDupTierTest, AMatchCarriesTheStoredAnswerAndItsBytesCount) {
  auto index = Make({});
  const auto answer = std::make_shared<Answer>(std::string(5000, 'x'));
  ASSERT_TRUE(
      index->Insert(ns_, TierPrep("How do I reverse a linked list in Python?"), 7, answer).ok());
  EXPECT_GE(index->stats().bytes, 5000u);
  EXPECT_EQ(observer_.bytes, static_cast<int64_t>(index->stats().bytes));
  auto hit = index->Lookup(ns_, TierPrep("how do i reverse a linked list in python"));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->value, answer);
  EXPECT_EQ(hit->payload, 7u);
  EXPECT_FALSE(index->Lookup(ns_, TierPrep("How do I sort a linked list in Python?")).has_value());
  EXPECT_EQ(observer_.hits, 1);
  EXPECT_EQ(observer_.misses, 1);
}

TEST_F(NearDupTierTest, TtlsAreJitteredAndExpiredEntriesNeverMatch) {
  NearDupOptions o;
  o.ttl = seconds(100);
  o.ttl_jitter = 0.5;
  auto index = Make(o);
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(
        index->Insert(ns_, TierPrep(fmt::format("question number {} about the weather", i)), i)
            .ok());
  }
  // At 100 s ± 50 %, some have expired by 90 s and some live past 110 s.
  clock_.Advance(seconds(90));
  int live_at_90 = 0;
  for (int i = 0; i < 40; ++i) {
    live_at_90 +=
        index->Lookup(ns_, TierPrep(fmt::format("question number {} about the weather", i)))
            .has_value();
  }
  EXPECT_GT(live_at_90, 5);
  EXPECT_LT(live_at_90, 35);
  clock_.Advance(seconds(61));  // 151 s: past every TTL
  for (int i = 0; i < 40; ++i) {
    EXPECT_FALSE(
        index->Lookup(ns_, TierPrep(fmt::format("question number {} about the weather", i)))
            .has_value());
  }
  EXPECT_EQ(index->stats().entries, 0u);
  EXPECT_EQ(observer_.expirations, 40);
  EXPECT_EQ(observer_.entries, 0);
}

TEST_F(NearDupTierTest, ExpiredEntriesMakeRoomBeforeLiveOnesAreEvicted) {
  NearDupOptions o;
  o.max_entries = 4;
  o.ttl = seconds(10);
  auto index = Make(o);
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(std::chrono::milliseconds(10));
    ASSERT_TRUE(index->Insert(ns_, TierPrep(fmt::format("old entry {} about cats", i)), i).ok());
  }
  clock_.Advance(seconds(5));
  ASSERT_TRUE(index->Insert(ns_, TierPrep("a newer entry about dogs"), 100).ok());
  clock_.Advance(seconds(6));  // the three old ones are expired, the newer one is not
  ASSERT_TRUE(index->Insert(ns_, TierPrep("the newest entry about birds"), 101).ok());
  ASSERT_TRUE(index->Insert(ns_, TierPrep("another fresh entry about fish"), 102).ok());
  EXPECT_EQ(observer_.evictions, 0);
  EXPECT_EQ(observer_.expirations, 3);
  EXPECT_TRUE(index->Lookup(ns_, TierPrep("a newer entry about dogs")).has_value());
}

TEST_F(NearDupTierTest, TheObserverSeesStoresReplacementsAndEvictions) {
  NearDupOptions o;
  o.max_entries = 10;
  auto index = Make(o);
  for (int i = 0; i < 30; ++i) {
    clock_.Advance(std::chrono::milliseconds(10));
    ASSERT_TRUE(
        index->Insert(ns_, TierPrep(fmt::format("request {} about topic {}", i, i * 7)), i).ok());
  }
  clock_.Advance(std::chrono::milliseconds(10));
  ASSERT_TRUE(index->Insert(ns_, TierPrep("request 29 about topic 203"), 29).ok());  // same payload
  EXPECT_EQ(observer_.evictions, 20);
  EXPECT_EQ(observer_.replaced, 1);
  EXPECT_EQ(observer_.entries, 10);
  EXPECT_EQ(observer_.bytes, static_cast<int64_t>(index->stats().bytes));
}

TEST_F(NearDupTierTest, AFullIndexAsksTheAdmissionGateForNewEntriesOnly) {
  NearDupOptions o;
  o.max_entries = 8;
  o.admission = {
      .enabled = true, .gain = 4.0, .min_probability = 0.05, .watch_factor = 2.0, .window = 32};
  auto index = Make(o, 3);
  int turned_away = 0;
  for (int i = 0; i < 400; ++i) {
    clock_.Advance(std::chrono::milliseconds(10));
    const NearDupText t = TierPrep(fmt::format("one-off question {} about subject {}", i, i * 13));
    EXPECT_FALSE(index->Lookup(ns_, t).has_value());
    const uint64_t before = index->stats().not_admitted;
    ASSERT_TRUE(index->Insert(ns_, t, static_cast<uint64_t>(i)).ok());
    turned_away += index->stats().not_admitted > before;
  }
  EXPECT_EQ(index->stats().entries, 8u);
  EXPECT_GT(turned_away, 250) << "new keys never come back: p falls to the floor";
  EXPECT_EQ(index->stats().inserts + index->stats().not_admitted, 400u);
}

TEST_F(NearDupTierTest, OutOfRangeJitterAndAdmissionAreRejectedByName) {
  NearDupOptions o;
  o.ttl_jitter = 1.5;
  auto a = NearDupIndex::Create(o, clock_);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("ttl_jitter"), std::string::npos);
  NearDupOptions b;
  b.admission.enabled = true;
  b.admission.window = 1;
  auto c = NearDupIndex::Create(b, clock_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("window"), std::string::npos);
}

TEST(NearDupCodec, ATextSurvivesItsByteFormAndScoresTheSame) {
  const NearDupText a = TierPrep("What's the capital of France, and how big is Paris?");
  const NearDupText b = TierPrep("what is the capital of france and how big is paris");
  auto decoded = DecodeNearDupText(EncodeNearDupText(a));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->tokens, a.tokens);
  EXPECT_EQ(decoded->weights, a.weights);
  EXPECT_EQ(decoded->flags, a.flags);
  EXPECT_EQ(decoded->fingerprint, a.fingerprint);
  EXPECT_EQ(decoded->sequence_hash, a.sequence_hash);
  EXPECT_EQ(decoded->total_weight, a.total_weight);
  EXPECT_EQ(ScorePair(*decoded, b).similarity, ScorePair(a, b).similarity);
}

TEST(NearDupCodec, DamagedBytesAreDataLossNeverACrash) {
  const std::string good = EncodeNearDupText(TierPrep("how many legs does a spider have"));
  EXPECT_EQ(DecodeNearDupText("").status().code(), util::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeNearDupText("L3T2" + good.substr(4)).status().code(),
            util::StatusCode::kDataLoss);
  for (size_t cut = 0; cut < good.size(); cut += 3) {
    EXPECT_FALSE(DecodeNearDupText(good.substr(0, cut)).ok()) << cut;
  }
  EXPECT_FALSE(DecodeNearDupText(good + "x").ok());
  std::string huge = good;
  huge[4] = huge[5] = huge[6] = huge[7] = '\xff';  // token count 2^32 - 1
  EXPECT_FALSE(DecodeNearDupText(huge).ok());
}

}  // namespace
}  // namespace strata::cache
