// Both session stores held to one contract (session/session.h): the
// embedded one against a real RocksDB in a scratch directory, the replicated
// one against a real redis-server on loopback (its AOF synced on every
// write), each test run on each.
#include "session/rocks_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "net/redis.h"
#include "session/record.h"
#include "session/redis_store.h"
#include "testing/fake_clock.h"
#include "testing/redis_server.h"

namespace strata::session {
namespace {

namespace fs = std::filesystem;
using util::StatusCode;

class SessionStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    redis_ = testing::RedisServer::Start({"--appendonly", "yes", "--appendfsync", "always"});
  }
  static void TearDownTestSuite() { redis_.reset(); }

  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ =
        fs::temp_directory_path() / ("strata_session_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    if (GetParam() == "redis") {
      if (!redis_) GTEST_SKIP() << testing::RedisServer::kMissing;
      auto conn = net::RedisConn::Connect("127.0.0.1", redis_->port(), std::chrono::seconds(5));
      ASSERT_TRUE(conn.ok()) << conn.status().ToString();
      ASSERT_TRUE((*conn)->Command({"FLUSHALL"}).ok());
    }
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }

  // The store under test, opened (again) with `limits`: a reopen keeps what
  // the last one stored.
  SessionStore& Open(Limits limits = {}) {
    store_.reset();
    auto s =
        GetParam() == "rocks"
            ? OpenRocksStore({.dir = dir_.string(), .limits = limits, .clock = &clock_})
            : OpenRedisStore(
                  {.nodes = {{"127.0.0.1", redis_->port()}}, .limits = limits, .clock = &clock_});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    return *store_;
  }

  static AppendRequest Turn(std::string session, uint64_t depends_on, std::string writer,
                            std::vector<std::string> messages = {
                                R"({"role":"user","content":"hi"})"}) {
    return {.tenant = "acme",
            .session_id = std::move(session),
            .depends_on = depends_on,
            .writer = std::move(writer),
            .messages = std::move(messages)};
  }

  static std::unique_ptr<testing::RedisServer> redis_;
  fs::path dir_;
  testing::FakeClock clock_;
  std::unique_ptr<SessionStore> store_;
};

std::unique_ptr<testing::RedisServer> SessionStoreTest::redis_;

INSTANTIATE_TEST_SUITE_P(Stores, SessionStoreTest, ::testing::Values("rocks", "redis"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST_P(SessionStoreTest, TurnsReadBackInOrderVerbatim) {
  SessionStore& store = Open();
  const std::string user = R"({"role":"user","content":"héllo \"there\""})";
  const std::string answer = R"({"role":"assistant","content":[{"type":"text","text":"hi"}]})";
  auto first = store.Append(Turn("s1", 0, "req-1", {user, answer}));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->clock, 1u);
  AppendRequest second = Turn("s1", 1, "req-2");
  second.tokens = {1, -2, 2147483647, -2147483647 - 1};
  second.tokens_from = 12;
  ASSERT_TRUE(store.Append(second).ok());

  auto s = store.Read("acme", "s1");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->turns.size(), 2u);
  EXPECT_EQ(s->turns[0].messages, (std::vector<std::string>{user, answer}));
  EXPECT_EQ(s->turns[0].writer, "req-1");
  EXPECT_EQ(s->turns[1].clock, 2u);
  EXPECT_EQ(s->turns[1].depends_on, 1u);
  EXPECT_EQ(s->turns[1].tokens, second.tokens);
  EXPECT_EQ(s->turns[1].tokens_from, 12u);
  EXPECT_EQ(s->clock, 2u);
  EXPECT_EQ(s->bytes, user.size() + answer.size() + second.messages[0].size() + 16);
}

TEST_P(SessionStoreTest, AcknowledgedTurnsSurviveAReopen) {
  {
    SessionStore& store = Open();
    for (uint64_t i = 0; i < 20; ++i) {
      ASSERT_TRUE(store.Append(Turn("s", i, "w" + std::to_string(i))).ok());
    }
  }
  SessionStore& again = Open();
  auto s = again.Read("acme", "s");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->turns.size(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(s->turns[i].writer, "w" + std::to_string(i));
  auto next = again.Append(Turn("s", 20, "w20"));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->clock, 21u);
}

