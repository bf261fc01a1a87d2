// The shared tier against a real redis-server on a loopback port (skipped,
// saying why, when redis-server is not installed): L1 and L3 entries round
// trip, keys stay within their tenant and model, values carry a Redis TTL,
// damaged entries are misses, and Redis going away never fails a call.
#include "cache/shared_store.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <mutex>
#include <thread>

#include "cache/shared_feed.h"
#include "net/redis.h"
#include "testing/redis_server.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::cache {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class Blob final : public CachedValue {
 public:
  explicit Blob(std::string t) : text(std::move(t)) {}
  uint64_t ByteSize() const override { return text.size(); }
  const std::string text;
};

class BlobCodec final : public ValueCodec {
 public:
  std::string Encode(const CachedValue& v) const override {
    return "B" + static_cast<const Blob&>(v).text;
  }
  util::StatusOr<std::shared_ptr<const CachedValue>> Decode(std::string_view b) const override {
    if (b.empty() || b[0] != 'B') return util::DataLossError("not a blob");
    return std::shared_ptr<const CachedValue>(std::make_shared<Blob>(std::string(b.substr(1))));
  }
};

std::string TextOf(const std::optional<SharedHit>& h) {
  return h ? static_cast<const Blob&>(*h->value).text : "<miss>";
}

CacheKey Key(const std::string& tenant, int i) { return CacheKeyBuilder(tenant).I32(i).Build(); }

std::shared_ptr<const NearDupText> Text(std::string_view s) {
  return std::make_shared<const NearDupText>(PrepareNearDupText(s).value());
}

// Waiting for another process (Redis) or the store's own threads to act:
// poll with a deadline. Readiness only, never a timing assertion.
template <typename F>
bool Eventually(F&& f, std::chrono::seconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (f()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return f();
}

class SharedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = testing::RedisServer::Start();
    if (!redis_) GTEST_SKIP() << testing::RedisServer::kMissing;
  }
  std::unique_ptr<SharedStore> Make(std::string prefix = "strata:test") {
    SharedStoreOptions o;
    o.port = redis_->port();
    o.timeout = milliseconds(200);
    o.backoff_min = milliseconds(10);
    o.backoff_max = milliseconds(50);
    o.prefix = std::move(prefix);
    auto s = SharedStore::Create(o, codec_, util::RealClock(), util::Rng(1), log_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }

  std::unique_ptr<testing::RedisServer> redis_;
  BlobCodec codec_;
  util::CapturingLogger log_;
  const SharedScope alpha_{"alpha", 0x1234};
};

TEST_F(SharedStoreTest, TwoStoresShareAnExactEntryWithARedisTtl) {
  auto writer = Make();
  auto reader = Make();
  EXPECT_TRUE(writer->up());
  EXPECT_FALSE(reader->GetExact(alpha_, Key("alpha", 1)).has_value());
  writer->PutExact(alpha_, Key("alpha", 1), std::make_shared<Blob>("answer one"), seconds(60));
  ASSERT_TRUE(writer->Flush(seconds(5)));
  const auto hit = reader->GetExact(alpha_, Key("alpha", 1));
  EXPECT_EQ(TextOf(hit), "answer one");
  ASSERT_TRUE(hit.has_value());
  EXPECT_GT(hit->ttl_left, seconds(50));  // 60 s ± 10 % jitter, minus a moment
  EXPECT_LE(hit->ttl_left, seconds(67));
  EXPECT_EQ(reader->stats().hits, 1u);
  EXPECT_EQ(writer->stats().writes, 1u);
  EXPECT_TRUE(log_.Contains("redis up"));
}

