// `strata serve --config` as a process: the file's values in force, flags
// over the file, and reloads (POST /admin/reload behind the admin key, and
// SIGHUP) that change live knobs for new requests, name the ones that need
// a restart, rotate API keys, and change nothing when the file is invalid.
// The dashboard behind the admin key. The binary is $STRATA_BIN.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "testing/raw_http.h"
#include "testing/strata_process.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using testing::HttpRequest;
using testing::RawClient;
using testing::RawResponse;
using testing::ReadAll;

constexpr const char* kAdminKey = "admin-key-for-the-test-0123";
const std::string kBearer = std::string("Authorization: Bearer ") + kAdminKey + "\r\n";

Json Parse(const std::string& text) { return Json::parse(text, nullptr, false); }

void Write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

// The test's files and model.
testing::DemoModelDir* demo_ = nullptr;

std::string InDir(const std::string& name) { return (demo_->dir / name).string(); }

// The base configuration; `extra` is appended to its [rt] table (or opens
// tables of its own).
std::string Config(const std::string& limits = "max_tokens_cap = 64",
                   const std::string& extra = "") {
  return "[limits]\n" + limits + "\n\n[auth]\nadmin_key_file = \"" + InDir("admin.key") +
         "\"\napi_keys_file = \"" + InDir("keys.txt") +
         "\"\n\n[l1]\nttl = 30\n\n[rt]\nswitcher = \"on\"\n"
         "levels = \"1:entropy:0:0:0,0.5:topk:4:32:1\"\n" +
         extra;
}

class ConfigProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    demo_ = new testing::DemoModelDir("strata_config",
                                      "n_embd=128,n_layers=4,n_heads=4,n_ff=256,n_ctx=4096");
    ASSERT_FALSE(demo_->model.empty()) << demo_->MkmodelLog();
  }
  static void TearDownTestSuite() { delete demo_; }
  void SetUp() override {
    Write(demo_->dir / "admin.key", std::string(kAdminKey) + "\n");
    Write(demo_->dir / "keys.txt", "key-of-tenant-a-1 a\n");
    Write(demo_->dir / "c.toml", Config());
  }
  void TearDown() override {
    if (pid_ > 0) testing::Kill(pid_);
  }

  // `strata serve --config c.toml` from the test's directory, plus `extra`.
  int Serve(std::vector<std::string> extra = {}) {
    static int n = 0;  // a log of its own: the last one may still name its port
    log_ = (demo_->dir / ("serve_" + std::to_string(++n) + ".log")).string();
    std::vector<std::string> args = {"serve",       "-m",       demo_->model,
                                     "--port",      "0",        "-t",
                                     "1",           "--config", (demo_->dir / "c.toml").string(),
                                     "--log-level", "info"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = testing::Spawn(args, log_);
    port_ = testing::WaitReady(pid_, log_);
    if (port_ <= 0) ADD_FAILURE() << "the server did not start:\n" << ReadAll(log_);
    return port_;
  }
  std::optional<RawResponse> Ask(const std::string& bytes) {
    RawClient c(port_);
    if (!c.connected() || !c.Send(bytes)) return std::nullopt;
    return c.ReadResponse(std::chrono::seconds(60));
  }
  std::optional<RawResponse> Reload(const std::string& headers = kBearer) {
    return Ask(HttpRequest("POST", "/admin/reload", "", headers));
  }
  std::optional<RawResponse> Chat(int max_tokens, const std::string& key = "key-of-tenant-a-1") {
    const Json body = {{"model", "demo"},
                       {"messages", {{{"role", "user"}, {"content", "hello"}}}},
                       {"max_tokens", max_tokens},
                       {"temperature", 0}};
    return Ask(HttpRequest("POST", "/v1/chat/completions", body.dump(),
                           "Authorization: Bearer " + key + "\r\n"));
  }
  // Waits until the server's log holds `needle` (a SIGHUP reload is logged
  // when it is done).
  bool LogHas(const std::string& needle) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (ReadAll(log_).find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  pid_t pid_ = -1;
  int port_ = -1;
  std::string log_;
};

TEST_F(ConfigProcessTest, TheFileIsInForceAndFlagsWinOverIt) {
  ASSERT_GT(Serve({"--l1-ttl", "7"}), 0);
  const std::string log = ReadAll(log_);
  EXPECT_NE(log.find("TTL 7 s"), std::string::npos) << log;  // the flag, not the file's 30
  auto over = Chat(65);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->status, 400) << over->body;  // the file's cap
  auto ok = Chat(64);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST_F(ConfigProcessTest, AnInvalidFileRefusesToStartNamingEachLine) {
  Write(demo_->dir / "c.toml", "[l1]\nttl = -1\ntll = 3\n");
  log_ = (demo_->dir / "bad.log").string();
  const pid_t pid = testing::Spawn(
      {"serve", "-m", demo_->model, "--port", "0", "--config", (demo_->dir / "c.toml").string()},
      log_);
  EXPECT_EQ(testing::WaitExit(pid, std::chrono::seconds(20)), 2);
  const std::string log = ReadAll(log_);
  EXPECT_NE(log.find("c.toml:2: l1.ttl: -1 is outside"), std::string::npos) << log;
  EXPECT_NE(log.find("c.toml:3: l1.tll: unknown key"), std::string::npos) << log;
  EXPECT_NE(log.find("did you mean 'l1.ttl'?"), std::string::npos) << log;
}

TEST_F(ConfigProcessTest, ReloadNeedsTheAdminKey) {
  ASSERT_GT(Serve(), 0);
  auto none = Reload("");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_NE(none->Header("www-authenticate").find("Basic"), std::string::npos);
  EXPECT_EQ(Parse(none->body)["error"]["type"], "authentication_error");
  auto wrong = Reload("Authorization: Bearer admin-key-for-the-test-0124\r\n");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  // An API key is not an admin key.
  auto tenant = Reload("Authorization: Bearer key-of-tenant-a-1\r\n");
  ASSERT_TRUE(tenant);
  EXPECT_EQ(tenant->status, 401);
  auto ok = Reload();
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  const Json body = Parse(ok->body);
  EXPECT_TRUE(body["reloaded"].get<bool>());
  EXPECT_TRUE(body["applied"].empty());
  EXPECT_EQ(body["reread"].size(), 2u);                         // keys.txt, admin.key
  EXPECT_EQ(ReadAll(log_).find(kAdminKey), std::string::npos);  // never logged
}

TEST_F(ConfigProcessTest, ALiveKnobChangesForNewRequestsAndARestartKnobIsNamed) {
  ASSERT_GT(Serve(), 0);
  ASSERT_EQ(Chat(40)->status, 200);
  Write(demo_->dir / "c.toml", Config("max_tokens_cap = 32", "\n[engine]\nparallel = 3\n"));
  auto r = Reload();
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json body = Parse(r->body);
  ASSERT_EQ(body["applied"].size(), 1u) << r->body;
  EXPECT_EQ(body["applied"][0]["key"], "limits.max_tokens_cap");
  EXPECT_EQ(body["applied"][0]["from"], "64");
  EXPECT_EQ(body["applied"][0]["to"], "32");
  ASSERT_EQ(body["restart_required"].size(), 1u) << r->body;
  EXPECT_EQ(body["restart_required"][0]["key"], "engine.parallel");
  auto over = Chat(40);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->status, 400) << over->body;
  EXPECT_NE(over->body.find("[1, 32]"), std::string::npos) << over->body;
  // The restart knob stayed: the server still says what it started with.
  EXPECT_TRUE(LogHas("engine.parallel = 3 needs a restart; it stays 16"));
}

