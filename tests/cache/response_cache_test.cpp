#include "cache/response_cache.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "cache/single_flight.h"
#include "testing/fake_clock.h"

namespace strata::cache {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A stored answer of a chosen size.
class Blob final : public CachedValue {
 public:
  Blob(std::string text, uint64_t extra = 0) : text_(std::move(text)), extra_(extra) {}
  uint64_t ByteSize() const override { return text_.size() + extra_; }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  uint64_t extra_;
};

CacheKey Key(const std::string& tenant, int32_t i) {
  const std::vector<int32_t> tokens = {1, 2, i};
  return CacheKeyBuilder(tenant).U64(42).I32s(tokens).F32(0.0f).Build();
}

std::string TextOf(const std::shared_ptr<const CachedValue>& v) {
  return v ? static_cast<const Blob&>(*v).text() : std::string("<none>");
}

class CountingObserver final : public TierObserver {
 public:
  void OnHit() override { ++hits; }
  void OnMiss() override { ++misses; }
  void OnEarlyRefresh() override { ++refreshes; }
  void OnStore(uint64_t b) override {
    ++entries;
    bytes += static_cast<int64_t>(b);
  }
  void OnRemove(uint64_t b, RemoveReason r) override {
    --entries;
    bytes -= static_cast<int64_t>(b);
    if (r == RemoveReason::kEvicted) ++evictions;
    if (r == RemoveReason::kExpired) ++expirations;
  }
  int hits = 0, misses = 0, refreshes = 0, evictions = 0, expirations = 0;
  int64_t entries = 0, bytes = 0;
};

class ResponseCacheTest : public ::testing::Test {
 protected:
  std::unique_ptr<ResponseCache> Make(ResponseCacheOptions o, uint64_t seed = 1) {
    auto c = ResponseCache::Create(o, clock_, util::Rng(seed), &observer_);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(c).value();
  }
  testing::FakeClock clock_;
  CountingObserver observer_;
};

TEST_F(ResponseCacheTest, AHitReturnsExactlyWhatWasStored) {
  auto c = Make({});
  EXPECT_EQ(c->Find(Key("t", 1)).kind, Lookup::Kind::kMiss);
  ASSERT_TRUE(c->Insert(Key("t", 1), std::make_shared<Blob>("answer one"), milliseconds(5)));
  const Lookup hit = c->Find(Key("t", 1));
  EXPECT_EQ(hit.kind, Lookup::Kind::kHit);
  EXPECT_EQ(TextOf(hit.value), "answer one");
  EXPECT_EQ(c->Find(Key("t", 2)).kind, Lookup::Kind::kMiss);
  const auto s = c->Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(observer_.hits, 1);
  EXPECT_EQ(observer_.misses, 2);
}

TEST_F(ResponseCacheTest, EraseIfRemovesOnlyTheSelectedEntriesAndCountsThem) {
  auto c = Make({});
  for (int32_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(c->Insert(Key(i % 2 ? "odd" : "even", i),
                          std::make_shared<Blob>(fmt::format("answer {}", i)), {}));
  }
  const size_t n = c->EraseIf([](const CacheKey&, const CachedValue& v) {
    return static_cast<const Blob&>(v).text() == "answer 2" ||
           static_cast<const Blob&>(v).text() == "answer 3";
  });
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(c->Stats().entries, 4u);
  EXPECT_EQ(observer_.entries, 4);
  EXPECT_EQ(c->Find(Key("even", 2)).kind, Lookup::Kind::kMiss);
  EXPECT_EQ(c->Find(Key("odd", 3)).kind, Lookup::Kind::kMiss);
  EXPECT_EQ(TextOf(c->Find(Key("even", 4)).value), "answer 4");
  // By tenant: the key starts with it.
  const std::string even = CacheKeyBuilder("even").Build().bytes;
  EXPECT_EQ(
      c->EraseIf([&](const CacheKey& k, const CachedValue&) { return k.bytes.starts_with(even); }),
      2u);
  EXPECT_EQ(TextOf(c->Find(Key("odd", 5)).value), "answer 5");
}

TEST_F(ResponseCacheTest, TenantsNeverShareEntries) {
  auto c = Make({});
  ASSERT_TRUE(c->Insert(Key("alpha", 1), std::make_shared<Blob>("alpha's"), {}));
  EXPECT_EQ(c->Find(Key("beta", 1)).kind, Lookup::Kind::kMiss);
  EXPECT_EQ(TextOf(c->Find(Key("alpha", 1)).value), "alpha's");
  // Field boundaries are part of the encoding: "ab"+"c" is not "a"+"bc".
  const CacheKey a = CacheKeyBuilder("ab").Str("c").Build();
  const CacheKey b = CacheKeyBuilder("a").Str("bc").Build();
  EXPECT_NE(a.bytes, b.bytes);
  EXPECT_EQ(a.bytes.rfind(CacheKeyBuilder("ab").Build().bytes, 0), 0u) << "the tenant comes first";
}

TEST_F(ResponseCacheTest, HashCollisionsNeverServeAnotherKeysAnswer) {
  auto c = Make({});
  CacheKey a = Key("t", 1), b = Key("t", 2);
  b.hash = a.hash;  // force a collision
  ASSERT_TRUE(c->Insert(a, std::make_shared<Blob>("A"), {}));
  EXPECT_EQ(c->Find(b).kind, Lookup::Kind::kMiss);
  ASSERT_TRUE(c->Insert(b, std::make_shared<Blob>("B"), {}));
  EXPECT_EQ(TextOf(c->Find(a).value), "A");
  EXPECT_EQ(TextOf(c->Find(b).value), "B");
  EXPECT_TRUE(c->Erase(a));
  EXPECT_EQ(c->Find(a).kind, Lookup::Kind::kMiss);
  EXPECT_EQ(TextOf(c->Find(b).value), "B");
  EXPECT_EQ(c->Stats().entries, 1u);
}

TEST_F(ResponseCacheTest, BytesNeverExceedTheBudgetAndEvictionsMakeRoom) {
  ResponseCacheOptions o;
  o.max_bytes = 20'000;
  o.max_entry_bytes = 5'000;
  o.policy = PolicyKind::kLru;
  auto c = Make(o);
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(
        c->Insert(Key("t", i), std::make_shared<Blob>(std::string(100 + 7 * (i % 13), 'x')), {}));
    const auto s = c->Stats();
    ASSERT_LE(s.bytes, o.max_bytes) << "after insert " << i;
    clock_.Advance(milliseconds(1));
  }
  const auto s = c->Stats();
  EXPECT_GT(s.evictions, 100u);
  EXPECT_EQ(s.stores, 200u);
  EXPECT_EQ(s.entries + s.evictions, 200u);
  EXPECT_EQ(observer_.evictions, static_cast<int>(s.evictions));
  EXPECT_EQ(observer_.bytes, static_cast<int64_t>(s.bytes));
  EXPECT_EQ(observer_.entries, static_cast<int64_t>(s.entries));
  // LRU: the newest survived, the oldest went.
  EXPECT_EQ(c->Find(Key("t", 199)).kind, Lookup::Kind::kHit);
  EXPECT_EQ(c->Find(Key("t", 0)).kind, Lookup::Kind::kMiss);
}

