// Durable sessions through `strata serve --sessions rocksdb:DIR` on a demo
// model: a client sends only its new turn and the model sees the whole
// conversation; the whole history is accepted and checked; a diverging
// history, a stale If-Match and a full session are refused clearly; the
// read, list and delete API is tenant-scoped; both APIs share a session;
// and conversations survive kill -9 and a restart, 50 times under
// concurrent clients.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "testing/raw_http.h"
#include "testing/shared_data.h"
#include "testing/strata_process.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using testing::HttpRequest;
using testing::RawClient;
using testing::RawResponse;
using testing::ReadAll;

constexpr const char* kKeyA = "key-of-tenant-a-1";
constexpr const char* kKeyB = "key-of-tenant-b-1";

testing::DemoModelDir* demo_ = nullptr;

class SessionProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    demo_ = new testing::DemoModelDir("strata_sessions",
                                      "n_embd=64,n_layers=2,n_heads=4,n_ff=128,n_ctx=2048");
    ASSERT_FALSE(demo_->model.empty()) << demo_->MkmodelLog();
    std::ofstream(demo_->dir / "keys.txt") << kKeyA << " a\n" << kKeyB << " b\n";
  }
  static void TearDownTestSuite() { delete demo_; }
  void SetUp() override { Serve(); }
  void TearDown() override { testing::Kill(pid_); }

  void Serve(std::vector<std::string> extra = {}) {
    static int n = 0;
    log_ = (demo_->dir / ("serve_" + std::to_string(++n) + ".log")).string();
    std::vector<std::string> args = {"serve",
                                     "-m",
                                     demo_->model,
                                     "--port",
                                     "0",
                                     "-t",
                                     "1",
                                     "--api-keys",
                                     (demo_->dir / "keys.txt").string(),
                                     "--sessions",
                                     "rocksdb:" + (demo_->dir / "sessions").string(),
                                     "--l1-bytes",
                                     "0",
                                     "--log-level",
                                     "info"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = testing::Spawn(args, log_);
    port_ = testing::WaitReady(pid_, log_);
    ASSERT_GT(port_, 0) << "the server did not start:\n" << ReadAll(log_);
  }

  RawResponse Ask(const std::string& bytes) {
    RawClient c(port_);
    EXPECT_TRUE(c.connected() && c.Send(bytes));
    auto r = c.ReadResponse(std::chrono::seconds(60));
    EXPECT_TRUE(r.has_value()) << "no response";
    return r.value_or(RawResponse{});
  }
  RawResponse Chat(const std::string& session, const Json& messages, const std::string& key = kKeyA,
                   const std::string& headers = "") {
    const Json body = {{"model", "demo"},
                       {"messages", messages},
                       {"max_tokens", 4},
                       {"temperature", 0},
                       {"session_id", session}};
    return Ask(HttpRequest("POST", "/v1/chat/completions", body.dump(),
                           "Authorization: Bearer " + key + "\r\n" + headers));
  }
  RawResponse Get(const std::string& path, const std::string& key = kKeyA,
                  const std::string& method = "GET") {
    return Ask(HttpRequest(method, path, "", "Authorization: Bearer " + key + "\r\n"));
  }
  static Json User(const std::string& text) { return {{"role", "user"}, {"content", text}}; }
  static int PromptTokens(const RawResponse& r) {
    return Json::parse(r.body)["usage"]["prompt_tokens"].get<int>();
  }
  static std::string Answer(const RawResponse& r) {
    return Json::parse(r.body)["choices"][0]["message"]["content"].get<std::string>();
  }
  // A session id no other test uses, so tests do not depend on each other.
  static std::string Id(const std::string& name) { return name + "-" + std::to_string(::getpid()); }

  pid_t pid_ = -1;
  int port_ = -1;
  std::string log_;
};

