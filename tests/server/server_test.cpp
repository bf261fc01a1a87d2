// The HTTP server in-process on a loopback port, driven with a real HTTP
// client: API shapes, errors, auth, limits, streaming and disconnects.
#include "server/server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "gateway/gateway.h"
#include "grammar/json_machine.h"
#include "testing/tiny_model.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::server {
namespace {

using nlohmann::json;

class ServerTest : public ::testing::Test {
 protected:
  void Start(ApiKeys keys = ApiKeys(), int max_running = 4, int max_queue = 4) {
    tiny_ = testing::MakeTinyModel();
    ASSERT_NE(tiny_.model, nullptr);
    engine::EngineOptions eo;
    eo.n_ctx = 128;
    eo.n_seq_max = 8;
    engine_ = std::move(engine::Engine::Create(*tiny_.model, eo, *log_)).value();
    sched_ = std::move(engine::Scheduler::Start(
                           *engine_, {.max_running = max_running, .max_queue = max_queue}, *log_))
                 .value();
    gateway::GatewayOptions go;
    go.model_name = "tiny";
    go.max_tokens_cap = 64;
    gw_ = std::move(gateway::Gateway::Create(*tiny_.model, *sched_, metrics_, go, util::RealClock(),
                                             *log_))
              .value();
    ServerOptions so;
    so.port = 0;
    so.limits.max_body_bytes = 64 * 1024;
    so.http_threads = 16;
    srv_ = std::move(HttpServer::Create(so, std::move(keys), metrics_, util::RealClock(), *log_))
               .value();
    auto port = srv_->Start();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    port_ = *port;
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    if (srv_) srv_->Stop();
    srv_.reset();
    gw_.reset();
    sched_.reset();
  }
  httplib::Result Post(const std::string& path, const std::string& body,
                       const httplib::Headers& headers = {}) {
    return client_->Post(path.c_str(), headers, body, "application/json");
  }