TEST_F(ConfigProcessTest, ARunningRequestFinishesOnTheConfigItStartedWith) {
  ASSERT_GT(Serve(), 0);
  Write(demo_->dir / "c.toml", Config("max_tokens_cap = 2000"));
  ASSERT_EQ(Reload()->status, 200);
  RawClient stream(port_);
  const Json body = {{"model", "demo"},
                     {"messages", {{{"role", "user"}, {"content", "go on"}}}},
                     {"max_tokens", 1500},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  ASSERT_TRUE(stream.Send(HttpRequest("POST", "/v1/chat/completions", body.dump(),
                                      "Authorization: Bearer key-of-tenant-a-1\r\n")));
  ASSERT_TRUE(stream.ReadUntil("data: ", std::chrono::seconds(30)));
  Write(demo_->dir / "c.toml", Config("max_tokens_cap = 8"));
  ASSERT_EQ(Reload()->status, 200);
  const bool reloaded_mid_stream = !stream.ReadUntil("[DONE]", std::chrono::milliseconds(0));
  auto rest = stream.ReadResponse(std::chrono::seconds(120));
  ASSERT_TRUE(rest);
  EXPECT_NE(rest->body.find("\"completion_tokens\":1500"), std::string::npos)
      << rest->body.substr(rest->body.size() > 400 ? rest->body.size() - 400 : 0);
  if (!reloaded_mid_stream) GTEST_SKIP() << "the stream ended before the reload took effect";
  EXPECT_EQ(Chat(9)->status, 400);  // a new request has the new cap
}

TEST_F(ConfigProcessTest, APolicyRampMovesNewRequestsOverItsTime) {
  Write(demo_->dir / "c.toml", Config("max_tokens_cap = 64", "\n[server]\npolicy_ramp = 3\n"));
  ASSERT_GT(Serve(), 0);
  Write(demo_->dir / "c.toml", Config("max_tokens_cap = 32", "\n[server]\npolicy_ramp = 3\n"));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(Reload()->status, 200);
  EXPECT_TRUE(LogHas("policy migration: new requests move to the new live options over 3.0 s"));
  // max_tokens 40 fits the old cap only: a 400 is a request on the new policy.
  int early_new = 0, early = 0;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(600)) {
    auto r = Chat(40);
    ASSERT_TRUE(r);
    early_new += r->status == 400 ? 1 : 0;
    ++early;
  }
  ASSERT_GT(early, 0);
  EXPECT_LT(early_new, early) << "the first half second is mostly the old policy";
  std::this_thread::sleep_for(std::chrono::milliseconds(3000) -
                              (std::chrono::steady_clock::now() - t0));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Chat(40)->status, 400) << "the ramp is over";
  RawClient m(port_);
  ASSERT_TRUE(m.Send("GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto metrics = m.ReadResponse(std::chrono::seconds(10));
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("strata_policy_ramp_progress 1\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("strata_policy_requests_total{policy=\"previous\"}"),
            std::string::npos);
}

TEST_F(ConfigProcessTest, AnInvalidFileChangesNothingAndSaysWhy) {
  ASSERT_GT(Serve(), 0);
  Write(demo_->dir / "c.toml", "[limits]\nmax_tokens_cap = 0\n[l1]\nttl = 5\nttll = 1\n");
  auto r = Reload();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const Json body = Parse(r->body);
  EXPECT_FALSE(body["reloaded"].get<bool>());
  const std::string message = body["error"]["message"];
  EXPECT_NE(message.find("c.toml:2: limits.max_tokens_cap: 0 is outside"), std::string::npos)
      << message;
  EXPECT_NE(message.find("c.toml:5: l1.ttll"), std::string::npos) << message;
  EXPECT_EQ(Chat(64)->status, 200);  // the cap is still 64
  EXPECT_EQ(Chat(65)->status, 400);
  // A combination the flags refuse is refused on reload too, in the file's words.
  Write(demo_->dir / "c.toml", Config("max_tokens_cap = 64", "ttft_floor = 2\nttft_slo = 1\n"));
  auto combo = Reload();
  ASSERT_TRUE(combo);
  EXPECT_EQ(combo->status, 400);
  EXPECT_NE(Parse(combo->body)["error"]["message"].get<std::string>().find(
                "rt.ttft_slo 1 is below rt.ttft_floor 2"),
            std::string::npos)
      << combo->body;
}

TEST_F(ConfigProcessTest, SighupRotatesTheApiKeys) {
  ASSERT_GT(Serve(), 0);
  EXPECT_EQ(Chat(4)->status, 200);
  Write(demo_->dir / "keys.txt", "key-of-tenant-b-2 b\n");
  ASSERT_EQ(::kill(pid_, SIGHUP), 0);
  ASSERT_TRUE(LogHas("reload (SIGHUP): 0 changes applied"));
  EXPECT_EQ(Chat(4)->status, 401);
  EXPECT_EQ(Chat(4, "key-of-tenant-b-2")->status, 200);
  // A SIGHUP with a broken file keeps the server up, on what it had.
  Write(demo_->dir / "c.toml", "[l1\n");
  ASSERT_EQ(::kill(pid_, SIGHUP), 0);
  ASSERT_TRUE(LogHas("reload (SIGHUP) refused, nothing changed"));
  EXPECT_EQ(Chat(4, "key-of-tenant-b-2")->status, 200);
}

TEST_F(ConfigProcessTest, TheRtSwitcherLevelsChangeLive) {
  ASSERT_GT(Serve(), 0);
  auto state = Ask("GET /dashboard/state HTTP/1.1\r\nHost: t\r\n" + kBearer + "\r\n");
  ASSERT_TRUE(state);
  ASSERT_EQ(state->status, 200) << state->body;
  EXPECT_NE(state->body.find("max_tokens cap none"), std::string::npos) << state->body;
  Write(demo_->dir / "c.toml",
        Config("max_tokens_cap = 64", "")
            .replace(Config().find("1:entropy:0:0:0"), 15, "1:entropy:0:24:0"));
  auto r = Reload();
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Parse(r->body)["applied"][0]["key"], "rt.levels");
  state = Ask("GET /dashboard/state HTTP/1.1\r\nHost: t\r\n" + kBearer + "\r\n");
  ASSERT_TRUE(state);
  EXPECT_NE(state->body.find("max_tokens cap 24"), std::string::npos) << state->body;
}