TEST_F(SessionProcessTest, ANewTurnIsAnsweredOnTheWholeConversation) {
  const std::string id = Id("turns");
  const Json system = {{"role", "system"}, {"content", "be brief"}};
  RawResponse first = Chat(id, Json::array({system, User("hello there")}));
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.Header("x-strata-session-id"), id);
  // Only the new user message (the system prompt again is allowed).
  RawResponse second = Chat(id, Json::array({system, User("and then?")}));
  ASSERT_EQ(second.status, 200) << second.body;
  // The model saw the first turn and its answer too.
  RawResponse alone = Chat(Id("alone"), Json::array({system, User("and then?")}));
  ASSERT_EQ(alone.status, 200);
  EXPECT_GT(PromptTokens(second), PromptTokens(alone) + 3);

  RawResponse s = Get("/v1/sessions/" + id);
  ASSERT_EQ(s.status, 200) << s.body;
  const Json j = Json::parse(s.body);
  EXPECT_EQ(j["id"], id);
  EXPECT_EQ(j["turns"], 2);
  EXPECT_EQ(s.Header("etag"), "\"2\"");
  ASSERT_EQ(j["messages"].size(), 5u);  // system, user, assistant, user, assistant
  EXPECT_EQ(j["messages"][0]["content"], "be brief");
  EXPECT_EQ(j["messages"][2]["role"], "assistant");
  EXPECT_EQ(j["messages"][2]["content"], Answer(first));
  EXPECT_EQ(j["messages"][3]["content"], "and then?");
  EXPECT_EQ(j["messages"][4]["content"], Answer(second));

  // The whole history, unchanged, plus a new message: accepted, and the
  // same prompt as sending the new message alone.
  Json history = j["messages"];
  history.push_back(User("more"));
  RawResponse whole = Chat(id, history);
  ASSERT_EQ(whole.status, 200) << whole.body;
  RawResponse again = Get("/v1/sessions/" + id);
  EXPECT_EQ(Json::parse(again.body)["turns"], 3);
  EXPECT_EQ(Json::parse(again.body)["messages"].size(), 7u);
}

TEST_F(SessionProcessTest, ADivergingHistoryIsA409NamingTheMessage) {
  const std::string id = Id("diverge");
  ASSERT_EQ(Chat(id, Json::array({User("one")})).status, 200);
  Json edited = Json::array(
      {User("one"), {{"role", "assistant"}, {"content", "not what it said"}}, User("two")});
  RawResponse r = Chat(id, edited);
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(Json::parse(r.body)["error"]["code"], "session_conflict");
  EXPECT_NE(r.body.find("messages[1]"), std::string::npos) << r.body;
  // Another system prompt is a conflict too.
  RawResponse sys = Chat(id, Json::array({{{"role", "system"}, {"content", "x"}}, User("two")}));
  EXPECT_EQ(sys.status, 409) << sys.body;
  EXPECT_EQ(Json::parse(Get("/v1/sessions/" + id).body)["turns"], 1);
}

TEST_F(SessionProcessTest, IfMatchIsAnOptimisticPrecondition) {
  const std::string id = Id("ifmatch");
  ASSERT_EQ(Chat(id, Json::array({User("one")})).status, 200);
  RawResponse stale = Chat(id, Json::array({User("two")}), kKeyA, "If-Match: \"0\"\r\n");
  EXPECT_EQ(stale.status, 409) << stale.body;
  RawResponse fresh = Chat(id, Json::array({User("two")}), kKeyA, "If-Match: \"1\"\r\n");
  EXPECT_EQ(fresh.status, 200) << fresh.body;
  RawResponse bad = Chat(id, Json::array({User("three")}), kKeyA, "If-Match: soon\r\n");
  EXPECT_EQ(bad.status, 400) << bad.body;
}

TEST_F(SessionProcessTest, ARetriedRequestIsStoredOnceAndAReusedIdIsNot) {
  const std::string id = Id("retry");
  const std::string same = "X-Request-ID: req-fixed-1\r\n";
  ASSERT_EQ(Chat(id, Json::array({User("one")}), kKeyA, same).status, 200);
  // The same request again (a client's retry): its turn is not stored twice.
  ASSERT_EQ(Chat(id, Json::array({User("one")}), kKeyA, same).status, 200);
  EXPECT_EQ(Json::parse(Get("/v1/sessions/" + id).body)["turns"], 1);
  // Another turn under the same request id is stored.
  ASSERT_EQ(Chat(id, Json::array({User("two")}), kKeyA, same).status, 200);
  const Json s = Json::parse(Get("/v1/sessions/" + id).body);
  EXPECT_EQ(s["turns"], 2);
  EXPECT_EQ(s["messages"][2]["content"], "two");
}

