// The remote backends end to end, as processes: `strata serve --backend`
// (the front) in front of real `strata serve` upstreams for every answer
// that should work, and in front of an upstream inside this test process
// (net::HttpServer) that fails on cue for every fault: error statuses a
// number of times before a valid stream, a stream that stalls, a
// connection cut mid-stream, each request counted. The binary is
// $STRATA_BIN (ctest sets it); the model is written by `strata mkmodel`, so
// nothing here needs ../shared.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "net/sse.h"
#include "testing/fault_upstream.h"
#include "testing/raw_http.h"
#include "testing/strata_process.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using testing::FaultUpstream;
using testing::RawClient;
using testing::RawResponse;
using testing::ReadAll;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------
// Clients.

struct Proc {
  pid_t pid = -1;
  int port = -1;
  std::string log;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

std::string Request(const std::string& path, const std::string& body,
                    const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// One request on a fresh connection and its whole response (a stream's
// body de-chunked), or nullopt on a close or after `timeout`.
std::optional<RawResponse> Post(int port, const std::string& path, const Json& body,
                                std::chrono::milliseconds timeout = 30s) {
  RawClient c(port);
  if (!c.connected() || !c.Send(Request(path, body.dump()))) return std::nullopt;
  return c.ReadResponse(timeout);
}

Json Parse(const std::string& text) {
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// The value of the sample `name{labels}` on `port`'s /metrics, NaN if absent.
double Metric(int port, const std::string& name, const std::string& labels) {
  RawClient c(port);
  if (!c.Send("GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")) return NAN;
  auto r = c.ReadResponse();
  if (!r) return NAN;
  const std::string key = "\n" + name + "{" + labels + "} ";
  const size_t at = r->body.find(key);
  if (at == std::string::npos) return NAN;
  return std::atof(r->body.c_str() + at + key.size());
}
std::string ReplicaLabels(const std::string& url) {
  return R"(backend="front",replica=")" + url + "\"";
}

// What a client reads from a stream of either API.
struct Streamed {
  std::string text;
  std::string finish;  // finish_reason / stop_reason
  std::string stop_sequence;
  Json usage;
  Json start_usage;          // Anthropic: message_start's usage
  Json error;                // the error event's body, null when none
  bool done = false;         // OpenAI: "[DONE]"
  bool stopped = false;      // Anthropic: message_stop
  bool after_error = false;  // any event after the error
};

Streamed ReadStream(const std::string& body, bool anthropic) {
  net::SseParser parser;
  std::vector<net::SseEvent> events;
  Streamed s;
  EXPECT_TRUE(parser.Feed(body, &events).ok()) << body;
  for (const net::SseEvent& e : events) {
    if (!s.error.is_null()) s.after_error = true;
    if (!anthropic && e.data == "[DONE]") {
      s.done = true;
      continue;
    }
    Json j = Parse(e.data);
    if (anthropic) {
      if (e.event == "error") s.error = j;
      if (e.event == "message_stop") s.stopped = true;
      if (e.event == "message_start") s.start_usage = j["message"]["usage"];
      if (e.event == "content_block_delta") s.text += j["delta"].value("text", "");
      if (e.event == "message_delta") {
        s.finish = j["delta"].value("stop_reason", "");
        if (j["delta"]["stop_sequence"].is_string()) {
          s.stop_sequence = j["delta"]["stop_sequence"];
        }
        s.usage = j["usage"];
      }
      continue;
    }
    if (j.contains("error")) {
      s.error = j;
      continue;
    }
    if (j.contains("usage") && j["usage"].is_object()) s.usage = j["usage"];
    if (!j.contains("choices") || j["choices"].empty()) continue;
    Json& c = j["choices"][0];
    if (c.contains("delta")) {
      s.text += c["delta"].value("content", "");
    } else {
      s.text += c.value("text", "");
    }
    if (c["finish_reason"].is_string()) s.finish = c["finish_reason"];
  }
  return s;
}

// A free loopback port nobody listens on (bound, then closed).
int UnusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Polls `fn` every 50 ms until it is true or `timeout` passes.
template <typename F>
bool Eventually(F fn, std::chrono::milliseconds timeout = 10s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!fn()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

// ---------------------------------------------------------------------------
// The fixture: one model, one real upstream and the fault upstream per
// suite; fronts (and upstreams a test kills) per test.

class BackendProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("strata_backend_process_" + std::to_string(::getpid())));
    std::filesystem::create_directories(*dir_);
    // Untied output weights: greedy text that does not repeat one token, so
    // that a stop sequence can cut it mid-way.
    model_ = new std::string(testing::MakeDemoModel(
        dir_->string(), "n_embd=128,n_layers=4,n_heads=4,n_ff=256,n_ctx=2048,tied=0",
        {"--seed", "1"}));
    ASSERT_FALSE(model_->empty()) << ReadAll((*dir_ / "mkmodel.log").string());
    upstream_ = new Proc(StartServe(UpstreamArgs(), "upstream"));
    ASSERT_GT(upstream_->port, 0) << ReadAll(upstream_->log);
    fault_ = new FaultUpstream();
    ASSERT_TRUE(fault_->Start().ok());
  }
  static void TearDownTestSuite() {
    delete fault_;
    if (upstream_ != nullptr) testing::Kill(upstream_->pid);
    delete upstream_;
    std::filesystem::remove_all(*dir_);
    delete model_;
    delete dir_;
  }
  void TearDown() override {
    for (pid_t pid : pids_) testing::Kill(pid);  // Kill skips the -1 of one that never started
  }