  testing::TinyModel tiny_;
  std::unique_ptr<util::CapturingLogger> log_ = std::make_unique<util::CapturingLogger>();
  obs::MetricsRegistry metrics_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::Scheduler> sched_;
  std::unique_ptr<gateway::Gateway> gw_;
  std::unique_ptr<HttpServer> srv_;
  std::unique_ptr<httplib::Client> client_;
  int port_ = 0;
};

const char* kChat =
    R"({"model":"tiny","messages":[{"role":"user","content":"the cat"}],"max_tokens":6,"temperature":0})";

TEST_F(ServerTest, HealthIs503UntilTheModelIsReady) {
  Start();
  auto r = client_->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(Post("/v1/chat/completions", kChat)->status, 503);
  srv_->SetGateway(gw_.get());
  EXPECT_EQ(client_->Get("/health")->status, 200);
}

TEST_F(ServerTest, ChatCompletionHasTheOpenAIShape) {
  Start();
  srv_->SetGateway(gw_.get());
  auto r = Post("/v1/chat/completions", kChat, {{"X-Request-ID", "abc-123"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("X-Request-ID"), "abc-123");
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"], "chatcmpl-abc-123");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 0);
  // Greedy is deterministic.
  EXPECT_EQ(
      json::parse(Post("/v1/chat/completions", kChat)->body)["choices"][0]["message"]["content"],
      j["choices"][0]["message"]["content"]);
}

TEST_F(ServerTest, StreamingSendsChunksThenDone) {
  Start();
  srv_->SetGateway(gw_.get());
  auto r = Post("/v1/chat/completions",
                R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4,
                    "temperature":0,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::vector<json> chunks;
  size_t pos = 0;
  bool done = false;
  while ((pos = r->body.find("data: ", pos)) != std::string::npos) {
    const size_t end = r->body.find("\n\n", pos);
    const std::string data = r->body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") {
      done = true;
      break;
    }
    chunks.push_back(json::parse(data));
  }
  EXPECT_TRUE(done);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 4);
}

TEST_F(ServerTest, AnthropicMessagesAndErrorsUseAnthropicShapes) {
  Start();
  srv_->SetGateway(gw_.get());
  auto r = Post(
      "/v1/messages",
      R"({"model":"tiny","max_tokens":5,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]})");
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["type"], "message");
  EXPECT_EQ(j["content"][0]["type"], "text");
  EXPECT_EQ(j["stop_reason"], "max_tokens");
  EXPECT_EQ(j["usage"]["output_tokens"], 5);
  auto bad =
      Post("/v1/messages", R"({"model":"tiny","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(bad->status, 400);
  j = json::parse(bad->body);
  EXPECT_EQ(j["type"], "error");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("max_tokens"), std::string::npos);
}

// @anthropic-ai/sdk reads 'request-id' (message._request_id, MessageStream.request_id,
// APIError.requestID); the OpenAI SDK reads 'x-request-id'.
TEST_F(ServerTest, AnthropicResponsesCarryTheRequestIdAsRequestIdToo) {
  Start();
  srv_->SetGateway(gw_.get());
  const std::string body =
      R"({"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"hi"}]})";
  auto r = Post("/v1/messages", body, {{"X-Request-ID", "rid-7"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("request-id"), "rid-7");
  EXPECT_EQ(r->get_header_value("X-Request-ID"), "rid-7");
  auto bad = Post("/v1/messages", R"({"model":"nope","max_tokens":2,"messages":[]})",
                  {{"X-Request-ID", "rid-8"}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(bad->get_header_value("request-id"), "rid-8");
  auto chat = Post("/v1/chat/completions", kChat, {{"X-Request-ID", "rid-9"}});
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->get_header_value("X-Request-ID"), "rid-9");
  EXPECT_FALSE(chat->has_header("request-id"));
}

TEST_F(ServerTest, BadRequestsGetPreciseErrors) {
  Start();
  srv_->SetGateway(gw_.get());
  auto check = [&](const std::string& body, int status, const std::string& needle) {
    auto r = Post("/v1/chat/completions", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << body << " -> " << r->body;
    const json j = json::parse(r->body);
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r->body;
  };
  check(R"({"model":"tiny","messages":[})", 400, "malformed JSON at byte 29");
  check(R"([1,2])", 400, "must be a JSON object");
  check(R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"temperature":"hot"})", 400,
        "'temperature' must be a number");
  check(R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"n":0})", 400, "'n'");
  check(R"({"model":"tiny","messages":[]})", 400, "'messages' must be a non-empty array");
  check(R"({"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url"}]}]})", 400,
        "only text content");
  check(
      R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})",
      400, "'tools[0].function' must be an object");
  check(R"({"model":"nope","messages":[{"role":"user","content":"x"}]})", 404, "model 'nope'");
  check(R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":500})", 400,
        "max_tokens 500");
  auto too_long =
      Post("/v1/completions",
           json({{"model", "tiny"}, {"prompt", std::string(600, 'a')}, {"max_tokens", 5}}).dump());
  EXPECT_EQ(too_long->status, 400);
  EXPECT_EQ(json::parse(too_long->body)["error"]["code"], "context_length_exceeded");
  auto huge = Post("/v1/chat/completions", std::string(100 * 1024, ' '));
  EXPECT_EQ(huge->status, 413);
  EXPECT_NE(huge->body.find("exceeds the limit"), std::string::npos);
  auto route = client_->Get("/v2/whatever");
  EXPECT_EQ(route->status, 404);
  EXPECT_TRUE(json::accept(route->body)) << route->body;
}

TEST_F(ServerTest, ApiKeysMapToTenantsAndAreRequired) {
  Start(*ApiKeys::Parse("key-alpha-0001 alpha\nkey-beta-00002 beta\n", "keys"));
  srv_->SetGateway(gw_.get());
  EXPECT_EQ(Post("/v1/chat/completions", kChat)->status, 401);
  EXPECT_EQ(
      Post("/v1/chat/completions", kChat, {{"Authorization", "Bearer wrong-key-000"}})->status,
      401);
  EXPECT_EQ(
      Post("/v1/chat/completions", kChat, {{"Authorization", "Bearer key-alpha-0001"}})->status,
      200);
  EXPECT_EQ(Post("/v1/messages",
                 R"({"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"x"}]})",
                 {{"x-api-key", "key-beta-00002"}})
                ->status,
            200);
  EXPECT_EQ(client_->Get("/v1/models")->status, 401);
}

