// Every error a client can meet, as the client sees it: HTTP status,
// Retry-After, and the OpenAI {type, code, param} and Anthropic type that the
// one table in server/errors.cpp gives each reason (docs/api.md, "Errors").
// Through the real server where the condition can be made deterministically
// (a gate request holds the scheduler's only slot for the queue-full and
// load-shedding cases); the table itself for every reason.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <mutex>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "gateway/gateway.h"
#include "server/api.h"
#include "server/server.h"
#include "testing/tiny_model.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::server {
namespace {

using nlohmann::json;
using util::ErrorReason;

// A scheduler request that parks the scheduler thread in its first OnToken
// until opened, so it holds a running slot for as long as the test needs.
// Threading: OnToken runs on the scheduler thread, the rest on the test
// thread; guarded by mu_.
class ErrorGate final : public engine::RequestSink {
 public:
  util::StatusOr<int32_t> Choose(std::span<const float>) override { return 5; }
  bool OnToken(int32_t) override {
    std::unique_lock<std::mutex> lock(mu_);
    parked_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
    return false;
  }
  void OnFinish(engine::FinishReason, const util::Status&, const engine::Usage&) override {}
  // Bounded: false if the scheduler never got to the gate.
  bool WaitParked() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [this] { return parked_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool parked_ = false;  // guarded by mu_
  bool open_ = false;    // guarded by mu_
};

// Admits one request at a time and refuses while one waits: the
// RT-Switcher's load shedding, fixed at its tightest.
class ShedControl final : public engine::SchedulerControl {
 public:
  engine::AdmissionLimits BeforeAdmission(const engine::SchedulerStats&) override {
    return {.max_running = 1, .max_waiting = 1};
  }
  std::chrono::milliseconds idle_tick() const override { return std::chrono::milliseconds(50); }
};

class ErrorBodyTest : public ::testing::Test {
 protected:
  void Start(ApiKeys keys = ApiKeys(), engine::SchedulerOptions sched_options = {},
             bool set_gateway = true) {
    tiny_ = testing::MakeTinyModel();
    ASSERT_NE(tiny_.model, nullptr);
    engine::EngineOptions eo;
    eo.n_ctx = 128;
    eo.n_seq_max = 8;
    engine_ = std::move(engine::Engine::Create(*tiny_.model, eo, log_)).value();
    sched_ = std::move(engine::Scheduler::Start(*engine_, sched_options, log_)).value();
    gateway::GatewayOptions go;
    go.model_name = "tiny";
    go.max_tokens_cap = 64;
    gw_ = std::move(gateway::Gateway::Create(*tiny_.model, *sched_, metrics_, go, util::RealClock(),
                                             log_))
              .value();
    ServerOptions so;
    so.port = 0;
    so.limits.max_body_bytes = 64 * 1024;
    so.http_threads = 8;
    srv_ = std::move(HttpServer::Create(so, std::move(keys), metrics_, util::RealClock(), log_))
               .value();
    auto port = srv_->Start();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    client_->set_read_timeout(60, 0);
    if (set_gateway) srv_->SetGateway(gw_.get());
  }
  void TearDown() override {
    if (srv_) srv_->Stop();
    for (auto& g : gates_) g->Open();
    srv_.reset();
    gw_.reset();
    sched_.reset();
  }
  // Submits a gate straight to the scheduler; with `wait`, returns once the
  // scheduler thread is parked in it (it then holds a running slot).
  void Hold(bool wait) {
    auto gate = std::make_shared<ErrorGate>();
    gates_.push_back(gate);
    auto id = sched_->Submit({.prompt = {1, 2, 3}, .max_tokens = 8, .sink = gate});
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    if (wait) {
      ASSERT_TRUE(gate->WaitParked());
    }
  }