TEST_F(SessionProcessTest, SessionsAreTheTenantsOwn) {
  const std::string id = Id("mine");
  ASSERT_EQ(Chat(id, Json::array({User("secret plan")})).status, 200);
  EXPECT_EQ(Get("/v1/sessions/" + id, kKeyB).status, 404);
  EXPECT_EQ(Get("/v1/sessions/" + id, kKeyB, "DELETE").status, 404);
  const Json listed = Json::parse(Get("/v1/sessions?limit=100", kKeyB).body);
  for (const Json& s : listed["data"]) EXPECT_NE(s["id"], id);
  // B's turn under the same id starts B's own session.
  ASSERT_EQ(Chat(id, Json::array({User("other")}), kKeyB).status, 200);
  EXPECT_EQ(Json::parse(Get("/v1/sessions/" + id, kKeyB).body)["messages"][0]["content"], "other");
  EXPECT_EQ(Json::parse(Get("/v1/sessions/" + id).body)["messages"][0]["content"], "secret plan");
  EXPECT_EQ(Get("/v1/sessions/" + id).status, 200);
  // No key at all: 401.
  EXPECT_EQ(Ask(HttpRequest("GET", "/v1/sessions/" + id, "")).status, 401);
}

TEST_F(SessionProcessTest, ListPagesAndDeleteRemoves) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Chat(Id("page") + "-" + std::to_string(i), Json::array({User("hi")})).status, 200);
  }
  std::vector<std::string> ids;
  std::string after;
  for (int pages = 0; pages < 50; ++pages) {
    RawResponse r = Get("/v1/sessions?limit=2" + (after.empty() ? "" : "&after=" + after));
    ASSERT_EQ(r.status, 200) << r.body;
    const Json j = Json::parse(r.body);
    for (const Json& s : j["data"]) ids.push_back(s["id"]);
    if (!j["has_more"].get<bool>()) break;
    after = j["last_id"];
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(std::find(ids.begin(), ids.end(), Id("page") + "-" + std::to_string(i)), ids.end());
  }
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(Get("/v1/sessions?limit=0").status, 400);
  EXPECT_EQ(Get("/v1/sessions?after=bad%20id").status, 400);

  const std::string gone = Id("page") + "-0";
  RawResponse del = Get("/v1/sessions/" + gone, kKeyA, "DELETE");
  ASSERT_EQ(del.status, 200) << del.body;
  EXPECT_EQ(Json::parse(del.body)["deleted"], true);
  EXPECT_EQ(Get("/v1/sessions/" + gone).status, 404);
  EXPECT_EQ(Get("/v1/sessions/" + gone, kKeyA, "DELETE").status, 404);
  EXPECT_EQ(Get("/v1/sessions/bad%20id").status, 400);
  EXPECT_EQ(Get("/v1/sessions/" + gone, kKeyA, "PUT").status, 405);
}

TEST_F(SessionProcessTest, TheAnthropicApiSharesTheSession) {
  const std::string id = Id("both");
  ASSERT_EQ(Chat(id, Json::array({User("from openai")})).status, 200);
  const Json body = {{"model", "demo"},
                     {"max_tokens", 4},
                     {"temperature", 0},
                     {"session_id", id},
                     {"messages", Json::array({User("from anthropic")})}};
  RawResponse r = Ask(
      HttpRequest("POST", "/v1/messages", body.dump(),
                  std::string("x-api-key: ") + kKeyA + "\r\nanthropic-version: 2023-06-01\r\n"));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json s = Json::parse(Get("/v1/sessions/" + id).body);
  EXPECT_EQ(s["turns"], 2);
  EXPECT_EQ(s["messages"][2]["content"], "from anthropic");
}

TEST_F(SessionProcessTest, AConversationSurvivesKill9AndARestart) {
  const std::string id = Id("durable");
  RawResponse first = Chat(id, Json::array({User("remember me")}));
  ASSERT_EQ(first.status, 200);
  testing::Kill(pid_);  // SIGKILL: no shutdown, nothing flushed on the way out
  Serve();
  const Json s = Json::parse(Get("/v1/sessions/" + id).body);
  ASSERT_EQ(s["turns"], 1) << s.dump();
  EXPECT_EQ(s["messages"][1]["content"], Answer(first));
  EXPECT_EQ(Chat(id, Json::array({User("still there?")})).status, 200);
}