TEST_F(ServerTest, FullQueueIs429WithRetryAfter) {
  Start(ApiKeys(), /*max_running=*/1, /*max_queue=*/0);
  srv_->SetGateway(gw_.get());
  // One streaming request holds the only slot (read in the background) while
  // a second one must be refused. The first may finish before the second
  // arrives (a tiny model is fast), so try a few times: the test needs one
  // attempt where the slot was held, and never waits without a bound.
  bool refused = false;
  for (int attempt = 0; attempt < 20 && !refused; ++attempt) {
    std::atomic<bool> done{false};
    httplib::Client slow("127.0.0.1", port_);
    std::thread holder([&] {
      slow.Post(
          "/v1/completions",
          R"({"model":"tiny","prompt":"the cat","max_tokens":60,"stream":true,"temperature":0,)"
          R"("ignore_eos":true,"no_cache":true})",
          "application/json");
      done = true;
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (sched_->Stats().running == 0 && !done && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    if (sched_->Stats().running > 0) {
      auto r = Post("/v1/chat/completions", kChat);
      ASSERT_TRUE(r);
      if (r->status == 429) {
        refused = true;
        EXPECT_EQ(r->get_header_value("Retry-After"), "1");
      } else {
        EXPECT_EQ(r->status, 200) << r->body;  // the slot had just been freed
      }
    }
    holder.join();
  }
  EXPECT_TRUE(refused) << "no attempt caught the only slot held";
}

TEST_F(ServerTest, ClientDisconnectMidStreamCancelsTheRequest) {
  Start();
  srv_->SetGateway(gw_.get());
  httplib::Client c("127.0.0.1", port_);
  size_t received = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"model":"tiny","prompt":"the cat","max_tokens":64,"stream":true,"temperature":0})";
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char*, size_t n, uint64_t, uint64_t) {
    received += n;
    return received < 300;  // hang up after a few chunks
  };
  auto r = c.send(req);
  EXPECT_FALSE(r);  // we aborted it
  EXPECT_GT(received, 0u);
  // The scheduler lets go of it: everything finishes and every block is free.
  EXPECT_TRUE(sched_->Drain(std::chrono::seconds(30)));
  EXPECT_EQ(sched_->Stats().kv_blocks_used, 0);
}

TEST_F(ServerTest, MetricsAreServed) {
  Start();
  srv_->SetGateway(gw_.get());
  Post("/v1/chat/completions", kChat);
  auto m = client_->Get("/metrics");
  ASSERT_EQ(m->status, 200);
  EXPECT_NE(m->body.find(
                "strata_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 1"),
            std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("strata_kv_blocks_free"), std::string::npos);
  EXPECT_NE(m->body.find("strata_time_to_first_token_seconds_count 1"), std::string::npos);
}

TEST_F(ServerTest, ABurstOfConnectionsIsServedInFull) {
  // 200 clients connect before any sends a byte, so the server's accept
  // queue holds many at once. With httplib's listen backlog of 5 the kernel
  // fell back to SYN cookies and 6-38 of the 200 were closed unanswered;
  // every one must be answered.
  Start();
  srv_->SetGateway(gw_.get());
  constexpr int kClients = 200;
  std::vector<int> fds;
  for (int i = 0; i < kClients; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    timeval tv{30, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(0, ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr))) << i;
    fds.push_back(fd);
  }
  const std::string req = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  int answered = 0;
  std::string first_unanswered;
  for (int fd : fds) {
    ASSERT_EQ(static_cast<ssize_t>(req.size()), ::send(fd, req.data(), req.size(), MSG_NOSIGNAL));
  }
  for (int fd : fds) {
    std::string got;
    char buf[512];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
      got.append(buf, static_cast<size_t>(n));
    if (got.rfind("HTTP/1.1 200", 0) == 0) {
      ++answered;
    } else if (first_unanswered.empty()) {
      first_unanswered = got.empty() ? "(closed without an answer)" : got.substr(0, 80);
    }
    ::close(fd);
  }
  EXPECT_EQ(answered, kClients) << "first unanswered: " << first_unanswered;
}