  struct Answer {
    int status = 0;
    std::string retry_after;
    json body;
  };
  Answer Post(const std::string& path, const std::string& body,
              const httplib::Headers& headers = {}) {
    auto r = client_->Post(path.c_str(), headers, body, "application/json");
    if (!r) return {};
    Answer a{r->status, r->get_header_value("Retry-After"), json::parse(r->body, nullptr, false)};
    return a;
  }
  Answer Chat(const std::string& extra = "", const httplib::Headers& headers = {}) {
    return Post("/v1/chat/completions",
                R"({"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"hi"}])" +
                    extra + "}",
                headers);
  }
  Answer Messages(const std::string& extra = "", const httplib::Headers& headers = {}) {
    return Post("/v1/messages",
                R"({"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"hi"}])" +
                    extra + "}",
                headers);
  }

  // The OpenAI body: {"error": {message, type, param, code}}.
  static void ExpectOpenAI(const Answer& a, int status, const std::string& type, const json& code,
                           const json& param = nullptr) {
    EXPECT_EQ(a.status, status) << a.body.dump();
    const json& e = a.body["error"];
    EXPECT_EQ(e["type"], type) << a.body.dump();
    EXPECT_EQ(e["code"], code) << a.body.dump();
    EXPECT_EQ(e["param"], param) << a.body.dump();
    EXPECT_TRUE(e["message"].is_string()) << a.body.dump();
  }
  // The Anthropic body: {"type": "error", "error": {type, message}}.
  static void ExpectAnthropic(const Answer& a, int status, const std::string& type) {
    EXPECT_EQ(a.status, status) << a.body.dump();
    EXPECT_EQ(a.body["type"], "error") << a.body.dump();
    EXPECT_EQ(a.body["error"]["type"], type) << a.body.dump();
    EXPECT_TRUE(a.body["error"]["message"].is_string()) << a.body.dump();
  }

  testing::TinyModel tiny_;
  util::CapturingLogger log_;
  obs::MetricsRegistry metrics_;
  std::unique_ptr<engine::Engine> engine_;
  ShedControl shed_control_;  // outlives sched_
  std::unique_ptr<engine::Scheduler> sched_;
  std::unique_ptr<gateway::Gateway> gw_;
  std::unique_ptr<HttpServer> srv_;
  std::unique_ptr<httplib::Client> client_;
  std::vector<std::shared_ptr<ErrorGate>> gates_;
};

TEST_F(ErrorBodyTest, ALoadingModelIs503ModelLoadingAndAnApiError) {
  Start(ApiKeys(), {}, /*set_gateway=*/false);
  const Answer chat = Chat();
  ExpectOpenAI(chat, 503, "server_error", "model_loading");
  EXPECT_EQ(chat.retry_after, "");
  ExpectAnthropic(Messages(), 503, "api_error");
  ExpectOpenAI(Post("/v1/embeddings", R"({"model":"tiny","input":"x"})"), 503, "server_error",
               "model_loading");
}

TEST_F(ErrorBodyTest, ADrainingServerIs503ShuttingDownAndOverloaded) {
  Start();
  srv_->StartDraining();
  ExpectOpenAI(Chat(), 503, "server_error", "shutting_down");
  ExpectAnthropic(Messages(), 503, "overloaded_error");
}

TEST_F(ErrorBodyTest, MissingAndInvalidKeysAre401WithTheirOwnCodes) {
  Start(*ApiKeys::Parse("key-alpha-0001 alpha\n", "keys"));
  ExpectOpenAI(Chat(), 401, "authentication_error", "missing_api_key");
  ExpectOpenAI(Chat("", {{"Authorization", "Bearer wrong-key-000"}}), 401, "authentication_error",
               "invalid_api_key");
  ExpectAnthropic(Messages(), 401, "authentication_error");
  ExpectAnthropic(Messages("", {{"x-api-key", "wrong-key-000"}}), 401, "authentication_error");
}

TEST_F(ErrorBodyTest, AnUnknownModelIs404ModelNotFound) {
  Start();
  ExpectOpenAI(Post("/v1/chat/completions",
                    R"({"model":"nope","messages":[{"role":"user","content":"x"}]})"),
               404, "invalid_request_error", "model_not_found");
  ExpectAnthropic(
      Post("/v1/messages",
           R"({"model":"nope","max_tokens":2,"messages":[{"role":"user","content":"x"}]})"),
      404, "not_found_error");
  // An unknown route is a 404 too, but not a missing model.
  auto route = client_->Get("/v2/whatever");
  ASSERT_TRUE(route);
  EXPECT_EQ(route->status, 404);
  EXPECT_EQ(json::parse(route->body)["error"]["code"], "not_found") << route->body;
}