TEST_P(SessionStoreTest, AnotherTenantNeverSeesOrTouchesASession) {
  SessionStore& store = Open();
  ASSERT_TRUE(store.Append(Turn("shared-name", 0, "a")).ok());
  EXPECT_EQ(store.Read("other", "shared-name").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store.Delete("other", "shared-name").code(), StatusCode::kNotFound);
  auto page = store.List("other", "", 100);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->sessions.empty());
  // The same id under another tenant is a different session.
  AppendRequest theirs = Turn("shared-name", 0, "b");
  theirs.tenant = "other";
  ASSERT_TRUE(store.Append(theirs).ok());
  EXPECT_EQ(store.Read("acme", "shared-name")->turns.size(), 1u);
  EXPECT_EQ(store.Read("acme", "shared-name")->turns[0].writer, "a");
  EXPECT_EQ(store.Read("other", "shared-name")->turns[0].writer, "b");
  // A tenant name that is a prefix of another's does not reach into it.
  AppendRequest prefix = Turn("x", 0, "c");
  prefix.tenant = "acm";
  ASSERT_TRUE(store.Append(prefix).ok());
  EXPECT_EQ(store.List("acm", "", 100)->sessions.size(), 1u);
  EXPECT_EQ(store.List("acme", "", 100)->sessions.size(), 1u);
}

TEST_P(SessionStoreTest, AMissingDependencyIsRefusedNamingIt) {
  SessionStore& store = Open({.dependency_wait = std::chrono::milliseconds(20)});
  ASSERT_TRUE(store.Append(Turn("s", 0, "a")).ok());
  auto r = store.Append(Turn("s", 3, "b"));
  ASSERT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("clock 3"), std::string::npos) << r.status().message();
  EXPECT_EQ(store.Read("acme", "s")->turns.size(), 1u);
}

TEST_P(SessionStoreTest, ATurnWaitsForItsDependencyToArrive) {
  SessionStore& store = Open({.dependency_wait = std::chrono::seconds(10)});
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(store.Append(Turn("s", 0, "first")).ok());
  });
  auto waited = store.Append(Turn("s", 1, "second"));
  late.join();
  ASSERT_TRUE(waited.ok()) << waited.status().ToString();
  EXPECT_EQ(waited->clock, 2u);
  auto s = store.Read("acme", "s");
  EXPECT_EQ(s->turns[0].writer, "first");
  EXPECT_EQ(s->turns[1].writer, "second");
}

TEST_P(SessionStoreTest, ConcurrentWritersAnsweringOneTurnAreAllKept) {
  SessionStore& store = Open();
  ASSERT_TRUE(store.Append(Turn("s", 0, "root")).ok());
  constexpr int kWriters = 8;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      if (store.Append(Turn("s", 1, "writer-" + std::to_string(i))).ok()) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kWriters);
  auto s = store.Read("acme", "s");
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->turns.size(), 1u + kWriters);
  std::set<std::string> writers;
  for (size_t i = 1; i < s->turns.size(); ++i) {
    EXPECT_EQ(s->turns[i].depends_on, 1u);
    EXPECT_EQ(s->turns[i].clock, i + 1);  // one order, no clock given twice
    writers.insert(s->turns[i].writer);
  }
  EXPECT_EQ(writers.size(), static_cast<size_t>(kWriters));
  // Every reader sees that same order.
  auto again = store.Read("acme", "s");
  for (size_t i = 0; i < s->turns.size(); ++i)
    EXPECT_EQ(again->turns[i].writer, s->turns[i].writer);
}

TEST_P(SessionStoreTest, ExpectedTurnsIsAnOptimisticPrecondition) {
  SessionStore& store = Open();
  ASSERT_TRUE(store.Append(Turn("s", 0, "a")).ok());
  AppendRequest stale = Turn("s", 1, "b");
  stale.expected_turns = 0;
  auto r = store.Append(stale);
  EXPECT_EQ(r.status().code(), StatusCode::kAborted);
  EXPECT_NE(r.status().message().find("has 1 turns"), std::string::npos);
  stale.expected_turns = 1;
  EXPECT_TRUE(store.Append(stale).ok());
}

TEST_P(SessionStoreTest, ARepeatedOpIdStoresNothingTwice) {
  SessionStore& store = Open();
  AppendRequest r = Turn("s", 0, "a");
  r.op_id = "op-1";
  auto first = store.Append(r);
  ASSERT_TRUE(first.ok());
  r.writer = "a-retry";
  auto second = store.Append(r);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->clock, first->clock);
  EXPECT_EQ(second->writer, "a");
  EXPECT_EQ(store.Read("acme", "s")->turns.size(), 1u);
}

