// The replicated session store against real redis-servers on loopback: what
// it refuses to run on, what it acknowledges (only what a majority of the
// nodes holds), and a failover: the primary killed with kill -9 while a
// client appends, a replica promoted, and every acknowledged turn there,
// once. Skips without redis-server.
#include "session/redis_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <set>
#include <thread>

#include "net/redis.h"
#include "testing/redis_server.h"

namespace strata::session {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using util::StatusCode;

// Every write on disk before it is answered; a replica is synced at once
// (Redis otherwise waits 5 s for more replicas to share one transfer).
const std::vector<std::string> kSynced = {
    "--appendonly", "yes", "--appendfsync", "always", "--repl-diskless-sync-delay", "0"};

std::vector<std::string> ReplicaOf(const testing::RedisServer& primary) {
  std::vector<std::string> args = kSynced;
  args.insert(args.end(), {"--replicaof", "127.0.0.1", std::to_string(primary.port())});
  return args;
}

// One command to the server on `port`; its reply ("" when it failed).
std::string Ask(int port, const net::RedisCommand& cmd) {
  auto conn = net::RedisConn::Connect("127.0.0.1", port, seconds(5));
  if (!conn.ok()) return "";
  auto reply = (*conn)->Command(cmd);
  return reply.ok() ? reply->str : "";
}

// Waits (polling, with a deadline: readiness of other processes, not a
// timing assertion) until `done`.
bool WaitFor(const std::function<bool()>& done) {
  const auto end = std::chrono::steady_clock::now() + seconds(20);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

// How much of its primary's stream a replica has applied.
int64_t ReplicaOffset(const testing::RedisServer& replica) {
  const std::string info = Ask(replica.port(), {"INFO", "replication"});
  const size_t at = info.find("slave_repl_offset:");
  return at == std::string::npos ? -1 : std::atoll(info.c_str() + at + 18);
}

bool LinkUp(const testing::RedisServer& replica) {
  return Ask(replica.port(), {"INFO", "replication"}).find("master_link_status:up") !=
         std::string::npos;
}

// Whether `n` replicas acknowledge `primary`'s stream (a WAIT of 50 ms).
// A replica that has just synced is counted by WAIT only from its first
// periodic acknowledgement, up to a second after its link is up: a write in
// that second waits past the store's default 1 s bound.
bool Acknowledging(const testing::RedisServer& primary, int n) {
  auto conn = net::RedisConn::Connect("127.0.0.1", primary.port(), seconds(5));
  if (!conn.ok()) return false;
  auto reply = (*conn)->Command({"WAIT", std::to_string(n), "50"});
  return reply.ok() && reply->type == net::RedisReply::Type::kInteger && reply->integer >= n;
}

AppendRequest Turn(std::string session, std::string writer, std::string op = "") {
  return {.tenant = "acme",
          .session_id = std::move(session),
          .depends_on = 0,
          .writer = std::move(writer),
          .op_id = std::move(op),
          .messages = {R"({"role":"user","content":"hi"})"}};
}

TEST(ParseRedisNodes, AcceptsAListAndNamesWhatIsWrong) {
  auto nodes = ParseRedisNodes("redis://10.0.0.1:6379,10.0.0.2:6380,cache");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  EXPECT_EQ(*nodes, (std::vector<std::pair<std::string, int>>{
                        {"10.0.0.1", 6379}, {"10.0.0.2", 6380}, {"cache", 6379}}));
  for (const char* bad : {"", "redis://", "a:1,", "a:1,a:1", "a:1,,b:2", "a:99999"}) {
    EXPECT_EQ(ParseRedisNodes(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(RedisStore, OpenRefusesAPrimaryThatCouldLoseAnAcknowledgedTurn) {
  auto redis = testing::RedisServer::Start();  // appendonly no
  if (!redis) GTEST_SKIP() << testing::RedisServer::kMissing;
  auto refused = OpenRedisStore({.nodes = {{"127.0.0.1", redis->port()}}});
  ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("--appendfsync always"), std::string::npos)
      << refused.status().message();
  // An operator who knows better may say so.
  EXPECT_TRUE(OpenRedisStore({.nodes = {{"127.0.0.1", redis->port()}}, .require_aof = false}).ok());
  // Options out of range, and nobody answering.
  EXPECT_EQ(OpenRedisStore({.nodes = {}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      OpenRedisStore({.nodes = {{"127.0.0.1", redis->port()}}, .wait_replicas = 1}).status().code(),
      StatusCode::kInvalidArgument);
  const int port = redis->port();
  redis->Kill();
  auto down = OpenRedisStore({.nodes = {{"127.0.0.1", port}}, .timeout = milliseconds(200)});
  ASSERT_EQ(down.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(down.status().message().find(std::to_string(port)), std::string::npos);
}

TEST(RedisStore, ATurnNoReplicaConfirmedIsNotAcknowledgedAndItsRetryStoresItOnce) {
  auto primary = testing::RedisServer::Start(kSynced);
  if (!primary) GTEST_SKIP() << testing::RedisServer::kMissing;
  // Two nodes listed: a majority is both, so every write waits for one
  // replica, and none is there yet.
  auto replica_port = testing::RedisServer::Start(kSynced);
  ASSERT_TRUE(replica_port);
  const int second = replica_port->port();
  replica_port->Kill();
  auto store = OpenRedisStore({.nodes = {{"127.0.0.1", primary->port()}, {"127.0.0.1", second}},
                               .wait_timeout = milliseconds(100)});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto unconfirmed = (*store)->Append(Turn("s", "w1", "op-1"));
  ASSERT_EQ(unconfirmed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(unconfirmed.status().message().find("0 of the 1"), std::string::npos)
      << unconfirmed.status().message();

  auto replica = testing::RedisServer::Start(ReplicaOf(*primary));
  ASSERT_TRUE(replica);
  ASSERT_TRUE(WaitFor([&] { return Acknowledging(*primary, 1); }));
  auto retried = (*store)->Append(Turn("s", "w1-retry", "op-1"));
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_EQ(retried->writer, "w1");  // the first attempt's turn, now confirmed
  auto s = (*store)->Read("acme", "s");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->turns.size(), 1u);
}

TEST(RedisStore, TheStoreFindsThePrimaryWhereverItIsListed) {
  auto primary = testing::RedisServer::Start(kSynced);
  if (!primary) GTEST_SKIP() << testing::RedisServer::kMissing;
  auto replica = testing::RedisServer::Start(ReplicaOf(*primary));
  ASSERT_TRUE(replica);
  ASSERT_TRUE(WaitFor([&] { return Acknowledging(*primary, 1); }));
  auto store =
      OpenRedisStore({.nodes = {{"127.0.0.1", replica->port()}, {"127.0.0.1", primary->port()}}});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto appended = (*store)->Append(Turn("s", "w"));
  ASSERT_TRUE(appended.ok()) << appended.status().ToString();
  // The write is on the replica as well (WAIT confirmed it).
  auto conn = net::RedisConn::Connect("127.0.0.1", replica->port(), seconds(5));
  ASSERT_TRUE(conn.ok());
  auto exists = (*conn)->Command({"EXISTS", "strata:v1:session:{acme}:m:s"});
  ASSERT_TRUE(exists.ok());
  EXPECT_EQ(exists->integer, 1);
}

// Three nodes, so that after losing the primary a majority (two) is still
// there: kill -9 the primary while a client appends, promote one replica,
// point the other at it. Every turn the store acknowledged is on the new
// primary exactly once, and the store went on by itself.
TEST(RedisStore, AFailoverLosesNoAcknowledgedTurn) {
  auto primary = testing::RedisServer::Start(kSynced);
  if (!primary) GTEST_SKIP() << testing::RedisServer::kMissing;
  auto r1 = testing::RedisServer::Start(ReplicaOf(*primary));
  auto r2 = testing::RedisServer::Start(ReplicaOf(*primary));
  ASSERT_TRUE(r1 && r2);
  ASSERT_TRUE(WaitFor([&] { return LinkUp(*r1) && LinkUp(*r2); }));
  auto opened = OpenRedisStore({.nodes = {{"127.0.0.1", primary->port()},
                                          {"127.0.0.1", r1->port()},
                                          {"127.0.0.1", r2->port()}},
                                .timeout = milliseconds(300),
                                .wait_timeout = milliseconds(300)});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  SessionStore& store = **opened;

  // The client: appends turn i until it is acknowledged (retrying with the
  // same op id through the failover), and records each acknowledgement.
  constexpr int kTurns = 60;
  std::atomic<int> acked{0};
  std::atomic<int> failures{0};
  std::thread client([&] {
    for (int i = 0; i < kTurns; ++i) {
      const std::string id = std::to_string(i);
      const auto give_up = std::chrono::steady_clock::now() + seconds(30);
      while (!store.Append(Turn("s", "w" + id, "op-" + id)).ok()) {
        ++failures;
        if (std::chrono::steady_clock::now() > give_up) return;
        std::this_thread::sleep_for(milliseconds(20));
      }
      ++acked;
    }
  });
  ASSERT_TRUE(WaitFor([&] { return acked.load() >= kTurns / 2; }));
  primary->Kill();
  // What Sentinel does: promote the replica that applied the most of the
  // stream. WAIT confirmed each turn on at least one replica, not on both;
  // the one furthest along has every turn either has.
  testing::RedisServer* promoted = r1.get();
  testing::RedisServer* other = r2.get();
  if (ReplicaOffset(*r2) > ReplicaOffset(*r1)) std::swap(promoted, other);
  ASSERT_EQ(Ask(promoted->port(), {"REPLICAOF", "NO", "ONE"}), "OK");
  ASSERT_EQ(Ask(other->port(), {"REPLICAOF", "127.0.0.1", std::to_string(promoted->port())}), "OK");
  client.join();
  ASSERT_EQ(acked.load(), kTurns) << "the store did not go on after the failover";

  auto s = store.Read("acme", "s");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::set<std::string> writers;
  for (const session::Turn& t : s->turns) writers.insert(t.writer);
  EXPECT_EQ(s->turns.size(), static_cast<size_t>(kTurns)) << "a turn was lost or stored twice";
  EXPECT_EQ(writers.size(), static_cast<size_t>(kTurns));
  for (size_t i = 1; i < s->turns.size(); ++i) EXPECT_GT(s->turns[i].clock, s->turns[i - 1].clock);
  // The turns after the failover reached the other replica too.
  ASSERT_TRUE(WaitFor([&] { return LinkUp(*other); }));
  auto conn = net::RedisConn::Connect("127.0.0.1", other->port(), seconds(5));
  ASSERT_TRUE(conn.ok());
  auto count = (*conn)->Command({"HLEN", "strata:v1:session:{acme}:t:s"});
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(count->integer, kTurns);
  RecordProperty("failed_attempts_during_failover", failures.load());
}

}  // namespace
}  // namespace strata::session
