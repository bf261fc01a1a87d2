// The canary rollout end to end, as processes: a front (`strata serve
// --backend` before a real strata upstream) rolls out a candidate:
//  - a second strata upstream of the same model (a good canary: promoted);
//  - a strata upstream of another model under the same id (wrong answers:
//    rolled back on quality), and the rollback survives a restart;
//  - the fault upstream of this test slowed down (rolled back on its time
//    to first token).
// The binary is $STRATA_BIN (ctest sets it); the models are written by
// `strata mkmodel`, so nothing here needs ../shared.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "testing/fault_upstream.h"
#include "testing/raw_http.h"
#include "testing/strata_process.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

struct Server {
  pid_t pid = -1;
  int port = -1;
  std::string log;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

class CanaryProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("strata_canary_process_" + std::to_string(::getpid())));
    std::filesystem::create_directories(*dir_ / "other");
    const std::string dims = "n_embd=64,n_layers=2,n_heads=4,n_ff=128,n_ctx=1024,tied=0";
    model_ = new std::string(testing::MakeDemoModel(dir_->string(), dims, {"--seed", "1"}));
    other_ =
        new std::string(testing::MakeDemoModel((*dir_ / "other").string(), dims, {"--seed", "2"}));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete model_;
    delete other_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_FALSE(model_->empty()) << testing::ReadAll((*dir_ / "mkmodel.log").string());
    ASSERT_FALSE(other_->empty());
  }
  void TearDown() override {
    for (pid_t pid : pids_) testing::Kill(pid);
  }

  Server Serve(std::vector<std::string> args, const std::string& name) {
    static int n = 0;
    Server s;
    s.log = (*dir_ / (name + "_" + std::to_string(++n) + ".log")).string();
    std::vector<std::string> full = {"serve", "--port", "0", "--log-level", "info"};
    full.insert(full.end(), args.begin(), args.end());
    s.pid = testing::Spawn(full, s.log);
    s.port = testing::WaitReady(s.pid, s.log);
    pids_.push_back(s.pid);
    EXPECT_GT(s.port, 0) << name << " did not start:\n" << testing::ReadAll(s.log);
    return s;
  }
  // A strata upstream serving `model` as "demo", every answer generated.
  Server Upstream(const std::string& model) {
    return Serve({"-m", model, "--alias", "demo", "--l1-bytes", "0"}, "upstream");
  }
  // A front serving "demo" from `baseline`, rolling out `candidate` in two
  // one-second steps (25 %, 100 %) judged from 5 requests.
  // The canary flags every test uses: `candidate` in `steps` of one second,
  // each judged from 5 requests, no response cache, the admin key.
  std::vector<std::string> CanaryArgs(const std::string& candidate, const std::string& steps) {
    return {"--l1-bytes",           "0",           "--canary",        candidate,
            "--canary-steps",       steps,         "--canary-step-s", "1",
            "--canary-min-samples", "5",           "--canary-state",  state_file(),
            "--admin-key-file",     AdminKeyFile()};
  }
  // A front serving "demo" from `baseline`, rolling out `candidate` in two
  // steps (25 %, 100 %).
  Server Front(const std::string& baseline, const std::string& candidate,
               std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--backend", "openai:" + baseline, "--backend-name", "demo"};
    const std::vector<std::string> canary = CanaryArgs(candidate, "25,100");
    args.insert(args.end(), canary.begin(), canary.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return Serve(args, "front");
  }
  std::string state_file() const {
    return (*dir_ / (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
                     ".json"))
        .string();
  }
  static std::string AdminKeyFile() {
    const std::string path = (*dir_ / "admin.key").string();
    if (!std::filesystem::exists(path)) {
      FILE* f = std::fopen(path.c_str(), "w");
      std::fputs("canary-admin-key-0123456789\n", f);
      std::fclose(f);
    }
    return path;
  }

  // A greedy chat request; its HTTP status.
  static int Chat(const Server& s, int i) {
    const Json body = {
        {"model", "demo"},
        {"max_tokens", 8},
        {"temperature", 0},
        {"messages", {{{"role", "user"}, {"content", "question " + std::to_string(i)}}}}};
    testing::RawClient c(s.port);
    if (!c.Send(testing::HttpRequest("POST", "/v1/chat/completions", body.dump()))) return 0;
    auto r = c.ReadResponse(30s);
    return r ? r->status : 0;
  }
  static Json CanaryState(const Server& s) {
    testing::RawClient c(s.port);
    if (!c.Send("GET /admin/canary HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
                "canary-admin-key-0123456789\r\n\r\n")) {
      return nullptr;
    }
    auto r = c.ReadResponse(10s);
    if (!r || r->status != 200) return nullptr;
    return Json::parse(r->body, nullptr, false);
  }
  // Sends requests until the canary leaves the ramp or `limit` passes; the
  // requests that failed.
  static int DriveUntilDecided(const Server& s, std::chrono::seconds limit, int* sent) {
    const auto end = std::chrono::steady_clock::now() + limit;
    int failed = 0;
    for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
      if (Chat(s, i) != 200) failed++;
      ++*sent;
      if (i % 5 == 4) {
        Json st = CanaryState(s);
        if (st.is_object() && st["phase"] != "ramping") break;
      }
    }
    return failed;
  }

  static std::filesystem::path* dir_;
  static std::string* model_;
  static std::string* other_;
  std::vector<pid_t> pids_;
};
std::filesystem::path* CanaryProcessTest::dir_ = nullptr;
std::string* CanaryProcessTest::model_ = nullptr;
std::string* CanaryProcessTest::other_ = nullptr;

