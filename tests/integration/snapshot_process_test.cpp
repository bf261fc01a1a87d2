// Request snapshots end to end: `strata serve --snapshots` on the real
// stories260K model records requests of every kind (greedy, seeded and
// unseeded sampling, chat, completions and messages, a stream, n > 1, a
// prompt array, an L1 hit), `strata replay ID` runs each again and finds the
// answer identical, the read API gives a tenant its own snapshots only, and a
// changed file, another key or another model are refused clearly. One
// server for the suite; skipped without ../shared/models/stories260K.gguf.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "obs/snapshot_envelope.h"
#include "testing/raw_http.h"
#include "testing/shared_data.h"
#include "testing/strata_process.h"
#include "util/file_system.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using testing::RawClient;
using testing::RawResponse;
using testing::ReadAll;

const char* const kModel = "models/stories260K.gguf";

struct Replay {
  int exit = -1;
  std::string out;
};

class SnapshotProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::HaveShared(kModel)) return;
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("strata_snapshots_" + std::to_string(::getpid())));
    std::filesystem::create_directories(*dir_);
    Write("snap.key", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
    Write("other.key", "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
    Write("keys.txt", "key-acme-0001 acme\nkey-globex-01 globex\n");
    log_ = new std::string((*dir_ / "serve.log").string());
    pid_ = testing::Spawn(
        {"serve", "-m", testing::SharedPath(kModel), "--port", "0", "-t", "1", "--ctx", "512",
         "--api-keys", Path("keys.txt"), "--snapshots", Path("snaps"), "--snapshot-key-file",
         Path("snap.key"), "--log-level", "info"},
        *log_);
    port_ = testing::WaitReady(pid_, *log_);
  }
  static void TearDownTestSuite() {
    testing::Kill(pid_);
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
    delete log_;
    dir_ = nullptr;
  }
  void SetUp() override {
    STRATA_REQUIRE_SHARED(kModel);
    ASSERT_GT(port_, 0) << "the server did not start:\n" << ReadAll(*log_);
  }

  static std::string Path(const std::string& name) { return (*dir_ / name).string(); }
  static void Write(const std::string& name, const std::string& text) {
    std::ofstream(Path(name)) << text;
  }

  std::optional<RawResponse> Ask(const std::string& method, const std::string& path,
                                 const std::string& key, const std::string& id = "",
                                 const Json& body = nullptr) {
    const std::string b = body.is_null() ? "" : body.dump();
    std::string req = method + " " + path + " HTTP/1.1\r\nHost: t\r\n";
    if (!key.empty()) req += "Authorization: Bearer " + key + "\r\n";
    if (!id.empty()) req += "X-Request-ID: " + id + "\r\n";
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(b.size()) +
           "\r\n\r\n" + b;
    RawClient c(port_);
    if (!c.connected() || !c.Send(req)) return std::nullopt;
    return c.ReadResponse(std::chrono::seconds(60));
  }
  // Sends a generation request as `key`'s tenant with request id `id`.
  RawResponse Generate(const std::string& path, const std::string& key, const std::string& id,
                       const Json& body) {
    auto r = Ask("POST", path, key, id, body);
    EXPECT_TRUE(r.has_value()) << id;
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << id << ": " << r->body;
    return *r;
  }
  // GET /v1/snapshots/ID as `key`'s tenant, waiting (at most 10 s) for a
  // snapshot being written when `wait` is set.
  std::optional<RawResponse> Snapshot(const std::string& key, const std::string& id,
                                      bool wait = true) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (true) {
      auto r = Ask("GET", "/v1/snapshots/" + id, key);
      if (!wait || !r || r->status != 404 || std::chrono::steady_clock::now() > end) return r;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // `strata replay ID --snapshots DIR --snapshot-key-file KEY_FILE -t 1 EXTRA`.
  Replay RunReplay(const std::string& id, std::vector<std::string> extra = {},
                   const std::string& key_file = "snap.key") {
    static int n = 0;
    const std::string log = Path("replay_" + std::to_string(++n) + ".log");
    std::vector<std::string> args = {
        "replay", id, "--snapshots", Path("snaps"), "--snapshot-key-file", Path(key_file),
        "-t",     "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    const pid_t pid = testing::Spawn(args, log);
    Replay r;
    r.exit = testing::WaitExit(pid, std::chrono::seconds(120));
    if (r.exit < 0) testing::Kill(pid);
    r.out = ReadAll(log);
    return r;
  }
  // Waits for the snapshot of `id`, then replays it: identical, exit 0.
  void ExpectReplayIdentical(const std::string& id, const std::string& tenant_key = "key-acme-0001",
                             const std::string& tenant = "acme") {
    auto snap = Snapshot(tenant_key, id);
    ASSERT_TRUE(snap.has_value());
    ASSERT_EQ(snap->status, 200) << id << ": " << snap->body;
    const Replay r = RunReplay(id, {"--tenant", tenant});
    EXPECT_EQ(r.exit, 0) << id << ":\n" << r.out;
    EXPECT_NE(r.out.find("identical:"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("DIFFERENT"), std::string::npos) << r.out;
  }

  static std::filesystem::path* dir_;
  static std::string* log_;
  static pid_t pid_;
  static int port_;
};
std::filesystem::path* SnapshotProcessTest::dir_ = nullptr;
std::string* SnapshotProcessTest::log_ = nullptr;
pid_t SnapshotProcessTest::pid_ = -1;
int SnapshotProcessTest::port_ = -1;

Json Chat(const std::string& text, double temperature, int max_tokens = 24) {
  return {{"model", "stories260K"},
          {"messages", {{{"role", "user"}, {"content", text}}}},
          {"max_tokens", max_tokens},
          {"temperature", temperature}};
}

TEST_F(SnapshotProcessTest, GreedyChatAndItsL1HitReplayIdentically) {
  const Json chat = Chat("Tell me about a cat", 0);
  Generate("/v1/chat/completions", "key-acme-0001", "greedy-chat", chat);
  const RawResponse hit = Generate("/v1/chat/completions", "key-acme-0001", "greedy-hit", chat);
  EXPECT_EQ(hit.Header("x-strata-cache"), "l1");
  ExpectReplayIdentical("greedy-chat");
  ExpectReplayIdentical("greedy-hit");
  const Json snap = Json::parse(Snapshot("key-acme-0001", "greedy-hit")->body);
  EXPECT_EQ(snap["cache"]["outcome"], "l1");
  const Replay r = RunReplay("greedy-hit", {"--tenant", "acme"});
  EXPECT_NE(r.out.find("served from the cache"), std::string::npos) << r.out;
}

TEST_F(SnapshotProcessTest, SeededAndUnseededSamplingReplayIdentically) {
  Json seeded = {{"model", "stories260K"},
                 {"prompt", "Once upon a time"},
                 {"max_tokens", 32},
                 {"temperature", 0.8},
                 {"seed", 1234}};
  Generate("/v1/completions", "key-acme-0001", "seeded-completion", seeded);
  // No seed: the server draws one, and the snapshot must have kept it.
  const RawResponse a =
      Generate("/v1/chat/completions", "key-acme-0001", "unseeded-chat-a", Chat("A dog", 0.8, 32));
  const RawResponse b =
      Generate("/v1/chat/completions", "key-acme-0001", "unseeded-chat-b", Chat("A dog", 0.8, 32));
  EXPECT_NE(Json::parse(a.body)["choices"][0]["message"]["content"],
            Json::parse(b.body)["choices"][0]["message"]["content"])
      << "two unseeded requests sampled the same text: the test proves nothing";
  ExpectReplayIdentical("seeded-completion");
  ExpectReplayIdentical("unseeded-chat-a");
  ExpectReplayIdentical("unseeded-chat-b");
  const Json snap = Json::parse(Snapshot("key-acme-0001", "unseeded-chat-a")->body);
  EXPECT_EQ(snap["request"]["fixed_seed"], false);
  EXPECT_TRUE(snap["choices"][0].contains("seed"));
}

TEST_F(SnapshotProcessTest, StreamsSeveralChoicesMessagesAndPromptArraysReplayIdentically) {
  Json stream = {{"model", "stories260K"},
                 {"prompt", "The little bird"},
                 {"max_tokens", 24},
                 {"temperature", 0.8},
                 {"n", 3},
                 {"stream", true}};
  const RawResponse s = Generate("/v1/completions", "key-acme-0001", "stream-n3", stream);
  EXPECT_NE(s.body.find("data: [DONE]"), std::string::npos);
  Json two = Chat("Lily went to the park", 0.9, 20);
  two["n"] = 2;
  two["seed"] = 77;
  Generate("/v1/chat/completions", "key-acme-0001", "seeded-n2", two);
  Json messages = {{"model", "stories260K"},
                   {"max_tokens", 20},
                   {"temperature", 0.7},
                   {"system", "You tell stories."},
                   {"messages", {{{"role", "user"}, {"content", "A story about a fox"}}}},
                   {"stream", true}};
  Generate("/v1/messages", "key-acme-0001", "anthropic-stream", messages);
  Json array = {{"model", "stories260K"},
                {"prompt", {"The sun", "A big tree"}},
                {"max_tokens", 16},
                {"temperature", 0.8},
                {"n", 2}};
  Generate("/v1/completions", "key-acme-0001", "prompt-array", array);
  for (const char* id : {"stream-n3", "seeded-n2", "anthropic-stream", "prompt-array"}) {
    ExpectReplayIdentical(id);
  }
  const Json snap = Json::parse(Snapshot("key-acme-0001", "stream-n3")->body);
  EXPECT_EQ(snap["stream"], true);
  EXPECT_EQ(snap["choices"].size(), 3u);
  EXPECT_EQ(Json::parse(Snapshot("key-acme-0001", "anthropic-stream")->body)["api"],
            "anthropic.messages");
  EXPECT_EQ(Json::parse(Snapshot("key-acme-0001", "prompt-array")->body)["prompts"].size(), 2u);
}

TEST_F(SnapshotProcessTest, TheReadApiGivesATenantItsOwnSnapshotsOnly) {
  Generate("/v1/chat/completions", "key-globex-01", "globex-only", Chat("A red ball", 0));
  Generate("/v1/chat/completions", "key-acme-0001", "shared-id", Chat("A blue ball", 0));
  Generate("/v1/chat/completions", "key-globex-01", "shared-id", Chat("A green ball", 0));
  auto own = Snapshot("key-globex-01", "globex-only");
  ASSERT_TRUE(own);
  ASSERT_EQ(own->status, 200) << own->body;
  EXPECT_EQ(Json::parse(own->body)["tenant"], "globex");
  // Another tenant: 404, as for an id never seen.
  auto theirs = Snapshot("key-acme-0001", "globex-only", /*wait=*/false);
  ASSERT_TRUE(theirs);
  EXPECT_EQ(theirs->status, 404) << theirs->body;
  // One id, two tenants: each its own request.
  EXPECT_NE(Snapshot("key-acme-0001", "shared-id")->body.find("A blue ball"), std::string::npos);
  EXPECT_NE(Snapshot("key-globex-01", "shared-id")->body.find("A green ball"), std::string::npos);
  EXPECT_EQ(Ask("GET", "/v1/snapshots/bad%20id", "key-acme-0001")->status, 400);
  EXPECT_EQ(Ask("GET", "/v1/snapshots/globex-only", "")->status, 401);
  ExpectReplayIdentical("globex-only", "key-globex-01", "globex");
  // Replay is scoped by tenant too.
  const Replay wrong_tenant = RunReplay("globex-only", {"--tenant", "acme"});
  EXPECT_EQ(wrong_tenant.exit, 2);
  EXPECT_NE(wrong_tenant.out.find("no snapshot of request 'globex-only' for tenant 'acme'"),
            std::string::npos)
      << wrong_tenant.out;
}

TEST_F(SnapshotProcessTest, AChangedFileAnotherKeyOrAnotherModelAreRefusedClearly) {
  Generate("/v1/chat/completions", "key-acme-0001", "tamper-me", Chat("A small frog", 0));
  ASSERT_EQ(Snapshot("key-acme-0001", "tamper-me")->status, 200);
  // Another model: refused before anything runs.
  if (testing::HaveShared("models/llama-2-tiny-random.gguf")) {
    const Replay other_model = RunReplay(
        "tamper-me",
        {"--tenant", "acme", "-m", testing::SharedPath("models/llama-2-tiny-random.gguf")});
    EXPECT_EQ(other_model.exit, 2);
    EXPECT_NE(other_model.out.find("is not the model that answered"), std::string::npos)
        << other_model.out;
  }
  // Another key: every snapshot looks absent, and replay says why.
  const Replay other_key = RunReplay("tamper-me", {"--tenant", "acme"}, "other.key");
  EXPECT_EQ(other_key.exit, 2);
  EXPECT_NE(other_key.out.find("written under another key"), std::string::npos) << other_key.out;
  // One changed byte of the ciphertext: authentication fails, nothing leaks.
  auto fs = util::NewPosixFileSystem();
  auto key = obs::SnapshotKey::Load(*fs, Path("snap.key"));
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  const std::string file = Path("snaps/" + key->FileName("acme", "tamper-me"));
  std::string bytes = ReadAll(file);
  ASSERT_GT(bytes.size(), obs::kSnapshotOverheadBytes + 10);
  bytes[obs::kSnapshotHeaderBytes + 5] ^= 0x01;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  const Replay tampered = RunReplay("tamper-me", {"--tenant", "acme"});
  EXPECT_EQ(tampered.exit, 2);
  EXPECT_NE(tampered.out.find("authentication failed"), std::string::npos) << tampered.out;
  auto api = Snapshot("key-acme-0001", "tamper-me", /*wait=*/false);
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 500) << api->body;
  EXPECT_NE(api->body.find("failed authentication"), std::string::npos) << api->body;
  auto metrics = Ask("GET", "/metrics", "");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("strata_snapshot_auth_failures_total 1"), std::string::npos);
  EXPECT_NE(metrics->body.find("strata_snapshots_written_total"), std::string::npos);
}

// Under the RT-Switcher a choice runs on the level's terms (here a cheaper
// sampling tier and a cap of 8 tokens): replay runs it on the same terms.
TEST_F(SnapshotProcessTest, AChoiceOnTheRtSwitchersTermsReplaysOnThem) {
  const std::string log = Path("serve_rt.log");
  const pid_t pid =
      testing::Spawn({"serve", "-m", testing::SharedPath(kModel), "--port", "0", "-t", "1", "--ctx",
                      "512", "--snapshots", Path("snaps"), "--snapshot-key-file", Path("snap.key"),
                      "--rt-switcher", "on", "--rt-levels", "1:topk:0:8"},
                     log);
  const int port = testing::WaitReady(pid, log);
  ASSERT_GT(port, 0) << ReadAll(log);
  Json body = Chat("A cat and a dog", 0.9, 24);
  body["typical_p"] = 0.9;  // the topk tier turns it off
  const std::string b = body.dump();
  RawClient c(port);
  ASSERT_TRUE(
      c.Send("POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nX-Request-ID: rt-1\r\n"
             "Content-Length: " +
             std::to_string(b.size()) + "\r\n\r\n" + b));
  auto r = c.ReadResponse(std::chrono::seconds(60));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["usage"]["completion_tokens"], 8);
  // A clean stop writes what is still queued.
  ::kill(pid, SIGTERM);
  EXPECT_EQ(testing::WaitExit(pid, std::chrono::seconds(30)), 0) << ReadAll(log);
  const Replay replay = RunReplay("rt-1", {"--tenant", "default"});
  EXPECT_EQ(replay.exit, 0) << replay.out;
  EXPECT_NE(replay.out.find("identical, 8 tokens"), std::string::npos) << replay.out;
}