TEST_F(SessionProcessTest, AFullSessionSaysWhichLimit) {
  testing::Kill(pid_);
  Serve({"--session-max-turns", "1"});
  const std::string id = Id("full");
  ASSERT_EQ(Chat(id, Json::array({User("one")})).status, 200);
  RawResponse r = Chat(id, Json::array({User("two")}));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Json::parse(r.body)["error"]["code"], "session_limit");
  EXPECT_NE(r.body.find("1 turns"), std::string::npos) << r.body;
}

TEST_F(SessionProcessTest, WithoutSessionsTheApiSaysHowToTurnThemOn) {
  testing::Kill(pid_);
  pid_ = testing::Spawn({"serve", "-m", demo_->model, "--port", "0", "-t", "1", "--api-keys",
                         (demo_->dir / "keys.txt").string()},
                        log_ + ".off");
  port_ = testing::WaitReady(pid_, log_ + ".off");
  ASSERT_GT(port_, 0);
  RawResponse r = Get("/v1/sessions/x");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("--sessions"), std::string::npos) << r.body;
  // A session_id still only labels the request.
  EXPECT_EQ(Chat("label-only", Json::array({User("hi")})).status, 200);
}

// The crash test of the request path: three clients append turns to their
// own sessions while the server is killed with SIGKILL at a random moment
// (after a random number, 1 to 8, of turns answered in that cycle, then a
// random 0-30 ms: as random on a slow sanitizer build as on a fast one),
// 50 times over one store. After each restart every turn a client saw
// answered (200) is in its session, once, in order; a turn cut off by the
// kill may be there or not, but never twice. The time from spawning the
// server to its "ready" line is printed (the cold-start budget is 1.2 s:
// docs/benchmarks.md records it; a test does not time it).
TEST_F(SessionProcessTest, Kill9UnderConcurrentClientsLosesNoAcknowledgedTurn) {
#if defined(__SANITIZE_ADDRESS__)
  // Under ASan each start takes about 0.6 s: 10 cycles look for memory
  // errors in recovery; the 50 cycles run on the Release build (scripts/test
  // runs this test in both).
  constexpr int kCycles = 10;
#else
  constexpr int kCycles = 50;
#endif
  constexpr int kClients = 3;
  // One conversation of one client: its id, and the turns answered 200.
  struct Conversation {
    std::string id;
    std::vector<int> acked;
  };
  // A client appends turns 0, 1, 2, ... to its conversation, and starts a
  // new one when the model's context is full (400).
  struct Client {
    std::vector<Conversation> conversations;
    int next = 0;  // the number of its next turn
  };
  std::vector<Client> clients(kClients);
  for (int c = 0; c < kClients; ++c) {
    clients[c].conversations.push_back({Id("crash-" + std::to_string(c) + "-0"), {}});
  }
  std::mt19937 rng(20261205);
  std::vector<double> ready_ms;
  std::atomic<int> answered{0};  // turns answered 200, all clients, all cycles
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    std::atomic<bool> stop{false};
    const int kill_after = answered.load() + std::uniform_int_distribution<int>(1, 8)(rng);
    std::vector<std::thread> threads;
    for (int c = 0; c < kClients; ++c) {
      threads.emplace_back([&stop, &answered, &cl = clients[c], c, port = port_] {
        while (!stop.load()) {
          Conversation& conv = cl.conversations.back();
          const int n = cl.next++;
          const Json body = {
              {"model", "demo"},
              {"messages", Json::array({User(conv.id + " turn " + std::to_string(n))})},
              {"max_tokens", 2},
              {"temperature", 0},
              {"session_id", conv.id}};
          RawClient client(port);
          if (!client.connected() ||
              !client.Send(HttpRequest("POST", "/v1/chat/completions", body.dump(),
                                       std::string("Authorization: Bearer ") + kKeyA + "\r\n"))) {
            return;
          }
          auto r = client.ReadResponse(std::chrono::seconds(30));
          if (!r) return;  // the server died under it
          if (r->status == 200) {
            conv.acked.push_back(n);
            ++answered;
          } else if (r->status == 400 &&
                     r->body.find("context length exceeded") != std::string::npos) {
            cl.conversations.push_back(
                {Id("crash-" + std::to_string(c) + "-" + std::to_string(cl.conversations.size())),
                 {}});
          } else {
            ADD_FAILURE() << "turn " << n << " of " << conv.id << ": " << r->status << " "
                          << r->body;
            return;
          }
        }
      });
    }
    // Waiting for other processes to answer: a deadline, not a timing
    // assertion (a cycle whose turns all fail is reported below).
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (answered.load() < kill_after && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 30)(rng)));
    testing::Kill(pid_);
    stop = true;
    for (std::thread& t : threads) t.join();

    const auto t0 = std::chrono::steady_clock::now();
    Serve();
    ready_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    for (const Client& cl : clients) {
      for (const Conversation& conv : cl.conversations) {
        if (conv.acked.empty()) continue;
        RawResponse got = Get("/v1/sessions/" + conv.id);
        ASSERT_EQ(got.status, 200) << "cycle " << cycle << ": " << got.body;
        const Json s = Json::parse(got.body);
        std::vector<int> stored;
        for (const Json& m : s["messages"]) {
          if (m["role"] != "user") continue;
          const std::string text = m["content"];
          stored.push_back(std::stoi(text.substr(text.rfind(' ') + 1)));
        }
        ASSERT_TRUE(std::is_sorted(stored.begin(), stored.end()) &&
                    std::adjacent_find(stored.begin(), stored.end()) == stored.end())
            << "cycle " << cycle << ": a turn out of order or stored twice in " << conv.id;
        for (int n : conv.acked) {
          ASSERT_TRUE(std::binary_search(stored.begin(), stored.end(), n))
              << "cycle " << cycle << ": acknowledged turn " << n << " of " << conv.id
              << " is lost";
        }
        EXPECT_EQ(s["turns"].get<size_t>(), stored.size());
      }
    }
  }
  size_t acked = 0;
  for (const Client& cl : clients) {
    for (const Conversation& conv : cl.conversations) acked += conv.acked.size();
  }
  std::sort(ready_ms.begin(), ready_ms.end());
  EXPECT_GE(acked, static_cast<size_t>(kCycles)) << "cycles ended with no turn answered";
  std::printf(
      "kill -9 cycles %d, acknowledged turns %zu, spawn to ready: median %.0f ms, max %.0f ms\n",
      kCycles, acked, ready_ms[ready_ms.size() / 2], ready_ms.back());
}