TEST(ApiKeysTest, ParsingAndConstantTimeComparison) {
  auto k = ApiKeys::Parse("# comment\n\nsecret-key-1  tenant_a\r\nsecret-key-2\ttenant-b\n", "f");
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(*k->Authenticate("secret-key-2"), "tenant-b");
  EXPECT_EQ(k->Authenticate("secret-key-3").status().code(), util::StatusCode::kUnauthenticated);
  EXPECT_EQ(k->Authenticate("").status().code(), util::StatusCode::kUnauthenticated);
  EXPECT_NE(ApiKeys::Parse("short t\n", "f").status().message().find("f:1"), std::string::npos);
  EXPECT_FALSE(ApiKeys::Parse("longenoughkey bad/tenant\n", "f").ok());
  EXPECT_FALSE(ApiKeys::Parse("longenoughkey a\nlongenoughkey b\n", "f").ok());
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
}

}  // namespace
}  // namespace strata::server

namespace strata::server {
namespace {

TEST_F(ServerTest, EmbeddingsAreUnitVectorsPerInput) {
  Start();
  srv_->SetGateway(gw_.get());
  auto r = Post("/v1/embeddings", R"({"model":"tiny","input":["the cat","a dog","the cat"]})");
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  ASSERT_EQ(j["data"].size(), 3u);
  const auto a = j["data"][0]["embedding"].get<std::vector<float>>();
  const auto b = j["data"][1]["embedding"].get<std::vector<float>>();
  const auto c = j["data"][2]["embedding"].get<std::vector<float>>();
  EXPECT_EQ(a.size(), 64u);  // n_embd of the tiny model
  double na = 0, dot = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    na += a[i] * a[i];
    dot += a[i] * b[i];
  }
  EXPECT_NEAR(na, 1.0, 1e-4);
  EXPECT_LT(dot, 0.9999);  // different texts, different vectors
  EXPECT_EQ(a, c);         // same text, same vector
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 0);
  auto b64 = Post("/v1/embeddings", R"({"model":"tiny","input":"x","encoding_format":"base64"})");
  ASSERT_EQ(b64->status, 200);
  EXPECT_TRUE(json::parse(b64->body)["data"][0]["embedding"].is_string());
  EXPECT_EQ(Post("/v1/embeddings", R"({"model":"tiny","input":[]})")->status, 400);
  EXPECT_EQ(Post("/v1/embeddings", R"({"model":"tiny","input":[1,-5]})")->status, 400);
  EXPECT_EQ(Post("/v1/embeddings", R"({"model":"x","input":"a"})")->status, 404);
}

// strata's own samplers are request fields: entropy-targeted temperature,
// typical-p and Mirostat v2, validated like the standard ones.
TEST_F(ServerTest, StrataSamplingFieldsAreAcceptedAndValidated) {
  Start();
  srv_->SetGateway(gw_.get());
  auto post = [&](const std::string& extra) {
    return Post(
        "/v1/chat/completions",
        R"({"model":"tiny","max_tokens":4,"seed":3,"messages":[{"role":"user","content":"hi"}])" +
            extra + "}");
  };
  for (const std::string ok :
       {R"(,"target_entropy":1.5)", R"(,"target_entropy":0.5,"entropy_tail_nats":2)",
        R"(,"typical_p":0.9)", R"(,"mirostat":2,"mirostat_tau":3,"mirostat_eta":0.2)",
        R"(,"ignore_eos":true)"}) {
    auto r = post(ok);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << ok << " -> " << r->body;
  }
  // The same seed and target give the same text.
  auto a = post(R"(,"temperature":1,"target_entropy":1.0,"cache":{"l1":false})");
  auto b = post(R"(,"temperature":1,"target_entropy":1.0,"cache":{"l1":false})");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(json::parse(a->body)["choices"][0]["message"]["content"],
            json::parse(b->body)["choices"][0]["message"]["content"]);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"(,"target_entropy":-1)", "'target_entropy'"},
      {R"(,"target_entropy":"high")", "'target_entropy'"},
      {R"(,"typical_p":0)", "'typical_p'"},
      {R"(,"mirostat":1)", "'mirostat'"},
      {R"(,"mirostat":2,"target_entropy":1)", "cannot be used together"},
      {R"(,"mirostat_eta":5)", "'mirostat_eta'"},
      {R"(,"ignore_eos":1)", "'ignore_eos'"},
  };
  for (const auto& [extra, needle] : bad) {
    auto r = post(extra);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << extra << " -> " << r->body;
    EXPECT_NE(r->body.find(needle), std::string::npos) << extra << " -> " << r->body;
  }
}