// A remote backend's request: recorded without seeds or token ids (the
// upstream keeps them), replayed by sending it to --upstream again and
// comparing texts; without --upstream replay says what to do.
TEST_F(SnapshotProcessTest, ARemoteBackendsRequestIsSentToTheUpstreamAgain) {
  const std::string up_log = Path("upstream.log");
  const pid_t up = testing::Spawn({"serve", "-m", testing::SharedPath(kModel), "--port", "0", "-t",
                                   "1", "--ctx", "512", "--alias", "remote-tiny"},
                                  up_log);
  const int up_port = testing::WaitReady(up, up_log);
  ASSERT_GT(up_port, 0) << ReadAll(up_log);
  const std::string upstream = "http://127.0.0.1:" + std::to_string(up_port);
  const std::string front_log = Path("front.log");
  const pid_t front = testing::Spawn(
      {"serve", "--backend", "openai:" + upstream, "--backend-name", "remote-tiny", "--port", "0",
       "--snapshots", Path("snaps"), "--snapshot-key-file", Path("snap.key")},
      front_log);
  const int front_port = testing::WaitReady(front, front_log);
  ASSERT_GT(front_port, 0) << ReadAll(front_log);
  Json body = Chat("A kite in the wind", 0, 16);
  body["model"] = "remote-tiny";
  const std::string b = body.dump();
  RawClient c(front_port);
  ASSERT_TRUE(
      c.Send("POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nX-Request-ID: remote-1\r\n"
             "Content-Length: " +
             std::to_string(b.size()) + "\r\n\r\n" + b));
  auto r = c.ReadResponse(std::chrono::seconds(60));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  ::kill(front, SIGTERM);
  EXPECT_EQ(testing::WaitExit(front, std::chrono::seconds(30)), 0) << ReadAll(front_log);
  const Replay without = RunReplay("remote-1", {"--tenant", "default"});
  EXPECT_EQ(without.exit, 2);
  EXPECT_NE(without.out.find("remote backend 'remote-tiny' (openai)"), std::string::npos)
      << without.out;
  const Replay again = RunReplay("remote-1", {"--tenant", "default", "--upstream", upstream});
  EXPECT_EQ(again.exit, 0) << again.out;
  EXPECT_NE(again.out.find("need not be deterministic"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("identical: 1 choice(s)"), std::string::npos) << again.out;
  ::kill(up, SIGTERM);
  EXPECT_EQ(testing::WaitExit(up, std::chrono::seconds(30)), 0);
}

}  // namespace
}  // namespace strata