TEST_F(ErrorBodyTest, APromptBeyondTheContextIsContextLengthExceeded) {
  Start();
  const std::string long_prompt(600, 'a');
  ExpectOpenAI(Post("/v1/completions",
                    json({{"model", "tiny"}, {"prompt", long_prompt}, {"max_tokens", 5}}).dump()),
               400, "invalid_request_error", "context_length_exceeded");
  ExpectAnthropic(
      Post("/v1/messages", json({{"model", "tiny"},
                                 {"max_tokens", 5},
                                 {"messages", {{{"role", "user"}, {"content", long_prompt}}}}})
                               .dump()),
      400, "invalid_request_error");
  ExpectOpenAI(Post("/v1/embeddings", json({{"model", "tiny"}, {"input", long_prompt}}).dump()),
               400, "invalid_request_error", "context_length_exceeded");
}

TEST_F(ErrorBodyTest, ABodyOverTheLimitIs413RequestTooLarge) {
  Start();
  const std::string huge(100 * 1024, ' ');
  const Answer chat = Post("/v1/chat/completions", huge);
  ExpectOpenAI(chat, 413, "invalid_request_error", nullptr);
  EXPECT_NE(chat.body["error"]["message"].get<std::string>().find("exceeds the limit"),
            std::string::npos);
  ExpectAnthropic(Post("/v1/messages", huge), 413, "request_too_large");
}

TEST_F(ErrorBodyTest, MalformedJsonSaysWhereAndNamesNoParam) {
  Start();
  const Answer a = Post("/v1/chat/completions", R"({"model":"tiny","messages":[})");
  ExpectOpenAI(a, 400, "invalid_request_error", nullptr);
  EXPECT_NE(a.body["error"]["message"].get<std::string>().find("malformed JSON at byte 29"),
            std::string::npos)
      << a.body.dump();
  ExpectOpenAI(Post("/v1/chat/completions", "[1,2]"), 400, "invalid_request_error", nullptr);
  ExpectAnthropic(Post("/v1/messages", "{"), 400, "invalid_request_error");
  // An unterminated 60 KB string: the message names the place with a short
  // excerpt, never the input itself.
  const Answer big =
      Post("/v1/chat/completions", R"({"model":"tiny","messages":")" + std::string(60000, 'q'));
  ExpectOpenAI(big, 400, "invalid_request_error", nullptr);
  const std::string message = big.body["error"]["message"].get<std::string>();
  EXPECT_LT(message.size(), 300u) << message;
  EXPECT_NE(message.find("near 'qqqq"), std::string::npos) << message;
}

TEST_F(ErrorBodyTest, AnInvalidFieldNamesItAsParam) {
  Start();
  ExpectOpenAI(Chat(R"(,"temperature":"hot")"), 400, "invalid_request_error", nullptr,
               "temperature");
  ExpectOpenAI(Chat(R"(,"stream_options":{"include_usage":1})"), 400, "invalid_request_error",
               nullptr, "stream_options.include_usage");
  ExpectOpenAI(Post("/v1/chat/completions", R"({"model":"tiny","messages":[{"content":"x"}]})"),
               400, "invalid_request_error", nullptr, "messages[0].role");
  ExpectOpenAI(Chat(R"(,"stop":["a",3])"), 400, "invalid_request_error", nullptr, "stop[1]");
  ExpectOpenAI(Chat(R"(,"tools":[{"type":"function"}])"), 400, "invalid_request_error", nullptr,
               "tools[0].function");
  ExpectOpenAI(Chat(R"(,"tools":[{"type":"function","function":{"name":"a b"}}])"), 400,
               "invalid_request_error", nullptr, "tools[0].function.name");
  ExpectOpenAI(Chat(R"(,"tool_choice":"required")"), 400, "invalid_request_error", nullptr,
               "tool_choice");
  // Checked past parsing, against the server's limits: the field still comes back.
  ExpectOpenAI(Chat(R"(,"max_tokens":500)"), 400, "invalid_request_error", nullptr, "max_tokens");
  ExpectOpenAI(Post("/v1/embeddings", R"({"model":"tiny","input":[]})"), 400,
               "invalid_request_error", nullptr, "input");
  ExpectAnthropic(Messages(R"(,"temperature":1.5)"), 400, "invalid_request_error");
}

TEST_F(ErrorBodyTest, AFullQueueIs429QueueFullWithRetryAfter) {
  Start(ApiKeys(), {.max_running = 1, .max_queue = 0});
  Hold(/*wait=*/true);  // the only slot, and no queue
  const Answer chat = Chat(R"(,"no_cache":true)");
  ExpectOpenAI(chat, 429, "rate_limit_error", "queue_full");
  EXPECT_EQ(chat.retry_after, "1");
  const Answer messages = Messages(R"(,"no_cache":true)");
  ExpectAnthropic(messages, 429, "overloaded_error");
  EXPECT_EQ(messages.retry_after, "1");
}