TEST_P(SessionStoreTest, LimitsAreEnforcedWithMessagesThatNameThem) {
  SessionStore& store = Open({.max_turns = 2, .max_bytes = 1024, .max_sessions_per_tenant = 2});
  ASSERT_TRUE(store.Append(Turn("s", 0, "a")).ok());
  ASSERT_TRUE(store.Append(Turn("s", 1, "b")).ok());
  auto turns = store.Append(Turn("s", 2, "c"));
  EXPECT_EQ(turns.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(turns.status().message().find("2 turns"), std::string::npos);

  auto bytes = store.Append(Turn("t", 0, "a", {std::string(2000, 'x')}));
  EXPECT_EQ(bytes.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(bytes.status().message().find("1024"), std::string::npos);

  ASSERT_TRUE(store.Append(Turn("t", 0, "a")).ok());
  auto sessions = store.Append(Turn("u", 0, "a"));
  EXPECT_EQ(sessions.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(sessions.status().message().find("2 sessions"), std::string::npos);
  // Deleting one makes room again.
  ASSERT_TRUE(store.Delete("acme", "t").ok());
  EXPECT_TRUE(store.Append(Turn("u", 0, "a")).ok());
}

TEST_P(SessionStoreTest, ASessionExpiresItsTtlAfterItsLastTurn) {
  SessionStore& store = Open({.max_sessions_per_tenant = 1, .ttl = std::chrono::seconds(60)});
  ASSERT_TRUE(store.Append(Turn("s", 0, "a")).ok());
  clock_.Advance(std::chrono::seconds(59));
  ASSERT_TRUE(store.Append(Turn("s", 1, "b")).ok());
  clock_.Advance(std::chrono::seconds(59));
  EXPECT_TRUE(store.Read("acme", "s").ok());  // 59 s since the last turn
  clock_.Advance(std::chrono::seconds(2));
  EXPECT_EQ(store.Read("acme", "s").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store.List("acme", "", 10)->sessions.empty());
  // Its slot in the tenant's count is free again, and the id starts over.
  auto fresh = store.Append(Turn("s", 0, "c"));
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(fresh->clock, 1u);
}

TEST_P(SessionStoreTest, ListPagesThroughTheTenantsSessions) {
  SessionStore& store = Open();
  for (const char* id : {"e", "a", "c", "b", "d"}) ASSERT_TRUE(store.Append(Turn(id, 0, "w")).ok());
  std::vector<std::string> seen;
  std::string cursor;
  int pages = 0;
  do {
    auto page = store.List("acme", cursor, 2);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    for (const SessionSummary& s : page->sessions) {
      seen.push_back(s.id);
      EXPECT_EQ(s.turns, 1u);
    }
    cursor = page->next_cursor;
    ++pages;
  } while (!cursor.empty() && pages < 10);
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(store.List("acme", "", 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.List("acme", "no/such", 10).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(SessionStoreTest, DeleteRemovesEveryTurnAndOpId) {
  SessionStore& store = Open();
  AppendRequest r = Turn("s", 0, "a");
  r.op_id = "op";
  ASSERT_TRUE(store.Append(r).ok());
  ASSERT_TRUE(store.Append(Turn("s", 1, "b")).ok());
  ASSERT_TRUE(store.Delete("acme", "s").ok());
  EXPECT_EQ(store.Read("acme", "s").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store.Delete("acme", "s").code(), StatusCode::kNotFound);
  // The op id went with it: the same op stores a new first turn.
  r.writer = "again";
  auto again = store.Append(r);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->writer, "again");
  EXPECT_EQ(store.Read("acme", "s")->turns.size(), 1u);
}

TEST_P(SessionStoreTest, BadRequestsAreRefused) {
  SessionStore& store = Open();
  EXPECT_EQ(store.Append(Turn("bad id", 0, "a")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Append(Turn(std::string(129, 'a'), 0, "a")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Append(Turn("s", 0, "")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Append(Turn("s", 0, "a", {})).status().code(), StatusCode::kInvalidArgument);
  AppendRequest no_tenant = Turn("s", 0, "a");
  no_tenant.tenant = "";
  EXPECT_EQ(store.Append(no_tenant).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Read("acme", "").status().code(), StatusCode::kInvalidArgument);
}

TEST(RocksStore, OpenRefusesWhatItCannotUse) {
  const fs::path dir_ =
      fs::temp_directory_path() / ("strata_session_open_" + std::to_string(::getpid()));
  fs::remove_all(dir_);
  EXPECT_EQ(OpenRocksStore({.dir = ""}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenRocksStore({.dir = dir_.string(), .limits = {.max_turns = 0}}).status().code(),
            StatusCode::kInvalidArgument);
  // A directory another store holds open is locked.
  auto first = OpenRocksStore({.dir = dir_.string()});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = OpenRocksStore({.dir = dir_.string()});
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(dir_.string()), std::string::npos);
  // A path that is a file.
  const fs::path file = dir_.string() + ".file";
  { std::ofstream(file) << "x"; }
  EXPECT_FALSE(OpenRocksStore({.dir = file.string()}).ok());
  fs::remove(file);
  first->reset();
  fs::remove_all(dir_);
}

TEST(SessionRecord, TurnsAndMetaRoundTripAndTruncationsAreDataLoss) {
  Turn t{.clock = 300,
         .depends_on = 299,
         .writer = "req-9",
         .messages = {"{}", std::string(200, 'm')},
         .tokens = {0, -1, 1 << 30},
         .tokens_from = 17,
         .created_ms = -5};
  const std::string bytes = record::EncodeTurn(t);
  auto back = record::DecodeTurn(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->clock, t.clock);
  EXPECT_EQ(back->depends_on, t.depends_on);
  EXPECT_EQ(back->writer, t.writer);
  EXPECT_EQ(back->messages, t.messages);
  EXPECT_EQ(back->tokens, t.tokens);
  EXPECT_EQ(back->tokens_from, 17u);
  EXPECT_EQ(back->created_ms, t.created_ms);
  // A version 1 record (no tokens_from, written before it existed) reads
  // as tokens_from 0; a version past the newest is refused.
  std::string v1 = bytes.substr(0, bytes.size() - 1);
  v1[1] = 1;
  auto old = record::DecodeTurn(v1);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->tokens, t.tokens);
  EXPECT_EQ(old->tokens_from, 0u);
  std::string v3 = bytes;
  v3[1] = 3;
  EXPECT_EQ(record::DecodeTurn(v3).status().code(), StatusCode::kDataLoss);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(record::DecodeTurn(bytes.substr(0, n)).status().code(), StatusCode::kDataLoss) << n;
  }
  EXPECT_EQ(record::DecodeTurn(bytes + "x").status().code(), StatusCode::kDataLoss);

  record::Meta m{.clock = 7, .turns = 6, .bytes = 1 << 20, .created_ms = 1, .updated_ms = 2};
  const std::string meta = record::EncodeMeta(m);
  auto mb = record::DecodeMeta(meta);
  ASSERT_TRUE(mb.ok());
  EXPECT_EQ(mb->turns, 6u);
  EXPECT_EQ(mb->updated_ms, 2);
  EXPECT_EQ(record::DecodeMeta(bytes).status().code(), StatusCode::kDataLoss);  // a turn
  EXPECT_EQ(record::DecodeMeta(meta.substr(0, 3)).status().code(), StatusCode::kDataLoss);
}

TEST(ConversationTokens, TurnsPutTheirTokensInPlace) {
  Session s;
  s.turns.push_back({.clock = 1, .tokens = {1, 2, 3, 4}, .tokens_from = 0});
  s.turns.push_back({.clock = 2, .tokens = {5, 6}, .tokens_from = 4});
  EXPECT_EQ(ConversationTokens(s), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  // A turn that rewrote the tail (its prompt tokenized the answer anew).
  s.turns.push_back({.clock = 3, .tokens = {7, 8, 9}, .tokens_from = 5});
  EXPECT_EQ(ConversationTokens(s), (std::vector<int32_t>{1, 2, 3, 4, 5, 7, 8, 9}));
  // A turn with no tokens (a remote backend), or one past the end: none.
  s.turns.push_back({.clock = 4, .tokens = {10}, .tokens_from = 99});
  EXPECT_TRUE(ConversationTokens(s).empty());
  s.turns.back() = {.clock = 4};
  EXPECT_TRUE(ConversationTokens(s).empty());
}

TEST(SessionRecord, KeysOfOneSessionShareAPrefixNoOtherSessionHas) {
  const std::string a = record::TurnKey("t", "s", 1, "w");
  const std::string b = record::TurnKey("t", "s.x", 1, "w");
  EXPECT_TRUE(a.starts_with(record::TurnPrefix("t", "s")));
  EXPECT_FALSE(b.starts_with(record::TurnPrefix("t", "s")));
  // Clock order is key order.
  EXPECT_LT(record::TurnKey("t", "s", 2, "z"), record::TurnKey("t", "s", 10, "a"));
  EXPECT_LT(record::TurnKey("t", "s", 2, "a"), record::TurnKey("t", "s", 2, "b"));
}

}  // namespace
}  // namespace strata::session