TEST_F(ResponseCacheTest, EvictionGoesThroughThePolicy) {
  ResponseCacheOptions o;
  o.policy = PolicyKind::kLru;
  const uint64_t entry = Key("t", 0).bytes.size() + 1000 + kEntryOverheadBytes;
  o.max_bytes = 3 * entry;
  o.max_entry_bytes = entry;
  auto c = Make(o);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(c->Insert(Key("t", i), std::make_shared<Blob>(std::string(1000, 'a')), {}));
  EXPECT_EQ(c->Find(Key("t", 0)).kind, Lookup::Kind::kHit);  // 0 is now the most recent
  ASSERT_TRUE(c->Insert(Key("t", 3), std::make_shared<Blob>(std::string(1000, 'b')), {}));
  EXPECT_EQ(c->Find(Key("t", 1)).kind, Lookup::Kind::kMiss);  // 1 was least recent
  EXPECT_EQ(c->Find(Key("t", 0)).kind, Lookup::Kind::kHit);
  EXPECT_EQ(c->Stats().evictions, 1u);
}

TEST_F(ResponseCacheTest, DualFactorIsTheDefaultAndKeepsFrequentEntries) {
  ResponseCacheOptions o;
  const uint64_t entry = Key("t", 0).bytes.size() + 1000 + kEntryOverheadBytes;
  o.max_bytes = 4 * entry;
  o.max_entry_bytes = entry;
  EXPECT_EQ(o.policy, PolicyKind::kDualFactor);
  auto c = Make(o);
  ASSERT_TRUE(c->Insert(Key("t", 0), std::make_shared<Blob>(std::string(1000, 'h')), {}));
  for (int k = 0; k < 20; ++k) c->Find(Key("t", 0));  // hot
  for (int i = 1; i < 12; ++i) {
    clock_.Advance(milliseconds(10));
    ASSERT_TRUE(c->Insert(Key("t", i), std::make_shared<Blob>(std::string(1000, 'c')), {}));
  }
  EXPECT_EQ(c->Find(Key("t", 0)).kind, Lookup::Kind::kHit);
}