TEST_F(SharedStoreTest, TenantsAndModelsNeverSeeEachOthersEntries) {
  auto s = Make();
  s->PutExact(alpha_, Key("alpha", 1), std::make_shared<Blob>("alpha's"), seconds(60));
  s->PutNear(alpha_, "scope", Text("how far is the moon from the earth"),
             std::make_shared<Blob>("near alpha"), seconds(60));
  ASSERT_TRUE(s->Flush(seconds(5)));
  const SharedScope beta{"beta", 0x1234}, other_model{"alpha", 0x9999};
  // The same key bytes under another tenant's or model's namespace: absent.
  EXPECT_FALSE(s->GetExact(beta, Key("alpha", 1)).has_value());
  EXPECT_FALSE(s->GetExact(other_model, Key("alpha", 1)).has_value());
  EXPECT_FALSE(s->FindNear(beta, "scope", *Text("how far is the moon from the earth")));
  EXPECT_FALSE(s->FindNear(other_model, "scope", *Text("how far is the moon from the earth")));
  EXPECT_FALSE(s->FindNear(alpha_, "other-scope", *Text("how far is the moon from the earth")));
  EXPECT_EQ(TextOf(s->GetExact(alpha_, Key("alpha", 1))), "alpha's");
}

TEST_F(SharedStoreTest, AnotherKeyUnderTheSameHashIsAMiss) {
  auto s = Make();
  CacheKey a = Key("alpha", 1), b = Key("alpha", 2);
  b.hash = a.hash;  // force the Redis key's first half to collide
  s->PutExact(alpha_, a, std::make_shared<Blob>("a"), seconds(60));
  ASSERT_TRUE(s->Flush(seconds(5)));
  EXPECT_FALSE(s->GetExact(alpha_, b).has_value());
}

TEST_F(SharedStoreTest, ANearDuplicateIsFoundThroughTheBucketsAndConfirmed) {
  auto writer = Make();
  auto reader = Make();
  writer->PutNear(alpha_, "scope", Text("How do I reverse a linked list in Python?"),
                  std::make_shared<Blob>("use a loop"), seconds(60));
  writer->PutNear(alpha_, "scope", Text("What is 2+3?"), std::make_shared<Blob>("5"), seconds(60));
  ASSERT_TRUE(writer->Flush(seconds(5)));
  const auto hit =
      reader->FindNear(alpha_, "scope", *Text("how do i reverse a linked-list in PYTHON"));
  EXPECT_EQ(TextOf(hit), "use a loop");
  ASSERT_TRUE(hit.has_value());
  EXPECT_GE(hit->similarity, kDefaultNearDupSimilarity);
  EXPECT_GT(hit->ttl_left, seconds(50));
  EXPECT_FALSE(reader->FindNear(alpha_, "scope", *Text("How do I sort a linked list in Python?")));
  EXPECT_FALSE(reader->FindNear(alpha_, "scope", *Text("What is 2+4?"))) << "the slot guard";
  EXPECT_EQ(TextOf(reader->FindNear(alpha_, "scope", *Text("what is 2 + 3"))), "5");
}

TEST_F(SharedStoreTest, DamagedEntriesAreMissesNeverCrashes) {
  auto s = Make("strata:dmg");
  s->PutExact(alpha_, Key("alpha", 1), std::make_shared<Blob>("x"), seconds(60));
  s->PutNear(alpha_, "scope", Text("what is the speed of light"), std::make_shared<Blob>("c"),
             seconds(60));
  ASSERT_TRUE(s->Flush(seconds(5)));
  // Overwrite every key of this prefix with garbage, from a raw connection.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(redis_->port()));
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string script =
      "for _,k in ipairs(redis.call('KEYS','strata:dmg:*')) do "
      "local t = redis.call('TYPE',k).ok "
      "if t == 'string' then redis.call('SET',k,'SL1\\1garbage','PX',60000) "
      "elseif t == 'hash' then redis.call('HSET',k,'t','L3T1xx','v','?') "
      "else redis.call('SADD',k,'nothex') end end return 1";
  std::string lua = "*3\r\n$4\r\nEVAL\r\n";  // RESP: EVAL <script> 0
  lua += fmt::format("${}\r\n{}\r\n$1\r\n0\r\n", script.size(), script);
  ASSERT_EQ(::send(fd, lua.data(), lua.size(), 0), static_cast<ssize_t>(lua.size()));
  char buf[64] = {};
  ASSERT_GT(::recv(fd, buf, sizeof buf - 1, 0), 0);
  ::close(fd);
  EXPECT_EQ(std::string(buf).substr(0, 2), ":1") << buf;
  EXPECT_FALSE(s->GetExact(alpha_, Key("alpha", 1)).has_value());
  EXPECT_FALSE(s->FindNear(alpha_, "scope", *Text("what is the speed of light")).has_value());
  EXPECT_GE(s->stats().errors, 2u);
  EXPECT_TRUE(s->up()) << "bad data is not a bad connection";
}