  static std::vector<std::string> UpstreamArgs(std::vector<std::string> extra = {}) {
    // No response cache: every answer is generated, none replayed.
    std::vector<std::string> args = {"-m",    *model_, "--alias",    "demo",
                                     "--ctx", "2048",  "--l1-bytes", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  // `strata serve ARGS --port PORT` (log level info unless ARGS set one);
  // pid and port -1 when it did not start (then it is not running).
  static Proc StartServe(std::vector<std::string> args, const std::string& name, int port = 0) {
    static int n = 0;  // every server of the suite logs to its own file
    Proc p;
    p.log = (*dir_ / (name + "_" + std::to_string(++n) + ".log")).string();
    std::vector<std::string> full = {"serve", "--port", std::to_string(port)};
    if (std::find(args.begin(), args.end(), "--log-level") == args.end()) {
      full.insert(full.end(), {"--log-level", "info"});
    }
    full.insert(full.end(), args.begin(), args.end());
    p.pid = testing::Spawn(full, p.log);
    p.port = testing::WaitReady(p.pid, p.log);
    if (p.port < 0) {
      // Exited (and reaped by WaitReady), or still starting: never signal a
      // pid that may already be another process's.
      if (::waitpid(p.pid, nullptr, WNOHANG) == 0) testing::Kill(p.pid);
      p.pid = -1;
    }
    return p;
  }
  // A server this test owns (killed in TearDown).
  Proc Serve(std::vector<std::string> args, const std::string& name, int port = 0) {
    Proc p = StartServe(std::move(args), name, port);
    pids_.push_back(p.pid);
    EXPECT_GT(p.port, 0) << name << " did not start:\n" << ReadAll(p.log);
    return p;
  }
  // Kills a server this test owns (SIGKILL) and forgets it.
  void KillNow(Proc& p) {
    testing::Kill(p.pid);
    pids_.erase(std::remove(pids_.begin(), pids_.end(), p.pid), pids_.end());
    p.pid = -1;
  }
  Proc Upstream(std::vector<std::string> extra = {}, int port = 0) {
    return Serve(UpstreamArgs(std::move(extra)), "upstream", port);
  }
  // A front serving `spec` as "front" (model "demo" upstream), its response
  // cache off so that every request reaches the backend.
  Proc Front(const std::string& spec, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--backend",      spec,    "--backend-model", "demo",
                                     "--backend-name", "front", "--l1-bytes",      "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Serve(args, "front");
  }

  static std::filesystem::path* dir_;
  static std::string* model_;
  static Proc* upstream_;  // a real strata upstream serving "demo"
  static FaultUpstream* fault_;
  std::vector<pid_t> pids_;
};
std::filesystem::path* BackendProcessTest::dir_ = nullptr;
std::string* BackendProcessTest::model_ = nullptr;
Proc* BackendProcessTest::upstream_ = nullptr;
FaultUpstream* BackendProcessTest::fault_ = nullptr;

Json Chat(const std::string& model, const std::string& content, int max_tokens = 12) {
  return {{"model", model},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"messages", {{{"role", "user"}, {"content", content}}}}};
}
Json Streaming(Json body, bool include_usage = false) {
  body["stream"] = true;
  if (include_usage) body["stream_options"] = {{"include_usage", true}};
  return body;
}

// The upstream's own non-streamed chat answer.
Json DirectChat(int port, const std::string& content) {
  auto r = Post(port, "/v1/chat/completions", Chat("demo", content));
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  return r ? Parse(r->body) : Json();
}

void ExpectSameUsage(const Json& want, const Json& got) {
  for (const char* field : {"prompt_tokens", "completion_tokens", "total_tokens"}) {
    EXPECT_EQ(got.value(field, -1), want.value(field, -2)) << field << " " << got.dump();
  }
}

// ---------------------------------------------------------------------------
// 1. Pass-through.

TEST_F(BackendProcessTest, AnOpenAIBackendPassesTheUpstreamsAnswerThrough) {
  const Proc front = Front("openai:" + upstream_->url());
  ASSERT_GT(front.port, 0);
  const int up = upstream_->port;

  Json direct = DirectChat(up, "hello there");
  const std::string text = direct["choices"][0]["message"]["content"];
  ASSERT_GE(text.size(), 8u) << direct.dump();
  auto via = Post(front.port, "/v1/chat/completions", Chat("front", "hello there"));
  ASSERT_TRUE(via);
  ASSERT_EQ(via->status, 200) << via->body;
  Json got = Parse(via->body);
  EXPECT_EQ(got["choices"][0]["message"]["content"], text);
  EXPECT_EQ(got["choices"][0]["finish_reason"], direct["choices"][0]["finish_reason"]);
  EXPECT_EQ(got["model"], "front");
  ExpectSameUsage(direct["usage"], got["usage"]);

  // Streamed, with the usage chunk.
  auto direct_stream =
      Post(up, "/v1/chat/completions", Streaming(Chat("demo", "hello there"), true));
  auto via_stream =
      Post(front.port, "/v1/chat/completions", Streaming(Chat("front", "hello there"), true));
  ASSERT_TRUE(direct_stream && via_stream);
  ASSERT_EQ(via_stream->status, 200) << via_stream->body;
  Streamed ds = ReadStream(direct_stream->body, false);
  Streamed vs = ReadStream(via_stream->body, false);
  EXPECT_EQ(vs.text, text);
  EXPECT_EQ(vs.text, ds.text);
  EXPECT_EQ(vs.finish, ds.finish);
  EXPECT_TRUE(vs.done) << via_stream->body;
  ExpectSameUsage(ds.usage, vs.usage);

  // /v1/completions.
  Json completion = {
      {"model", "demo"}, {"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}};
  auto dc = Post(up, "/v1/completions", completion);
  Json via_completion = completion;
  via_completion["model"] = "front";
  auto vc = Post(front.port, "/v1/completions", via_completion);
  ASSERT_TRUE(dc && vc);
  ASSERT_EQ(vc->status, 200) << vc->body;
  Json dj = Parse(dc->body), vj = Parse(vc->body);
  EXPECT_FALSE(dj["choices"][0].value("text", "").empty()) << dc->body;
  EXPECT_EQ(vj["choices"][0]["text"], dj["choices"][0]["text"]);
  EXPECT_EQ(vj["choices"][0]["finish_reason"], dj["choices"][0]["finish_reason"]);
  ExpectSameUsage(dj["usage"], vj["usage"]);

  RawClient models(front.port);
  ASSERT_TRUE(models.Send("GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto list = models.ReadResponse();
  ASSERT_TRUE(list);
  EXPECT_EQ(list->status, 200);
  Json lj = Parse(list->body);
  ASSERT_TRUE(lj["data"].is_array()) << list->body;
  bool listed = false;
  for (const Json& m : lj["data"]) listed = listed || m.value("id", "") == "front";
  EXPECT_TRUE(listed) << list->body;
}

// ---------------------------------------------------------------------------
// 2. Translation both ways.

TEST_F(BackendProcessTest, AnAnthropicClientOfAnOpenAIBackendGetsTheUpstreamsText) {
  const Proc front = Front("openai:" + upstream_->url());
  ASSERT_GT(front.port, 0);
  Json direct = DirectChat(upstream_->port, "hello there");
  const std::string text = direct["choices"][0]["message"]["content"];
  ASSERT_GE(text.size(), 8u);

  auto r = Post(front.port, "/v1/messages", Chat("front", "hello there"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Parse(r->body);
  EXPECT_EQ(j["type"], "message");
  EXPECT_EQ(j["content"][0]["text"], text);
  EXPECT_EQ(j["stop_reason"], "max_tokens");
  EXPECT_EQ(j["usage"]["output_tokens"], direct["usage"]["completion_tokens"]);

  // A stop sequence that first occurs mid-text (ASCII, so the cut is a
  // whole character): the text before it, and which one matched.
  size_t at = std::string::npos;
  std::string stop;
  for (size_t i = text.size() / 3; i + 3 <= text.size(); ++i) {
    const std::string s = text.substr(i, 3);
    const bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
    if (ascii && text.find(s) == i) {
      at = i;
      stop = s;
      break;
    }
  }
  ASSERT_NE(at, std::string::npos) << "no stop sequence to cut " << text;
  Json stopped = Chat("front", "hello there");
  stopped["stop_sequences"] = {stop};
  auto s = Post(front.port, "/v1/messages", stopped);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200) << s->body;
  Json sj = Parse(s->body);
  EXPECT_EQ(sj["content"][0]["text"], text.substr(0, at)) << "stop " << stop;
  EXPECT_EQ(sj["stop_reason"], "stop_sequence") << s->body;
  EXPECT_EQ(sj["stop_sequence"], stop) << s->body;

  // Streamed: the same text, then message_delta and message_stop.
  auto st = Post(front.port, "/v1/messages", Streaming(Chat("front", "hello there")));
  ASSERT_TRUE(st);
  ASSERT_EQ(st->status, 200) << st->body;
  Streamed ss = ReadStream(st->body, true);
  EXPECT_EQ(ss.text, text);
  EXPECT_EQ(ss.finish, "max_tokens");
  EXPECT_TRUE(ss.stopped) << st->body;
  EXPECT_TRUE(ss.error.is_null()) << st->body;
}

TEST_F(BackendProcessTest, AnOpenAIClientOfAnAnthropicBackendGetsTheUpstreamsText) {
  const Proc front = Front("anthropic:" + upstream_->url());
  ASSERT_GT(front.port, 0);
  Json direct = DirectChat(upstream_->port, "hello there");
  const std::string text = direct["choices"][0]["message"]["content"];
  ASSERT_GE(text.size(), 8u);

  auto r = Post(front.port, "/v1/chat/completions", Chat("front", "hello there"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], text);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], direct["usage"]["completion_tokens"]);

  auto st = Post(front.port, "/v1/chat/completions", Streaming(Chat("front", "hello there")));
  ASSERT_TRUE(st);
  ASSERT_EQ(st->status, 200) << st->body;
  Streamed ss = ReadStream(st->body, false);
  EXPECT_EQ(ss.text, text);
  EXPECT_EQ(ss.finish, "length");
  EXPECT_TRUE(ss.done) << st->body;
}

// An Anthropic client's stream through an Anthropic backend: message_start
// already counts the prompt, as the upstream's own message_start does, and
// both ends of the stream report what the upstream's do.
TEST_F(BackendProcessTest, AStreamedMessageThroughAnAnthropicBackendCountsItsPromptAtTheStart) {
  const Proc front = Front("anthropic:" + upstream_->url());
  ASSERT_GT(front.port, 0);
  const Json direct = DirectChat(upstream_->port, "count my prompt");
  const int prompt = direct["usage"].value("prompt_tokens", -1);
  ASSERT_GT(prompt, 0) << direct.dump();

  // The same request twice, so that the upstream's prefix cache holds it
  // both times.
  auto own = Post(upstream_->port, "/v1/messages", Streaming(Chat("demo", "count my prompt")));
  auto st = Post(front.port, "/v1/messages", Streaming(Chat("front", "count my prompt")));
  ASSERT_TRUE(own && st);
  ASSERT_EQ(own->status, 200) << own->body;
  ASSERT_EQ(st->status, 200) << st->body;
  const Streamed want = ReadStream(own->body, true);
  const Streamed got = ReadStream(st->body, true);
  ASSERT_TRUE(got.stopped) << st->body;
  const auto whole = [](const Json& u) {
    return u.value("input_tokens", 0) + u.value("cache_read_input_tokens", 0) +
           u.value("cache_creation_input_tokens", 0);
  };
  EXPECT_EQ(whole(got.start_usage), prompt) << st->body;
  EXPECT_EQ(whole(got.usage), prompt) << st->body;
  for (const char* field : {"input_tokens", "cache_read_input_tokens",
                            "cache_creation_input_tokens", "output_tokens"}) {
    EXPECT_EQ(got.start_usage.value(field, -1), want.start_usage.value(field, -2))
        << field << "\n"
        << st->body << "\nupstream:\n"
        << own->body;
    EXPECT_EQ(got.usage.value(field, -1), want.usage.value(field, -2))
        << field << "\n"
        << st->body << "\nupstream:\n"
        << own->body;
  }
}

// ---------------------------------------------------------------------------
// 3. What an Anthropic upstream cannot carry: a 400 before anything is sent.

TEST_F(BackendProcessTest, FieldsAnAnthropicBackendCannotCarryAreClear400s) {
  const Proc front = Front("anthropic:" + fault_->url());
  ASSERT_GT(front.port, 0);
  fault_->Play({});
  Json n2 = Chat("front", "hi", 4);
  n2["n"] = 2;
  Json penalty = Chat("front", "hi", 4);
  penalty["frequency_penalty"] = 0.5;
  Json completion = {{"model", "front"}, {"prompt", "hi"}, {"max_tokens", 4}};
  for (const auto& [path, body, param] :
       {std::tuple{"/v1/chat/completions", n2, "n"},
        std::tuple{"/v1/completions", completion, "prompt"},
        std::tuple{"/v1/chat/completions", penalty, "frequency_penalty"}}) {
    auto r = Post(front.port, path, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << param << ": " << r->body;
    Json j = Parse(r->body);
    EXPECT_EQ(j["error"]["code"], "unsupported_by_backend") << r->body;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << r->body;
    EXPECT_EQ(j["error"]["param"], param) << r->body;
  }
  // An Anthropic client gets its own shape (which has no code).
  auto a = Post(front.port, "/v1/messages", penalty);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 400) << a->body;
  Json aj = Parse(a->body);
  EXPECT_EQ(aj["type"], "error") << a->body;
  EXPECT_EQ(aj["error"]["type"], "invalid_request_error") << a->body;
  EXPECT_NE(aj["error"].value("message", "").find("frequency_penalty"), std::string::npos)
      << a->body;
  EXPECT_EQ(fault_->posts(), 0) << "a request that cannot be carried was sent";
}

// ---------------------------------------------------------------------------
// 4. Nobody listening.

TEST_F(BackendProcessTest, NoReachableReplicaIsA503WithRetryAfterInEitherApi) {
  const std::string spec = "openai:http://127.0.0.1:" + std::to_string(UnusedPort()) +
                           ",http://127.0.0.1:" + std::to_string(UnusedPort());
  const Proc front = Front(spec);
  ASSERT_GT(front.port, 0);
  for (const bool stream : {false, true}) {
    for (const bool anthropic : {false, true}) {
      Json body = Chat("front", "hi", 4);
      if (stream) body["stream"] = true;
      auto r = Post(front.port, anthropic ? "/v1/messages" : "/v1/chat/completions", body);
      ASSERT_TRUE(r);
      SCOPED_TRACE(std::string(anthropic ? "anthropic" : "openai") + (stream ? " stream" : ""));
      EXPECT_EQ(r->status, 503) << r->body;
      EXPECT_FALSE(r->Header("retry-after").empty());
      EXPECT_NE(r->Header("content-type").find("application/json"), std::string::npos);
      Json j = Parse(r->body);
      if (anthropic) {
        EXPECT_EQ(j["type"], "error") << r->body;
        EXPECT_EQ(j["error"]["type"], "overloaded_error") << r->body;
      } else {
        EXPECT_EQ(j["error"]["code"], "upstream_unavailable") << r->body;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// 5. Retries before the first byte.

TEST_F(BackendProcessTest, ARateLimitedOrOverloadedUpstreamIsRetriedOnce) {
  const Proc openai = Front("openai:" + fault_->url());
  const Proc anthropic = Front("anthropic:" + fault_->url());
  ASSERT_GT(openai.port, 0);
  ASSERT_GT(anthropic.port, 0);
  for (const bool to_anthropic : {false, true}) {
    const Proc& front = to_anthropic ? anthropic : openai;
    for (const int status : {429, 503, 529}) {
      SCOPED_TRACE((to_anthropic ? "anthropic " : "openai ") + std::to_string(status));
      fault_->Play({{.status = status}});
      const double retries =
          Metric(front.port, "strata_backend_retries_total", R"(backend="front")");
      auto r = Post(front.port, to_anthropic ? "/v1/messages" : "/v1/chat/completions",
                    Chat("front", "hi", 8));
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 200) << r->body;
      Json j = Parse(r->body);
      EXPECT_EQ(to_anthropic ? j["content"][0]["text"] : j["choices"][0]["message"]["content"],
                std::string(FaultUpstream::kText))
          << r->body;
      EXPECT_EQ(Metric(front.port, "strata_backend_retries_total", R"(backend="front")"),
                retries + 1);
      EXPECT_EQ(fault_->posts(), 2);
    }
  }
}

TEST_F(BackendProcessTest, A500IsNotRetriedAndWithoutRetriesA429ReachesTheClient) {
  const Proc openai = Front("openai:" + fault_->url());
  const Proc anthropic = Front("anthropic:" + fault_->url());
  const Proc no_retries = Front("openai:" + fault_->url(), {"--backend-retries", "0"});
  ASSERT_GT(openai.port, 0);
  ASSERT_GT(anthropic.port, 0);
  ASSERT_GT(no_retries.port, 0);

  fault_->Play({{.status = 500}});
  auto r = Post(openai.port, "/v1/chat/completions", Chat("front", "hi", 8));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502) << r->body;
  EXPECT_EQ(Parse(r->body)["error"]["code"], "upstream_error") << r->body;
  EXPECT_EQ(fault_->posts(), 1);

  fault_->Play({{.status = 500}});
  auto a = Post(anthropic.port, "/v1/messages", Chat("front", "hi", 8));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 502) << a->body;
  EXPECT_EQ(Parse(a->body)["error"]["type"], "api_error") << a->body;
  EXPECT_EQ(fault_->posts(), 1);

  fault_->Play({{.status = 429}});
  auto limited = Post(no_retries.port, "/v1/chat/completions", Chat("front", "hi", 8));
  ASSERT_TRUE(limited);
  EXPECT_EQ(limited->status, 429) << limited->body;
  EXPECT_EQ(Parse(limited->body)["error"]["code"], "upstream_rate_limited") << limited->body;
  EXPECT_FALSE(limited->Header("retry-after").empty());
  EXPECT_EQ(fault_->posts(), 1);
  EXPECT_EQ(Metric(no_retries.port, "strata_backend_retries_total", R"(backend="front")"), 0);
}

// ---------------------------------------------------------------------------
// 6. Never retried after the first byte.

TEST_F(BackendProcessTest, AStreamCutAfterItsFirstBytesEndsWithAnErrorAndIsNotRetried) {
  const Proc openai = Front("openai:" + fault_->url());
  const Proc anthropic = Front("anthropic:" + fault_->url());
  ASSERT_GT(openai.port, 0);
  ASSERT_GT(anthropic.port, 0);
  for (const bool to_anthropic : {false, true}) {
    SCOPED_TRACE(to_anthropic ? "anthropic" : "openai");
    const Proc& front = to_anthropic ? anthropic : openai;
    fault_->Play({{.cut = true}});
    RawClient c(front.port);
    ASSERT_TRUE(c.Send(Request(to_anthropic ? "/v1/messages" : "/v1/chat/completions",
                               Streaming(Chat("front", "hi", 8)).dump())));
    // The client has the first words before the upstream dies.
    ASSERT_TRUE(c.ReadUntil(" from")) << c.buffered();
    ASSERT_TRUE(fault_->WaitHeld(1));
    ASSERT_TRUE(fault_->Cut().ok());
    auto r = c.ReadResponse();
    ASSERT_TRUE(r) << c.buffered();
    EXPECT_EQ(r->status, 200);
    Streamed s = ReadStream(r->body, to_anthropic);
    EXPECT_EQ(s.text, "Hello from");
    ASSERT_FALSE(s.error.is_null()) << r->body;
    EXPECT_FALSE(s.after_error) << r->body;
    if (to_anthropic) {
      EXPECT_EQ(s.error["type"], "error") << r->body;
      EXPECT_EQ(s.error["error"]["type"], "api_error") << r->body;
      EXPECT_FALSE(s.stopped) << r->body;
    } else {
      EXPECT_EQ(s.error["error"]["code"], "upstream_error") << r->body;
      EXPECT_FALSE(s.done) << r->body;
    }
    EXPECT_EQ(fault_->posts(), 1);
    EXPECT_EQ(Metric(front.port, "strata_backend_retries_total", R"(backend="front")"), 0);
  }
}

TEST_F(BackendProcessTest, AStalledStreamEndsWithAnUpstreamTimeout) {
  const Proc front = Front("openai:" + fault_->url(), {"--backend-idle-timeout", "1"});
  ASSERT_GT(front.port, 0);
  fault_->Play({{.stall = true}});
  const auto t0 = std::chrono::steady_clock::now();
  // The read deadline is the bound: the stream must end, not hang.
  auto r = Post(front.port, "/v1/chat/completions", Streaming(Chat("front", "hi", 8)), 10s);
  ASSERT_TRUE(r) << "the stream did not end";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 900ms);
  EXPECT_EQ(r->status, 200);
  Streamed s = ReadStream(r->body, false);
  EXPECT_EQ(s.text, "Hello");
  EXPECT_EQ(s.error["error"]["code"], "upstream_timeout") << r->body;
  EXPECT_FALSE(s.done) << r->body;
  EXPECT_EQ(fault_->posts(), 1);
}

// ---------------------------------------------------------------------------
// 7. A replica dies and comes back.

TEST_F(BackendProcessTest, AKilledReplicaIsEjectedAndReadmittedWhenItComesBack) {
  const Proc a = Upstream();
  Proc b = Upstream();
  ASSERT_GT(a.port, 0);
  ASSERT_GT(b.port, 0);
  const Proc front = Front("openai:" + a.url() + "," + b.url(),
                           {"--backend-routing", "round-robin", "--backend-eject-after", "1",
                            "--backend-health-interval", "0.2", "--backend-eject-time", "0.5"});
  ASSERT_GT(front.port, 0);
  const auto up = [&](const Proc& p) {
    return Metric(front.port, "strata_backend_replica_up", ReplicaLabels(p.url()));
  };
  const auto requests = [&](const Proc& p) {
    return Metric(front.port, "strata_backend_replica_requests_total", ReplicaLabels(p.url()));
  };
  const auto ask = [&](int i) {
    auto r = Post(front.port, "/v1/chat/completions", Chat("front", "q" + std::to_string(i), 2));
    return r ? r->status : -1;
  };
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ask(i), 200);
  EXPECT_GT(requests(b), 0);

  KillNow(b);
  // Connect failures go to the other replica: nothing fails.
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ask(10 + i), 200) << "request " << i << " after the kill";
  EXPECT_TRUE(Eventually([&] { return up(b) == 0; }, 5s)) << "up=" << up(b);
  EXPECT_EQ(up(a), 1);

  // Back on the same port: readmitted, and it gets requests again.
  const Proc again = Upstream({}, b.port);
  ASSERT_EQ(again.port, b.port) << ReadAll(again.log);
  EXPECT_TRUE(Eventually([&] { return up(b) == 1; }, 10s)) << "up=" << up(b);
  const double before = requests(b);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ask(20 + i), 200);
  EXPECT_GT(requests(b), before);
}

// ---------------------------------------------------------------------------
// 8. Routing.

// A system prompt longer than the affinity prefix (256 bytes here).
std::string LongSystem(const std::string& lead) {
  std::string s = lead;
  while (s.size() < 280) s += " Answer in one short sentence, plainly and without lists.";
  return s;
}
Json WithSystem(const std::string& system, const std::string& question) {
  return {{"model", "front"},
          {"max_tokens", 2},
          {"temperature", 0},
          {"messages",
           {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", question}}}}};
}

TEST_F(BackendProcessTest, AffinityKeepsASharedPrefixOnOneReplicaAndRoundRobinSpreadsIt) {
  const std::vector<Proc> ups = {Upstream(), Upstream(), Upstream()};
  std::string spec = "openai:";
  for (const Proc& u : ups) {
    ASSERT_GT(u.port, 0);
    spec += (&u == &ups[0] ? "" : ",") + u.url();
  }
  const Proc affinity =
      Front(spec, {"--backend-routing", "affinity", "--backend-affinity-bytes", "256"});
  const Proc round_robin =
      Front(spec, {"--backend-routing", "round-robin", "--backend-affinity-bytes", "256"});
  ASSERT_GT(affinity.port, 0);
  ASSERT_GT(round_robin.port, 0);
  const auto counts = [&](const Proc& front) {
    std::vector<double> n;
    for (const Proc& u : ups) {
      n.push_back(
          Metric(front.port, "strata_backend_replica_requests_total", ReplicaLabels(u.url())));
    }
    return n;
  };
  const auto spread = [](const std::vector<double>& before, const std::vector<double>& after) {
    std::vector<double> d;
    for (size_t i = 0; i < before.size(); ++i) d.push_back(after[i] - before[i]);
    return d;
  };

  // One shared system prompt, twelve questions: one replica, whose prompt
  // cache then holds the prefix.
  const std::string shared = LongSystem("You are the shared assistant of the routing test.");
  std::vector<double> before = counts(affinity);
  for (int i = 0; i < 12; ++i) {
    auto r = Post(affinity.port, "/v1/chat/completions",
                  WithSystem(shared, "Question " + std::to_string(i) + ": why?"));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    if (i > 0) {
      Json usage = Parse(r->body)["usage"];
      EXPECT_GT(usage["prompt_tokens_details"].value("cached_tokens", 0), 0)
          << "request " << i << ": " << usage.dump();
    }
  }
  std::vector<double> d = spread(before, counts(affinity));
  EXPECT_EQ(std::count(d.begin(), d.end(), 12.0), 1) << d[0] << " " << d[1] << " " << d[2];
  EXPECT_EQ(std::count(d.begin(), d.end(), 0.0), 2) << d[0] << " " << d[1] << " " << d[2];

  // Twelve distinct prefixes spread.
  before = counts(affinity);
  for (int i = 0; i < 12; ++i) {
    auto r = Post(
        affinity.port, "/v1/chat/completions",
        WithSystem(LongSystem("Topic " + std::to_string(i) + " of the routing test."), "why?"));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  d = spread(before, counts(affinity));
  EXPECT_LE(std::count(d.begin(), d.end(), 0.0), 1) << d[0] << " " << d[1] << " " << d[2];

  // Round-robin ignores the prefix.
  before = counts(round_robin);
  for (int i = 0; i < 12; ++i) {
    auto r = Post(round_robin.port, "/v1/chat/completions",
                  WithSystem(shared, "Question " + std::to_string(i) + ": why?"));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  d = spread(before, counts(round_robin));
  EXPECT_EQ(std::count(d.begin(), d.end(), 0.0), 0) << d[0] << " " << d[1] << " " << d[2];
}

// A hot prefix under load: three replicas that hold every stream open (so
// each request stays in flight), one shared system prompt, eight requests
// sent one after another. The floor (2) keeps the first two on the
// prompt's replica; past it the bounded load (1.25x the average) spills
// the rest, and no replica carries more than ceil(1.25 * 8 / 3) = 4.
TEST_F(BackendProcessTest, BoundedLoadSpillsAHotPrefixPastTheFloor) {
  std::vector<std::unique_ptr<FaultUpstream>> ups;
  std::string spec = "openai:";
  for (int i = 0; i < 3; ++i) {
    ups.push_back(std::make_unique<FaultUpstream>());
    ASSERT_TRUE(ups.back()->Start().ok());
    ups.back()->Play(std::vector<FaultUpstream::Step>(16, FaultUpstream::Step{.stall = true}));
    spec += (i == 0 ? "" : ",") + ups.back()->url();
  }
  const Proc front = Front(spec, {"--backend-routing", "affinity", "--backend-affinity-bytes",
                                  "256", "--backend-affinity-floor", "2"});
  ASSERT_GT(front.port, 0);
  const auto posts = [&] {
    std::vector<int> n;
    for (const auto& u : ups) n.push_back(u->posts());
    return n;
  };
  const auto total = [&] {
    int t = 0;
    for (int n : posts()) t += n;
    return t;
  };
  const std::string shared = LongSystem("You are the hot assistant of the spill test.");
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 8; ++i) {
    Json body = Streaming(WithSystem(shared, "Question " + std::to_string(i) + ": why?"));
    clients.push_back(std::make_unique<RawClient>(front.port));
    ASSERT_TRUE(clients.back()->connected());
    ASSERT_TRUE(clients.back()->Send(Request("/v1/chat/completions", body.dump())));
    ASSERT_TRUE(Eventually([&] { return total() == i + 1; })) << "request " << i;
    if (i == 1) {
      const std::vector<int> two = posts();
      EXPECT_EQ(*std::max_element(two.begin(), two.end()), 2)
          << "under the floor both stay home: " << two[0] << " " << two[1] << " " << two[2];
    }
  }
  const std::vector<int> n = posts();
  EXPECT_LE(*std::max_element(n.begin(), n.end()), 4) << n[0] << " " << n[1] << " " << n[2];
  EXPECT_LE(std::count(n.begin(), n.end(), 0), 1) << n[0] << " " << n[1] << " " << n[2];
  for (auto& u : ups) ASSERT_TRUE(u->Cut().ok());  // the held streams end
}

// ---------------------------------------------------------------------------
// 9. Credentials.

TEST_F(BackendProcessTest, TheBackendKeyReachesTheUpstreamAndNoLog) {
  const std::string key = "sk-backend-7f3a9c2e51d04b86";
  const std::string wrong = "sk-backend-wrong-00000000";
  const std::string keys = (*dir_ / "upstream_keys.txt").string();
  const std::string good_file = (*dir_ / "good.key").string();
  const std::string wrong_file = (*dir_ / "wrong.key").string();
  std::ofstream(keys) << key << " team-a\n";
  std::ofstream(good_file) << key << "\n";
  std::ofstream(wrong_file) << wrong << "\n";
  const Proc up = Upstream({"--api-keys", keys});
  ASSERT_GT(up.port, 0);
  const std::vector<std::string> debug = {"--log-level", "debug"};
  std::vector<std::string> good_args = debug, wrong_args = debug;
  good_args.insert(good_args.end(), {"--backend-key-file", good_file});
  // Probed at once and often, ejected after one failure: a refused key
  // must not eject the replica, the client must hear that it was refused.
  wrong_args.insert(wrong_args.end(),
                    {"--backend-key-file", wrong_file, "--backend-health-interval", "0.1",
                     "--backend-eject-after", "1"});
  const Proc openai = Front("openai:" + up.url(), good_args);
  const Proc anthropic = Front("anthropic:" + up.url(), good_args);
  const Proc refused = Front("openai:" + up.url(), wrong_args);
  ASSERT_GT(openai.port, 0);
  ASSERT_GT(anthropic.port, 0);
  ASSERT_GT(refused.port, 0);

  // The upstream wants the key: without it, 401.
  auto bare = Post(up.port, "/v1/chat/completions", Chat("demo", "hi", 4));
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->status, 401);

  for (const Proc* front : {&openai, &anthropic}) {
    auto r = Post(front->port, "/v1/chat/completions", Chat("front", "hi", 4));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  std::this_thread::sleep_for(300ms);  // a few probes of the refused front
  for (int i = 0; i < 2; ++i) {
    auto r = Post(refused.port, "/v1/chat/completions", Chat("front", "hi", 4));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 502) << r->body;
    EXPECT_EQ(Parse(r->body)["error"]["code"], "upstream_error") << r->body;
    EXPECT_NE(r->body.find("credential"), std::string::npos) << r->body;
  }
  EXPECT_EQ(Metric(refused.port, "strata_backend_replica_up", ReplicaLabels(up.url())), 1);

  for (const Proc* front : {&openai, &anthropic, &refused}) {
    const std::string log = ReadAll(front->log);
    EXPECT_FALSE(log.empty());
    EXPECT_EQ(log.find(key), std::string::npos) << log;
    EXPECT_EQ(log.find(wrong), std::string::npos) << log;
  }
}

// ---------------------------------------------------------------------------
// Token counting and the token endpoints behind a remote backend.

TEST_F(BackendProcessTest, CountTokensIsRelayedToAnAnthropicUpstreamWithItsKey) {
  const std::string key = "sk-backend-count-4d2e8f1a";
  const std::string keys = (*dir_ / "count_keys.txt").string();
  const std::string key_file = (*dir_ / "count.key").string();
  std::ofstream(keys) << key << " team-a\n";
  std::ofstream(key_file) << key << "\n";
  const Proc up = Upstream({"--api-keys", keys});
  ASSERT_GT(up.port, 0);
  const Proc anthropic = Front("anthropic:" + up.url(), {"--backend-key-file", key_file});
  const Proc openai = Front("openai:" + up.url(), {"--backend-key-file", key_file});
  ASSERT_GT(anthropic.port, 0);
  ASSERT_GT(openai.port, 0);
  const Json count = {{"model", "front"},
                      {"system", "Be brief."},
                      {"messages", {{{"role", "user"}, {"content", "count these words please"}}}}};

  // The upstream's own count, asked with its key.
  Json direct_body = count;
  direct_body["model"] = "demo";
  RawClient c(up.port);
  ASSERT_TRUE(c.Send(
      Request("/v1/messages/count_tokens", direct_body.dump(), "x-api-key: " + key + "\r\n")));
  auto direct = c.ReadResponse();
  ASSERT_TRUE(direct);
  ASSERT_EQ(direct->status, 200) << direct->body;
  const int want = Parse(direct->body).value("input_tokens", -1);
  EXPECT_GT(want, 0);

  // Through the Anthropic front (its key, its version header): the same answer.
  auto relayed = Post(anthropic.port, "/v1/messages/count_tokens", count);
  ASSERT_TRUE(relayed);
  ASSERT_EQ(relayed->status, 200) << relayed->body;
  EXPECT_EQ(Parse(relayed->body).value("input_tokens", -2), want) << relayed->body;
  EXPECT_FALSE(relayed->Header("request-id").empty());

  // An OpenAI backend has no such endpoint: a 400 in Anthropic's shape.
  auto refused = Post(openai.port, "/v1/messages/count_tokens", count);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->body;
  const Json err = Parse(refused->body);
  EXPECT_EQ(err["type"], "error") << refused->body;
  EXPECT_EQ(err["error"]["type"], "invalid_request_error") << refused->body;
  EXPECT_NE(refused->body.find("count"), std::string::npos) << refused->body;

  // Nor does a remote model tokenize: 400 unsupported_by_backend, OpenAI's shape.
  auto tok = Post(openai.port, "/tokenize", {{"content", "hello"}, {"model", "front"}});
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->status, 400) << tok->body;
  EXPECT_EQ(Parse(tok->body)["error"]["code"], "unsupported_by_backend") << tok->body;
  auto detok = Post(anthropic.port, "/detokenize", {{"tokens", {1, 2}}});
  ASSERT_TRUE(detok);
  EXPECT_EQ(detok->status, 400) << detok->body;
  EXPECT_EQ(Parse(detok->body)["error"]["code"], "unsupported_by_backend") << detok->body;

  // Counted under its own endpoint.
  EXPECT_EQ(Metric(anthropic.port, "strata_http_requests_total",
                   R"(endpoint="/v1/messages/count_tokens",status="200")"),
            1);
  EXPECT_EQ(ReadAll(anthropic.log).find(key), std::string::npos);
}

}  // namespace
}  // namespace strata