TEST_F(CanaryProcessTest, AGoodCanaryReachesEveryRequest) {
  Server base = Upstream(*model_);
  Server cand = Upstream(*model_);
  // A loose TTFT gate: five samples of a loaded machine's tail must not
  // roll back a candidate that is as fast as its baseline.
  Server front = Front(base.url(), "openai:" + cand.url(), {"--canary-ttft-ratio", "4"});
  Json st = CanaryState(front);
  ASSERT_TRUE(st.is_object());
  EXPECT_EQ(st["phase"], "ramping");
  EXPECT_EQ(st["percent"], 25);
  int sent = 0;
  EXPECT_EQ(DriveUntilDecided(front, 60s, &sent), 0);
  st = CanaryState(front);
  ASSERT_EQ(st["phase"], "promoted") << st.dump() << "\n" << testing::ReadAll(front.log);
  EXPECT_EQ(st["percent"], 100);
  const Json& events = st["events"];
  ASSERT_EQ(events.size(), 2u) << events.dump();
  EXPECT_EQ(events[0]["what"], "step");
  EXPECT_EQ(events[1]["what"], "promoted");
  // Mirrored answers were compared, and they all agreed.
  bool compared = false;
  for (const Json& e : events) {
    if (e["detail"].get<std::string>().find(" of ") != std::string::npos) compared = true;
  }
  EXPECT_TRUE(compared);
  // Once promoted, the candidate answers everything.
  const std::string log = testing::ReadAll(front.log);
  EXPECT_NE(log.find("canary: promoted"), std::string::npos) << log;
}

TEST_F(CanaryProcessTest, AWrongCanaryIsRolledBackOnQualityAndStaysRolledBackAfterARestart) {
  Server base = Upstream(*model_);
  Server cand = Upstream(*other_);  // another model under the same id: other answers
  Server front = Front(base.url(), "openai:" + cand.url(), {"--canary-mirror", "1"});
  int sent = 0;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(DriveUntilDecided(front, 60s, &sent), 0) << "clients never see the canary's decline";
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Json st = CanaryState(front);
  ASSERT_EQ(st["phase"], "rolled_back") << st.dump() << "\n" << testing::ReadAll(front.log);
  EXPECT_EQ(st["percent"], 0);
  EXPECT_EQ(st["events"].back()["reason"], "quality") << st.dump();
  // Decided from its first 10 mirrored pairs, at the first tick after them:
  // well within seconds (how many requests that is depends on how fast
  // they are answered; at most 4 mirrored runs are in flight).
  EXPECT_LE(seconds, 10.0) << sent << " requests";
  std::printf("wrong canary: rolled back after %d requests, %.2f s after traffic began\n", sent,
              seconds);
  // Usually at 25 %; on a loaded machine the step can pass on its 5
  // requests before 10 mirrored pairs are in, and the rollback comes at 100 %.
  EXPECT_TRUE(st["events"].back()["from"] == 25 || st["events"].back()["from"] == 100) << st.dump();
  // Another instance started on the same state file does not ramp it again.
  testing::Kill(front.pid);
  pids_.erase(std::remove(pids_.begin(), pids_.end(), front.pid), pids_.end());
  Server again = Front(base.url(), "openai:" + cand.url(), {"--canary-mirror", "1"});
  Json st2 = CanaryState(again);
  ASSERT_TRUE(st2.is_object());
  EXPECT_EQ(st2["phase"], "rolled_back");
  EXPECT_EQ(st2["percent"], 0);
  EXPECT_NE(testing::ReadAll(again.log).find("was rolled back"), std::string::npos);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Chat(again, i), 200);
}