TEST_F(ErrorBodyTest, LoadSheddingIs429OverloadedWithRetryAfter) {
  Start(ApiKeys(), {.max_running = 4, .max_queue = 4, .control = &shed_control_});
  Hold(/*wait=*/true);   // runs: the control admits one at a time
  Hold(/*wait=*/false);  // waits: as many as the control lets wait
  const Answer chat = Chat(R"(,"no_cache":true)");
  ExpectOpenAI(chat, 429, "rate_limit_error", "overloaded");
  EXPECT_EQ(chat.retry_after, "1");
  const Answer messages = Messages(R"(,"no_cache":true)");
  ExpectAnthropic(messages, 429, "overloaded_error");
  EXPECT_EQ(messages.retry_after, "1");
}

// The table itself, for every reason (the cases above through HTTP, and
// those that need a slow request to happen).
TEST(ErrorMapping, EveryReasonHasItsDocumentedAnswer) {
  struct Row {
    util::Status status;
    int http;
    const char* openai_type;
    const char* openai_code;  // nullptr: null
    const char* anthropic_type;
    bool retry_after;
  };
  const Row rows[] = {
      {util::InvalidArgumentError("m").WithReason(ErrorReason::kMalformedJson), 400,
       "invalid_request_error", nullptr, "invalid_request_error", false},
      {util::InvalidFieldError("top_p", "m"), 400, "invalid_request_error", nullptr,
       "invalid_request_error", false},
      {util::OutOfRangeError("m").WithReason(ErrorReason::kContextLengthExceeded), 400,
       "invalid_request_error", "context_length_exceeded", "invalid_request_error", false},
      {util::UnauthenticatedError("m").WithReason(ErrorReason::kMissingApiKey), 401,
       "authentication_error", "missing_api_key", "authentication_error", false},
      {util::UnauthenticatedError("m").WithReason(ErrorReason::kInvalidApiKey), 401,
       "authentication_error", "invalid_api_key", "authentication_error", false},
      {util::NotFoundError("m").WithReason(ErrorReason::kNoRoute), 404, "invalid_request_error",
       "not_found", "not_found_error", false},
      {util::NotFoundError("m").WithReason(ErrorReason::kModelNotFound), 404,
       "invalid_request_error", "model_not_found", "not_found_error", false},
      {util::InvalidArgumentError("m").WithReason(ErrorReason::kBodyTooLarge), 413,
       "invalid_request_error", nullptr, "request_too_large", false},
      {util::ResourceExhaustedError("m").WithReason(ErrorReason::kQueueFull), 429,
       "rate_limit_error", "queue_full", "overloaded_error", true},
      {util::ResourceExhaustedError("m").WithReason(ErrorReason::kLoadShed), 429,
       "rate_limit_error", "overloaded", "overloaded_error", true},
      {util::UnavailableError("m").WithReason(ErrorReason::kModelLoading), 503, "server_error",
       "model_loading", "api_error", false},
      {util::UnavailableError("m").WithReason(ErrorReason::kShuttingDown), 503, "server_error",
       "shutting_down", "overloaded_error", false},
      {util::DeadlineExceededError("m").WithReason(ErrorReason::kTimeout), 504, "server_error",
       "timeout", "api_error", false},
      // A remote backend's upstream.
      {util::InvalidArgumentError("m").WithReason(ErrorReason::kUnsupportedByBackend), 400,
       "invalid_request_error", "unsupported_by_backend", "invalid_request_error", false},
      {util::InvalidArgumentError("m").WithReason(ErrorReason::kUpstreamRejected), 400,
       "invalid_request_error", "upstream_rejected", "invalid_request_error", false},
      {util::ResourceExhaustedError("m").WithReason(ErrorReason::kUpstreamRateLimited), 429,
       "rate_limit_error", "upstream_rate_limited", "rate_limit_error", true},
      {util::UnavailableError("m").WithReason(ErrorReason::kUpstreamOverloaded), 503,
       "server_error", "upstream_overloaded", "overloaded_error", true},
      {util::UnavailableError("m").WithReason(ErrorReason::kUpstreamUnavailable), 503,
       "server_error", "upstream_unavailable", "overloaded_error", true},
      {util::ResourceExhaustedError("m").WithReason(ErrorReason::kUpstreamBusy), 429,
       "rate_limit_error", "upstream_busy", "overloaded_error", true},
      {util::DeadlineExceededError("m").WithReason(ErrorReason::kUpstreamTimeout), 504,
       "server_error", "upstream_timeout", "api_error", false},
      {util::InternalError("m").WithReason(ErrorReason::kUpstreamError), 502, "server_error",
       "upstream_error", "api_error", false},
      {util::InternalError("m").WithReason(ErrorReason::kUpstreamProtocol), 502, "server_error",
       "upstream_protocol_error", "api_error", false},
      // Without a reason, by code.
      {util::InvalidArgumentError("m"), 400, "invalid_request_error", nullptr,
       "invalid_request_error", false},
      {util::OutOfRangeError("context length exceeded"), 400, "invalid_request_error", nullptr,
       "invalid_request_error", false},
      {util::PermissionDeniedError("m"), 403, "permission_error", nullptr, "permission_error",
       false},
      {util::ResourceExhaustedError("m"), 429, "rate_limit_error", nullptr, "rate_limit_error",
       true},
      {util::CancelledError("m"), 499, "invalid_request_error", nullptr, "api_error", false},
      {util::UnavailableError("m"), 503, "server_error", nullptr, "overloaded_error", false},
      {util::DeadlineExceededError("m"), 504, "server_error", nullptr, "api_error", false},
      {util::InternalError("m"), 500, "server_error", nullptr, "api_error", false},
      {util::DataLossError("m"), 500, "server_error", nullptr, "api_error", false},
      // A reason wins over the code it came with.
      {util::InternalError("m").WithReason(ErrorReason::kQueueFull), 429, "rate_limit_error",
       "queue_full", "overloaded_error", true},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.status.ToString());
    const ErrorMapping& m = MapError(r.status);
    EXPECT_EQ(m.http_status, r.http);
    EXPECT_EQ(HttpStatus(r.status), r.http);
    EXPECT_EQ(m.retry_after, r.retry_after);
    const json openai = json::parse(RenderError(ApiKind::kOpenAIChat, r.status));
    EXPECT_EQ(openai["error"]["type"], r.openai_type);
    EXPECT_EQ(openai["error"]["code"], r.openai_code ? json(r.openai_code) : json(nullptr));
    EXPECT_EQ(openai["error"]["message"], r.status.message());
    EXPECT_EQ(openai["error"]["param"],
              r.status.field().empty() ? json(nullptr) : json(r.status.field()));
    const json anthropic = json::parse(RenderError(ApiKind::kAnthropicMessages, r.status));
    EXPECT_EQ(anthropic["type"], "error");
    EXPECT_EQ(anthropic["error"]["type"], r.anthropic_type);
    EXPECT_EQ(anthropic["error"]["message"], r.status.message());
  }
  EXPECT_EQ(MapError(util::OkStatus()).http_status, 200);
}

// The message is for people: nothing in it changes the mapping.
TEST(ErrorMapping, MessagesDoNotClassify) {
  const json j = json::parse(RenderError(
      ApiKind::kOpenAIChat,
      util::InvalidArgumentError("'temperature' ... context length exceeded ... model")));
  EXPECT_EQ(j["error"]["param"], nullptr);
  EXPECT_EQ(j["error"]["code"], nullptr);
}

// Errors inside a stream use the same bodies, framed as each API frames them.
TEST(ErrorMapping, StreamErrorsAreFramedPerApi) {
  const util::Status st =
      util::DeadlineExceededError("the request timed out").WithReason(ErrorReason::kTimeout);
  const std::string openai = RenderStreamError(ApiKind::kOpenAIChat, st);
  ASSERT_EQ(openai.rfind("data: ", 0), 0u);
  EXPECT_EQ(json::parse(openai.substr(6))["error"]["code"], "timeout");
  const std::string anthropic = RenderStreamError(ApiKind::kAnthropicMessages, st);
  ASSERT_EQ(anthropic.rfind("event: error\ndata: ", 0), 0u);
  EXPECT_EQ(json::parse(anthropic.substr(19))["error"]["type"], "api_error");
}

}  // namespace
}  // namespace strata::server