TEST_F(SharedStoreTest, RedisGoingAwayIsLoggedOnceAndNeverFailsACallThenItComesBack) {
  auto s = Make();
  s->PutExact(alpha_, Key("alpha", 1), std::make_shared<Blob>("before"), seconds(60));
  ASSERT_TRUE(s->Flush(seconds(5)));
  redis_->Kill();
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(s->GetExact(alpha_, Key("alpha", 1)).has_value());
    EXPECT_FALSE(s->FindNear(alpha_, "scope", *Text("anything at all here")).has_value());
    s->PutExact(alpha_, Key("alpha", i), std::make_shared<Blob>("lost"), seconds(60));
  }
  EXPECT_FALSE(s->up());
  const SharedStoreStats down = s->stats();
  EXPECT_GE(down.errors, 1u);
  EXPECT_GE(down.skipped, 9u) << "once down, lookups do no I/O";
  EXPECT_GE(down.dropped_writes, 5u);
  int down_lines = 0;
  for (const auto& l : log_.Lines()) down_lines += l.find("redis down") != std::string::npos;
  EXPECT_EQ(down_lines, 1) << "one line per state change, not per request";

  ASSERT_TRUE(redis_->Restart());
  ASSERT_TRUE(Eventually([&] { return s->up(); })) << "reconnects with backoff";
  EXPECT_TRUE(log_.Contains("redis back"));
  EXPECT_FALSE(s->GetExact(alpha_, Key("alpha", 1)).has_value()) << "a fresh, empty Redis";
  s->PutExact(alpha_, Key("alpha", 1), std::make_shared<Blob>("after"), seconds(60));
  ASSERT_TRUE(s->Flush(seconds(5)));
  EXPECT_EQ(TextOf(s->GetExact(alpha_, Key("alpha", 1))), "after");
  EXPECT_EQ(s->stats().reconnects, 1u);
}

TEST_F(SharedStoreTest, AnUnreachableRedisAtStartIsNotAnError) {
  const int port = redis_->port();
  redis_->Kill();
  SharedStoreOptions o;
  o.port = port;
  o.timeout = milliseconds(100);
  o.backoff_min = milliseconds(10);
  o.backoff_max = milliseconds(20);
  auto s = SharedStore::Create(o, codec_, util::RealClock(), util::Rng(1), log_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE((*s)->up());
  EXPECT_FALSE((*s)->GetExact(alpha_, Key("alpha", 1)).has_value());
  EXPECT_TRUE(log_.Contains("redis down"));
  ASSERT_TRUE(redis_->Restart());
  EXPECT_TRUE(Eventually([&] { return (*s)->up(); }));
}

TEST(SharedStoreOptionsTest, OutOfRangeOptionsAreRejectedByName) {
  BlobCodec codec;
  util::CapturingLogger log;
  auto make = [&](void (*change)(SharedStoreOptions&)) {
    SharedStoreOptions o;
    change(o);
    return SharedStore::Create(o, codec, util::RealClock(), util::Rng(1), log).status();
  };
  EXPECT_NE(make([](SharedStoreOptions& o) { o.port = 0; }).message().find("port"),
            std::string::npos);
  EXPECT_NE(
      make([](SharedStoreOptions& o) { o.timeout = milliseconds(0); }).message().find("timeout"),
      std::string::npos);
  EXPECT_NE(make([](SharedStoreOptions& o) { o.read_connections = 0; })
                .message()
                .find("read_connections"),
            std::string::npos);
  EXPECT_NE(make([](SharedStoreOptions& o) { o.prefix = "a b"; }).message().find("prefix"),
            std::string::npos);
}

TEST(ParseRedisAddressTest, AcceptsHostPortAndUrlsAndNamesWhatIsWrong) {
  EXPECT_EQ(net::ParseRedisAddress("127.0.0.1:6380").value(),
            (std::pair<std::string, int>{"127.0.0.1", 6380}));
  EXPECT_EQ(net::ParseRedisAddress("redis://cache.internal:7000").value(),
            (std::pair<std::string, int>{"cache.internal", 7000}));
  EXPECT_EQ(net::ParseRedisAddress("redis-host").value(),
            (std::pair<std::string, int>{"redis-host", 6379}));
  for (const char* bad : {"", ":6379", "host:", "host:0", "host:70000", "host:12ab",
                          "redis://user@host:1", "a b:1"}) {
    auto r = net::ParseRedisAddress(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("redis address"), std::string::npos);
  }
}

}  // namespace
}  // namespace strata::cache