TEST_F(ConfigProcessTest, TheDashboardIsBehindTheAdminKey) {
  ASSERT_GT(Serve(), 0);
  auto none = Ask("GET /dashboard HTTP/1.1\r\nHost: t\r\n\r\n");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_NE(none->Header("www-authenticate").find("Basic realm="), std::string::npos);
  // A browser's login: any user name, the admin key as the password.
  const std::string basic = "Authorization: Basic YWRtaW46YWRtaW4ta2V5LWZvci10aGUtdGVzdC0wMTIz\r\n";
  auto page = Ask("GET /dashboard HTTP/1.1\r\nHost: t\r\n" + basic + "\r\n");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("<html"), std::string::npos);
  auto state = Ask("GET /dashboard/state HTTP/1.1\r\nHost: t\r\n\r\n");
  ASSERT_TRUE(state);
  EXPECT_EQ(state->status, 401);
  // Without an admin key but with tenants, the dashboard is refused outright.
  testing::Kill(pid_);
  Write(demo_->dir / "c.toml", "[auth]\napi_keys_file = \"" + InDir("keys.txt") + "\"\n");
  ASSERT_GT(Serve(), 0);
  auto refused = Ask("GET /dashboard HTTP/1.1\r\nHost: t\r\n" + basic + "\r\n");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403);
  auto reload = Reload();
  ASSERT_TRUE(reload);
  EXPECT_EQ(reload->status, 403);
  EXPECT_NE(reload->body.find("--admin-key-file"), std::string::npos);
}

}  // namespace
}  // namespace strata