TEST_F(CanaryProcessTest, ASlowCanaryIsRolledBackOnItsTimeToFirstToken) {
  testing::FaultUpstream slow;
  ASSERT_TRUE(slow.Start().ok());
  // The baseline answers in a few ms (a few hundred on a loaded machine):
  // 1.5 s is over 1.5 × its P99 + 100 ms and over the 800 ms SLO either way.
  slow.SetLatency(1500ms);
  Server base = Upstream(*model_);
  Server front = Front(base.url(), "openai:" + slow.url(), {"--canary-mirror", "0"});
  int sent = 0;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(DriveUntilDecided(front, 60s, &sent), 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Json st = CanaryState(front);
  ASSERT_EQ(st["phase"], "rolled_back") << st.dump() << "\n" << testing::ReadAll(front.log);
  EXPECT_EQ(st["events"].back()["reason"], "ttft") << st.dump();
  // Five slow requests decide it: about 20 requests at 25 %, each slow one
  // 1.5 s, and a tick of 0.25 s.
  EXPECT_LE(seconds, 30.0);
  EXPECT_LE(slow.posts(), 12) << "the candidate stopped getting requests at the rollback";
  std::printf(
      "slow canary: rolled back after %d requests (%d of them on the candidate), %.2f s "
      "after traffic began\n",
      sent, slow.posts(), seconds);
  const int after = slow.posts();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Chat(front, 1000 + i), 200);
  EXPECT_EQ(slow.posts(), after);
}

TEST_F(CanaryProcessTest, ACanaryFileNamesItsBackend) {
  Server base = Upstream(*model_);
  Server cand = Upstream(*model_);
  const std::string file = (*dir_ / "candidate.toml").string();
  {
    FILE* f = std::fopen(file.c_str(), "w");
    std::fprintf(f, "[[backend]]\nkind = \"openai\"\nurls = [\"%s\"]\nmodel = \"demo\"\n",
                 cand.url().c_str());
    std::fclose(f);
  }
  Server front = Front(base.url(), file, {"--canary-ttft-ratio", "4"});
  int sent = 0;
  EXPECT_EQ(DriveUntilDecided(front, 60s, &sent), 0);
  EXPECT_EQ(CanaryState(front)["phase"], "promoted") << testing::ReadAll(front.log);
  // A canary file that sets anything else is refused, naming the key.
  {
    FILE* f = std::fopen(file.c_str(), "w");
    std::fprintf(f, "[l1]\nttl = 5\n");
    std::fclose(f);
  }
  const std::string log = (*dir_ / "bad_file.log").string();
  const pid_t pid = testing::Spawn({"serve", "--port", "0", "--backend", "openai:" + base.url(),
                                    "--backend-name", "demo", "--canary", file},
                                   log);
  EXPECT_NE(testing::WaitExit(pid, 30s), 0);
  EXPECT_NE(testing::ReadAll(log).find("not l1.ttl"), std::string::npos) << testing::ReadAll(log);
}

TEST_F(CanaryProcessTest, AnotherLocalModelCanBeTheCandidate) {
  // Two local models under one budget; the second is the first's candidate.
  std::vector<std::string> args = {
      "-m", "demo=" + *model_, "-m", "next=" + *model_, "--canary-ttft-ratio", "4"};
  const std::vector<std::string> canary = CanaryArgs("model:next", "50,100");
  args.insert(args.end(), canary.begin(), canary.end());
  Server front = Serve(args, "front");
  int sent = 0;
  EXPECT_EQ(DriveUntilDecided(front, 90s, &sent), 0);
  const Json st = CanaryState(front);
  EXPECT_EQ(st["phase"], "promoted") << st.dump() << "\n" << testing::ReadAll(front.log);
}

TEST_F(CanaryProcessTest, BadCanaryFlagsAreUsageErrors) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--canary", "openai:http://127.0.0.1:1", "--canary-steps", "5,50"},
        std::vector<std::string>{"--canary", "model:nope"},
        std::vector<std::string>{"--canary", "missing.toml"},
        std::vector<std::string>{"--canary-for", "demo"},
        std::vector<std::string>{"--canary", "openai:http://127.0.0.1:1", "--canary-mirror",
                                 "2"}}) {
    std::vector<std::string> full = {"serve", "--port", "0", "-m", *model_, "--alias", "demo"};
    full.insert(full.end(), args.begin(), args.end());
    const std::string log = (*dir_ / "bad.log").string();
    const pid_t pid = testing::Spawn(full, log);
    const int rc = testing::WaitExit(pid, 30s);
    EXPECT_NE(rc, 0) << args[1];
    EXPECT_NE(testing::ReadAll(log).find("canary"), std::string::npos) << testing::ReadAll(log);
  }
}

}  // namespace
}  // namespace strata