namespace strata::cache {
namespace {

// Feeds on one stream: each hears the others' messages in order, never its
// own, only those announced after it started listening (its start hook
// runs first), and keeps going across a Redis restart.
TEST_F(SharedStoreTest, FeedsHearEachOthersMessagesInOrderButNotTheirOwn) {
  SharedStoreOptions o;
  o.port = redis_->port();
  o.timeout = milliseconds(200);
  o.backoff_min = milliseconds(10);
  o.backoff_max = milliseconds(50);
  auto a = SharedFeed::Create(o, "invalidations", log_).value();
  auto b = SharedFeed::Create(o, "invalidations", log_).value();
  ASSERT_TRUE(a->Announce("before anyone listens").ok());
  std::mutex mu;
  std::vector<std::string> heard_a, heard_b;
  bool started = false;
  a->Listen([&](std::string_view m) {
    std::lock_guard lock(mu);
    heard_a.emplace_back(m);
  });
  b->Listen(
      [&](std::string_view m) {
        std::lock_guard lock(mu);
        heard_b.emplace_back(m);
      },
      milliseconds(20),
      [&] {
        std::lock_guard lock(mu);
        started = true;
      });
  // Listening starts asynchronously: wait until each hears the other.
  ASSERT_TRUE(Eventually([&] {
    (void)a->Announce("ping");
    (void)b->Announce("ping");
    std::lock_guard lock(mu);
    return !heard_a.empty() && !heard_b.empty();
  }));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(heard_b.front(), "ping") << "nothing from before Listen";
    heard_a.clear();
    heard_b.clear();
  }
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(a->Announce(fmt::format("m{}", i)).ok());
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard lock(mu);
    return std::find(heard_b.begin(), heard_b.end(), "m4") != heard_b.end();
  }));
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(started);
    // Pings still on their way may come first.
    std::vector<std::string> got;
    for (const std::string& m : heard_b) {
      if (m != "ping") got.push_back(m);
    }
    EXPECT_EQ(got, (std::vector<std::string>{"m0", "m1", "m2", "m3", "m4"}))
        << "in order, nothing of its own";
    for (const std::string& m : heard_a) EXPECT_EQ(m, "ping") << "never its own";
  }
  // Redis restarts: announcing fails while it is down, then both go on.
  redis_->Kill();
  EXPECT_EQ(a->Announce("lost").code(), util::StatusCode::kUnavailable);
  ASSERT_TRUE(redis_->Restart());
  ASSERT_TRUE(Eventually([&] { return a->Announce("after").ok(); }));
  EXPECT_TRUE(Eventually([&] {
    std::lock_guard lock(mu);
    return std::find(heard_b.begin(), heard_b.end(), "after") != heard_b.end();
  }));
  EXPECT_FALSE(SharedFeed::Create(o, "Bad Name", log_).ok());
  a->StopListening();
  b.reset();  // joins its thread
}

}  // namespace
}  // namespace strata::cache