TEST_F(ResponseCacheTest, EntriesLargerThanTheEntryLimitAreNotStored) {
  ResponseCacheOptions o;
  o.max_bytes = 80'000;  // entry limit: max_bytes / 8
  auto c = Make(o);
  EXPECT_FALSE(c->Insert(Key("t", 1), std::make_shared<Blob>(std::string(10'000, 'x')), {}));
  EXPECT_EQ(c->Stats().rejected, 1u);
  EXPECT_EQ(c->Stats().entries, 0u);
  EXPECT_TRUE(c->Insert(Key("t", 1), std::make_shared<Blob>(std::string(9'000, 'x')), {}));
  ResponseCacheOptions off;
  off.max_bytes = 0;
  auto none = Make(off);
  EXPECT_FALSE(none->Insert(Key("t", 1), std::make_shared<Blob>("x"), {}));
}

TEST_F(ResponseCacheTest, ReplacingAnEntryKeepsOneEntryAndTheRightBytes) {
  auto c = Make({});
  ASSERT_TRUE(c->Insert(Key("t", 1), std::make_shared<Blob>(std::string(500, 'a')), {}));
  ASSERT_TRUE(c->Insert(Key("t", 1), std::make_shared<Blob>(std::string(50, 'b')), {}));
  const auto s = c->Stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes, Key("t", 1).bytes.size() + 50 + kEntryOverheadBytes);
  EXPECT_EQ(TextOf(c->Find(Key("t", 1)).value), std::string(50, 'b'));
}

TEST_F(ResponseCacheTest, TtlsAreJitteredSoEntriesWrittenTogetherExpireApart) {
  ResponseCacheOptions o;
  o.ttl = seconds(100);
  o.ttl_jitter = 0.2;
  o.early_refresh_beta = 0;
  auto c = Make(o, 7);
  constexpr int kN = 2000;
  for (int i = 0; i < kN; ++i) ASSERT_TRUE(c->Insert(Key("t", i), std::make_shared<Blob>("v"), {}));
  auto alive = [&] {
    int n = 0;
    for (int i = 0; i < kN; ++i) n += c->Peek(Key("t", i)) != nullptr;
    return n;
  };
  // TTLs are uniform in [80 s, 120 s]: none before 80 s, all by 120 s, and
  // about a quarter per 10 s in between.
  clock_.Advance(milliseconds(79'990));
  EXPECT_EQ(alive(), kN);
  int last = kN;
  for (int step = 1; step <= 4; ++step) {
    clock_.Advance(seconds(10));
    const int now = alive();
    EXPECT_NEAR(last - now, kN / 4, kN / 16) << "expired in the " << step << "th 10 s";
    last = now;
  }
  clock_.Advance(milliseconds(20));
  EXPECT_EQ(alive(), 0);
  // Expired entries are removed when found, and counted.
  EXPECT_EQ(c->Find(Key("t", 0)).kind, Lookup::Kind::kMiss);
  EXPECT_EQ(c->Stats().expirations, 1u);
  EXPECT_EQ(observer_.expirations, 1);
}

TEST_F(ResponseCacheTest, ExpiredEntriesMakeRoomBeforeLiveOnesAreEvicted) {
  ResponseCacheOptions o;
  o.ttl = seconds(10);
  o.ttl_jitter = 0;
  o.policy = PolicyKind::kLru;
  const uint64_t entry = Key("t", 0).bytes.size() + 1000 + kEntryOverheadBytes;
  o.max_bytes = 2 * entry;
  o.max_entry_bytes = entry;
  auto c = Make(o);
  ASSERT_TRUE(c->Insert(Key("t", 0), std::make_shared<Blob>(std::string(1000, 'a')), {}));
  clock_.Advance(seconds(5));
  ASSERT_TRUE(c->Insert(Key("t", 1), std::make_shared<Blob>(std::string(1000, 'a')), {}));
  c->Find(Key("t", 0));  // 0 is most recent, but it expires first
  clock_.Advance(seconds(6));
  ASSERT_TRUE(c->Insert(Key("t", 2), std::make_shared<Blob>(std::string(1000, 'a')), {}));
  const auto s = c->Stats();
  EXPECT_EQ(s.expirations, 1u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_NE(c->Peek(Key("t", 1)), nullptr);
}

TEST(EarlyRefresh, ProbabilityIsExpOfMinusRemainingOverBetaDelta) {
  const auto delta = milliseconds(500);
  for (double remaining_s : {0.1, 0.5, 1.0, 2.0, 5.0}) {
    for (double beta : {0.5, 1.0, 2.0}) {
      constexpr int kGrid = 100'000;
      int refresh = 0;
      for (int i = 0; i < kGrid; ++i) {
        const double u = (i + 0.5) / kGrid;
        refresh += ShouldRefreshEarly(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::duration<double>(remaining_s)),
                                      delta, beta, u);
      }
      const double want = std::exp(-remaining_s / (beta * 0.5));
      EXPECT_NEAR(static_cast<double>(refresh) / kGrid, want, 1e-3)
          << "remaining " << remaining_s << " s, beta " << beta;
    }
  }
  EXPECT_TRUE(ShouldRefreshEarly(std::chrono::nanoseconds(0), delta, 1.0, 0.99));
  EXPECT_FALSE(ShouldRefreshEarly(seconds(1), delta, 0.0, 0.99999));  // beta 0: off
  EXPECT_FALSE(ShouldRefreshEarly(seconds(1), std::chrono::nanoseconds(0), 1.0, 0.99999));
}

TEST_F(ResponseCacheTest, HitsNearExpiryAskForAnEarlyRefreshWithRisingProbability) {
  ResponseCacheOptions o;
  o.ttl = seconds(100);
  o.ttl_jitter = 0;
  o.early_refresh_beta = 1.0;
  auto c = Make(o, 11);
  ASSERT_TRUE(c->Insert(Key("t", 1), std::make_shared<Blob>("v"), seconds(1)));
  auto refresh_share = [&](int n) {
    int r = 0;
    for (int i = 0; i < n; ++i) {
      const Lookup l = c->Find(Key("t", 1));
      EXPECT_NE(l.kind, Lookup::Kind::kMiss);
      EXPECT_EQ(TextOf(l.value), "v");  // a refresh still carries the valid value
      r += l.kind == Lookup::Kind::kRefresh;
    }
    return static_cast<double>(r) / n;
  };
  EXPECT_EQ(refresh_share(2000), 0.0);  // 100 s left: exp(-100)
  clock_.Advance(seconds(97));          // 3 s left: exp(-3) = 0.050
  EXPECT_NEAR(refresh_share(20'000), std::exp(-3.0), 0.01);
  clock_.Advance(seconds(2));  // 1 s left: exp(-1) = 0.368
  EXPECT_NEAR(refresh_share(20'000), std::exp(-1.0), 0.015);
  EXPECT_EQ(c->Stats().early_refreshes, static_cast<uint64_t>(observer_.refreshes));
  EXPECT_GT(observer_.refreshes, 0);
  // The same seed draws the same decisions.
  auto d = Make(o, 11);
  ASSERT_TRUE(d->Insert(Key("t", 1), std::make_shared<Blob>("v"), seconds(1)));
  auto e = Make(o, 11);
  ASSERT_TRUE(e->Insert(Key("t", 1), std::make_shared<Blob>("v"), seconds(1)));
  for (int i = 0; i < 200; ++i) ASSERT_EQ(d->Find(Key("t", 1)).kind, e->Find(Key("t", 1)).kind);
}

TEST(ResponseCacheOptionsTest, OutOfRangeOptionsAreRejectedByName) {
  testing::FakeClock clock;
  ResponseCacheOptions o;
  o.ttl_jitter = 1.5;
  auto c = ResponseCache::Create(o, clock, util::Rng(1));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("ttl_jitter"), std::string::npos);
  o = {};
  o.ttl = milliseconds(0);
  EXPECT_NE(ResponseCache::Create(o, clock, util::Rng(1)).status().message().find("ttl"),
            std::string::npos);
  o = {};
  o.early_refresh_beta = -1;
  EXPECT_FALSE(ResponseCache::Create(o, clock, util::Rng(1)).ok());
}

TEST_F(ResponseCacheTest, ConcurrentUseKeepsTheBudget) {
  ResponseCacheOptions o;
  o.max_bytes = 50'000;
  auto c = Make(o);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const CacheKey k = Key("t", (i * 7 + t) % 300);
        if (c->Find(k).kind == Lookup::Kind::kMiss) {
          c->Insert(k, std::make_shared<Blob>(std::string(200, 'x')), {});
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto s = c->Stats();
  EXPECT_LE(s.bytes, o.max_bytes);
  EXPECT_EQ(s.hits + s.misses, 8000u);
  EXPECT_EQ(observer_.bytes, static_cast<int64_t>(s.bytes));
}

// --- single flight -----------------------------------------------------------

struct Work {
  int id = 0;
};

TEST(SingleFlightTest, IdenticalJoinsFollowOneLeader) {
  SingleFlight<Work> sf;
  int made = 0;
  auto make = [&] {
    ++made;
    return std::make_shared<Work>(Work{made});
  };
  auto a = sf.Join(Key("t", 1), make);
  auto b = sf.Join(Key("t", 1), make);
  auto other_tenant = sf.Join(Key("u", 1), make);
  EXPECT_EQ(a.role, SingleFlight<Work>::Role::kLeader);
  EXPECT_EQ(b.role, SingleFlight<Work>::Role::kFollower);
  EXPECT_EQ(a.flight, b.flight);
  EXPECT_EQ(other_tenant.role, SingleFlight<Work>::Role::kLeader);
  EXPECT_EQ(made, 2);
  sf.Finish(Key("t", 1), a.flight.get());
  EXPECT_FALSE(sf.Leave(Key("t", 1), a.flight.get())) << "a finished flight is never stopped";
  auto c = sf.Join(Key("t", 1), make);
  EXPECT_EQ(c.role, SingleFlight<Work>::Role::kLeader) << "a finished flight is not joined";
  EXPECT_NE(c.flight, a.flight);
}

TEST(SingleFlightTest, TheLastSubscriberLeavingAbandonsTheFlight) {
  SingleFlight<Work> sf;
  auto make = [] { return std::make_shared<Work>(); };
  auto a = sf.Join(Key("t", 1), make);
  auto b = sf.Join(Key("t", 1), make);
  EXPECT_FALSE(sf.Leave(Key("t", 1), a.flight.get())) << "b still waits";
  EXPECT_TRUE(sf.Leave(Key("t", 1), b.flight.get())) << "nobody waits: stop it";
  EXPECT_EQ(sf.size(), 0u);
  auto c = sf.Join(Key("t", 1), make);
  EXPECT_EQ(c.role, SingleFlight<Work>::Role::kLeader) << "an abandoned flight is never joined";
  auto none = sf.Join(Key("t", 2), [] { return std::shared_ptr<Work>(); });
  EXPECT_EQ(none.role, SingleFlight<Work>::Role::kNone);
  EXPECT_EQ(sf.size(), 1u);
}

TEST(SingleFlightTest, ManyConcurrentJoinsMakeExactlyOneLeader) {
  SingleFlight<Work> sf;
  std::atomic<int> made{0}, leaders{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 100; ++t) {
    threads.emplace_back([&] {
      auto j = sf.Join(Key("t", 9), [&] {
        ++made;
        return std::make_shared<Work>();
      });
      if (j.role == SingleFlight<Work>::Role::kLeader) ++leaders;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(made.load(), 1);
  EXPECT_EQ(leaders.load(), 1);
}

TEST_F(ResponseCacheTest, AReconfiguredTtlHoldsForEntriesStoredFromThenOn) {
  auto cache = Make({.max_bytes = 1 << 20, .ttl = std::chrono::seconds(100), .ttl_jitter = 0});
  ASSERT_TRUE(
      cache->Insert(Key("t", 1), std::make_shared<Blob>("a"), std::chrono::milliseconds(1)));
  ASSERT_TRUE(cache->Reconfigure(std::chrono::seconds(1), 0, false).ok());
  ASSERT_TRUE(
      cache->Insert(Key("t", 2), std::make_shared<Blob>("b"), std::chrono::milliseconds(1)));
  clock_.Advance(std::chrono::seconds(2));
  EXPECT_EQ(cache->Find(Key("t", 2)).kind, Lookup::Kind::kMiss);
  EXPECT_EQ(TextOf(cache->Find(Key("t", 1)).value), "a");
  EXPECT_FALSE(cache->Reconfigure(std::chrono::seconds(0), 0, false).ok());
  EXPECT_FALSE(cache->Reconfigure(std::chrono::seconds(1), 0.95, false).ok());
}

}  // namespace
}  // namespace strata::cache