// session_id names a conversation: it comes back in x-strata-session-id and
// labels the request's log lines (the access line and the choice's trace
// line); a malformed one is a 400 naming the field, in either API's shape.
TEST_F(ServerTest, SessionIdIsEchoedLoggedAndChecked) {
  Start();
  srv_->SetGateway(gw_.get());
  auto chat = Post("/v1/chat/completions",
                   R"({"model":"tiny","max_tokens":3,"session_id":"conv-42:user@x.y",)"
                   R"("messages":[{"role":"user","content":"hi"}]})",
                   {{"X-Request-ID", "sess-1"}});
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  EXPECT_EQ(chat->get_header_value("x-strata-session-id"), "conv-42:user@x.y");
  bool access = false, trace = false;
  for (const std::string& line : log_->Lines()) {
    if (line.find("sess-1") == std::string::npos) continue;
    if (line.find("POST /v1/chat/completions 200") != std::string::npos) {
      access = access || line.find("session=conv-42:user@x.y") != std::string::npos;
    }
    if (line.find("trace") != std::string::npos) {
      trace = trace || line.find("session=conv-42:user@x.y") != std::string::npos;
    }
  }
  EXPECT_TRUE(access) << "no access log line names the session";
  EXPECT_TRUE(trace) << "no trace line names the session";

  auto anthropic =
      Post("/v1/messages", R"({"model":"tiny","max_tokens":2,"session_id":"s1","stream":true,)"
                           R"("messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(anthropic);
  EXPECT_EQ(anthropic->status, 200) << anthropic->body;
  EXPECT_EQ(anthropic->get_header_value("x-strata-session-id"), "s1");
  // Without a session there is no header.
  auto none = Post("/v1/chat/completions", kChat);
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_header("x-strata-session-id"));

  const std::string too_long = "\"" + std::string(129, 'a') + "\"";
  for (const std::string& bad : {std::string(R"("")"), std::string(R"(7)"), std::string(R"("a b")"),
                                 std::string(R"("x\ny")"), too_long}) {
    auto r = Post(
        "/v1/chat/completions",
        R"({"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"hi"}],"session_id":)" +
            bad + "}");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad << " -> " << r->body;
    EXPECT_NE(r->body.find("'session_id'"), std::string::npos) << bad << " -> " << r->body;
    EXPECT_FALSE(r->has_header("x-strata-session-id"));
  }
  auto bad_anthropic =
      Post("/v1/messages", R"({"model":"tiny","max_tokens":2,"session_id":"no spaces",)"
                           R"("messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(bad_anthropic);
  EXPECT_EQ(bad_anthropic->status, 400);
  EXPECT_EQ(json::parse(bad_anthropic->body)["type"], "error");
}