// With a chat template whose generation prompt ends where a stored answer
// starts (ChatML, from the Qwen2 vocabulary in ../shared), the next turn's
// prompt starts with the very tokens the engine saw and generated, stored
// with the turn: the KV blocks of the answer itself are found in L2, though
// its text would tokenize differently (a random-weight model's answers
// always do).
TEST(SessionTokens, TheNextTurnReusesTheKvBlocksOfTheAnswer) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-qwen2.gguf");
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("strata_session_tokens_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model =
      testing::MakeDemoModel(dir.string(), "n_embd=64,n_layers=2,n_heads=4,n_ff=128,n_ctx=2048",
                             {"--vocab", testing::SharedPath("models/vocab/ggml-vocab-qwen2.gguf"),
                              "--byte-tokens-as-text"});
  ASSERT_FALSE(model.empty()) << ReadAll((dir / "mkmodel.log").string());
  const std::string log = (dir / "serve.log").string();
  const pid_t pid = testing::Spawn({"serve", "-m", model, "--port", "0", "-t", "1", "--sessions",
                                    "rocksdb:" + (dir / "sessions").string(), "--l1-bytes", "0"},
                                   log);
  const int port = testing::WaitReady(pid, log);
  ASSERT_GT(port, 0) << ReadAll(log);
  const auto turn = [&](const std::string& text) {
    const Json body = {{"model", "demo"},
                       {"messages", Json::array({{{"role", "user"}, {"content", text}}})},
                       {"max_tokens", 40},
                       {"temperature", 0},
                       {"session_id", "tokens"}};
    RawClient c(port);
    EXPECT_TRUE(c.Send(HttpRequest("POST", "/v1/chat/completions", body.dump())));
    auto r = c.ReadResponse(std::chrono::seconds(60));
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    return r ? Json::parse(r->body)["usage"] : Json();
  };
  const Json first = turn("Tell me a story about the cat");
  const Json second = turn("And then?");
  const int p1 = first["prompt_tokens"], c1 = first["completion_tokens"];
  const int cached = second["prompt_tokens_details"]["cached_tokens"];
  // The engine computed KV for the prompt and every generated token but the
  // last; L2 keeps whole blocks of 16.
  EXPECT_GT(cached, p1) << "the answer's KV blocks were not reused";
  EXPECT_GE(cached, (p1 + c1 - 1) / 16 * 16);
  testing::Kill(pid);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace strata