// logit_bias on the local engine: +100 forces a token even when sampling,
// -100 bans the greedy choice; malformed maps, ids beyond the vocabulary and
// unknown keys inside strata's "cache" object are 400s naming the field.
TEST_F(ServerTest, LogitBiasForcesAndBansTokensAndBadMapsAre400s) {
  Start();
  srv_->SetGateway(gw_.get());
  const text::Tokenizer& tok = tiny_.model->tokenizer();
  const auto complete = [&](const json& extra) {
    json body = {{"model", "tiny"},
                 {"prompt", "the cat"},
                 {"max_tokens", 3},
                 {"ignore_eos", true},
                 {"no_cache", true}};
    body.update(extra);
    auto r = Post("/v1/completions", body.dump());
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    return r ? json::parse(r->body)["choices"][0]["text"].get<std::string>() : "";
  };
  // A word token ("▁" and letters): three of them read as the word three times.
  int32_t k = -1;
  for (int32_t id = tok.n_vocab() / 2; id < tok.n_vocab() && k < 0; ++id) {
    std::string_view piece = tok.Piece(id);
    const std::string_view space = "\xe2\x96\x81";  // the SentencePiece space
    if (piece.substr(0, space.size()) == space) piece.remove_prefix(space.size());
    if (!piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    const bool letters = piece.size() >= 2 && std::all_of(piece.begin(), piece.end(), [](char c) {
                           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
                         });
    if (letters && !tok.IsEog(id)) k = id;
  }
  ASSERT_GE(k, 0) << "no word token in the tiny vocabulary";
  const std::vector<int32_t> three = {k, k, k};
  const std::string forced =
      complete({{"temperature", 1.0}, {"seed", 3}, {"logit_bias", {{std::to_string(k), 100}}}});
  EXPECT_TRUE(forced == tok.Decode(three, {.strip_leading_space = false}) ||
              forced == tok.Decode(three))
      << "'" << forced << "' is not token " << k << " three times";

  // Ban every token that reads as the greedy answer's first token.
  const std::string first = complete({{"temperature", 0}, {"max_tokens", 1}});
  ASSERT_FALSE(first.empty());
  json ban = json::object();
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const std::vector<int32_t> one = {id};
    if (tok.Decode(one, {.strip_leading_space = false}) == first) ban[std::to_string(id)] = -100;
  }
  ASSERT_FALSE(ban.empty()) << "no token reads '" << first << "'";
  const std::string banned = complete({{"temperature", 0}, {"max_tokens", 1}, {"logit_bias", ban}});
  EXPECT_NE(banned, first);

  const auto error = [&](const std::string& extra, const std::string& param,
                         const std::string& needle) {
    const std::string body =
        R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":2)" + extra +
        "}";
    auto r = Post("/v1/chat/completions", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body << " -> " << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["error"]["param"], param) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r->body;
  };
  error(R"(,"logit_bias":{"abc":-100})", "logit_bias", "'abc', which is not a token id");
  error(R"(,"logit_bias":{"-5":1})", "logit_bias", "not a token id");
  error(R"(,"logit_bias":{"5":101})", "logit_bias", "[-100, 100]");
  error(R"(,"logit_bias":{"5":"x"})", "logit_bias", "[-100, 100]");
  error(R"(,"logit_bias":[1,2])", "logit_bias", "must be an object");
  error(R"(,"logit_bias":{"7":1,"07":2})", "logit_bias", "token 7 twice");
  error(R"(,"logit_bias":{"99999999":1})", "logit_bias", "vocabulary");
  error(R"(,"cache":{"l2":false})", "cache.l2", "is not a cache control");
  error(R"(,"cache":{"semantic":1})", "cache.semantic", "boolean");
  // null and {} are no bias; "semantic" is a cache control like "l3".
  for (const char* none : {R"(,"logit_bias":null)", R"(,"logit_bias":{})",
                           R"(,"cache":{"semantic":true,"l3":false})"}) {
    const std::string body =
        R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":2)" +
        std::string(none) + "}";
    EXPECT_EQ(Post("/v1/chat/completions", body)->status, 200) << body;
  }
}

// /v1/completions takes an array of prompts (each with its n choices,
// numbered on from the previous prompt's, as OpenAI numbers them), token-id
// prompts, and arrays of those; each prompt's choices are what it gets alone.
TEST_F(ServerTest, CompletionsTakeArraysOfPromptsAndTokenIds) {
  Start();
  srv_->SetGateway(gw_.get());
  const auto post = [&](const json& prompt, const json& extra = json::object()) {
    json body = {{"model", "tiny"},
                 {"prompt", prompt},
                 {"max_tokens", 4},
                 {"temperature", 0},
                 {"ignore_eos", true}};
    body.update(extra);
    auto r = Post("/v1/completions", body.dump());
    EXPECT_TRUE(r) << body.dump();
    return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
  };
  const auto alone = [&](const json& prompt) {
    const auto [status, body] = post(prompt);
    EXPECT_EQ(status, 200) << body;
    const json j = json::parse(body);
    return std::make_pair(j["choices"][0]["text"].get<std::string>(),
                          j["usage"]["prompt_tokens"].get<int>());
  };
  const auto [cat, cat_tokens] = alone("the cat");
  const auto [dog, dog_tokens] = alone("a big dog ran");

  const auto [status, body] = post(json::array({"the cat", "a big dog ran"}), {{"n", 2}});
  ASSERT_EQ(status, 200) << body;
  const json j = json::parse(body);
  ASSERT_EQ(j["choices"].size(), 4u) << body;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], i < 2 ? cat : dog) << "choice " << i;
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], cat_tokens + dog_tokens);
  EXPECT_EQ(j["usage"]["completion_tokens"], 16);

  // Streamed: the same texts, choice by choice, and the same usage.
  const auto [sstatus, sbody] =
      post(json::array({"the cat", "a big dog ran"}),
           {{"n", 2}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(sstatus, 200) << sbody;
  std::vector<std::string> texts(4);
  json usage;
  size_t at = 0;
  while ((at = sbody.find("data: ", at)) != std::string::npos) {
    const size_t end = sbody.find("\n\n", at);
    const std::string data = sbody.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") break;
    const json c = json::parse(data);
    if (c.contains("usage") && c["usage"].is_object()) usage = c["usage"];
    for (const json& choice : c["choices"]) {
      texts.at(choice["index"].get<size_t>()) += choice["text"].get<std::string>();
    }
  }
  EXPECT_EQ(texts, (std::vector<std::string>{cat, cat, dog, dog}));
  EXPECT_EQ(usage["prompt_tokens"], cat_tokens + dog_tokens);

  // Token ids: the ids "the cat" encodes to (BOS included) give its answer.
  const std::vector<int32_t> ids = tiny_.model->tokenizer().Encode("the cat");
  EXPECT_EQ(alone(ids), std::make_pair(cat, cat_tokens));
  const auto [mstatus, mbody] = post(json::array({json(ids), "a big dog ran"}));
  ASSERT_EQ(mstatus, 200) << mbody;
  EXPECT_EQ(json::parse(mbody)["choices"][0]["text"], cat);
  EXPECT_EQ(json::parse(mbody)["choices"][1]["text"], dog);

  // What cannot be a prompt is a 400 naming where.
  for (const auto& [prompt, param] : std::vector<std::pair<json, std::string>>{
           {json::array(), "prompt"},
           {json::array({1.5}), "prompt[0]"},
           {json::array({-1}), "prompt[0]"},
           {json::array({json::array({1}), json::array()}), "prompt[1]"},
           {json::array({"a", 3}), "prompt[1]"},
           {json::array({99999}), "prompt"},
           {json(7), "prompt"}}) {
    const auto [bad_status, bad_body] = post(prompt);
    EXPECT_EQ(bad_status, 400) << prompt.dump() << " -> " << bad_body;
    EXPECT_EQ(json::parse(bad_body)["error"]["param"], param)
        << prompt.dump() << " -> " << bad_body;
  }
  json many = json::array();
  for (int i = 0; i < 65; ++i) many.push_back("p");
  EXPECT_EQ(post(many).first, 400);
  EXPECT_EQ(post(json::array({"a", "b"}), {{"n", 100}}).first, 400);
}

// response_format json_object on a random-weight model, whose free text is
// gibberish: every answer that ends is one JSON object, and one cut by
// max_tokens is still a prefix of one.
TEST_F(ServerTest, JsonObjectResponsesAreJsonWhateverTheModel) {
  Start();
  srv_->SetGateway(gw_.get());
  int ended = 0;
  for (int seed = 0; seed < 24; ++seed) {
    const json body = {
        {"model", "tiny"},  {"messages", {{{"role", "user"}, {"content", "the cat"}}}},
        {"max_tokens", 48}, {"temperature", 1.0},
        {"seed", seed},     {"response_format", {{"type", "json_object"}}}};
    auto r = Post("/v1/chat/completions", body.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    const std::string text = j["choices"][0]["message"]["content"];
    const std::string finish = j["choices"][0]["finish_reason"];
    grammar::JsonMachine m;
    EXPECT_TRUE(m.FeedAll(text)) << "seed " << seed << ": " << text;
    if (finish == "stop") {
      ++ended;
      EXPECT_TRUE(m.complete()) << text;
      const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
      EXPECT_TRUE(parsed.is_object()) << "seed " << seed << ": " << text;
    } else {
      EXPECT_EQ(finish, "length") << text;
    }
  }
  EXPECT_GT(ended, 0) << "no answer finished within 48 tokens";
  // What is not supported is a 400 naming it.
  for (const auto& [format, param] : std::vector<std::pair<json, std::string>>{
           {{{"type", "json_schema"}, {"json_schema", json::object()}},
            "response_format.json_schema.name"},
           {{{"type", "yaml"}}, "response_format.type"},
           {json("json"), "response_format"}}) {
    const json body = {{"model", "tiny"},
                       {"messages", {{{"role", "user"}, {"content", "x"}}}},
                       {"max_tokens", 2},
                       {"response_format", format}};
    auto r = Post("/v1/chat/completions", body.dump());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], param) << r->body;
  }
}

}  // namespace
}  // namespace strata::server
