// L3 over HTTP: a paraphrase asked with "cache": {"l3": true} gets the stored
// answer of an earlier request of the same tenant, marked x-strata-cache: l3
// with x-strata-cache-similarity, in the shape it asked for (JSON or SSE,
// OpenAI or Anthropic); other tenants, requests that do not ask, and
// requests with other parameters are generated.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "gateway/gateway.h"
#include "server/server.h"
#include "testing/serving_stack.h"
#include "testing/tiny_model.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::server {
namespace {

using nlohmann::json;

class NearDupHeaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gateway::GatewayOptions go = testing::TinyGatewayOptions();
    go.l1.max_bytes = 4u << 20;
    go.coalesce = true;
    go.l3_mode = gateway::L3Mode::kOptIn;
    go.l3.max_bytes = 4u << 20;
    testing::StartServingStack(s_, go, metrics_, util::RealClock(), *log_);
    ASSERT_NE(s_.gw, nullptr);
    ServerOptions so;
    so.port = 0;
    so.http_threads = 8;
    auto keys = ApiKeys::Parse("key-alpha-1 alpha\nkey-beta-22 beta\n", "test");
    ASSERT_TRUE(keys.ok());
    srv_ = std::move(
               HttpServer::Create(so, std::move(keys).value(), metrics_, util::RealClock(), *log_))
               .value();
    auto port = srv_->Start();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    srv_->SetGateway(s_.gw.get());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    if (srv_) srv_->Stop();
    srv_.reset();
    s_.Stop();
  }
  httplib::Result Post(const std::string& path, const json& body,
                       const std::string& key = "key-alpha-1") {
    httplib::Headers h = {{"Authorization", "Bearer " + key}};
    return client_->Post(path.c_str(), h, body.dump(), "application/json");
  }
  static json Chat(const std::string& text, bool ask = true) {
    json j = {{"model", "tiny"},
              {"messages", {{{"role", "user"}, {"content", text}}}},
              {"max_tokens", 6},
              {"temperature", 0}};
    if (ask) j["cache"] = {{"l3", true}};
    return j;
  }
  static std::string StreamText(const std::string& body) {
    std::string text;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      const size_t end = body.find("\n\n", pos);
      const std::string data = body.substr(pos + 6, end - pos - 6);
      pos = end;
      if (data == "[DONE]") break;
      const json j = json::parse(data);
      if (j.contains("choices") && !j["choices"].empty() && j["choices"][0].contains("delta") &&
          j["choices"][0]["delta"].contains("content")) {
        text += j["choices"][0]["delta"]["content"].get<std::string>();
      } else if (j.value("type", "") == "content_block_delta") {
        text += j["delta"]["text"].get<std::string>();
      }
    }
    return text;
  }

  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  obs::MetricsRegistry metrics_;
  testing::ServingStack s_;
  std::unique_ptr<HttpServer> srv_;
  std::unique_ptr<httplib::Client> client_;
};

constexpr const char* kAsked = "What is the capital city of Australia?";
constexpr const char* kParaphrase = "what's the capital city of australia";

TEST_F(NearDupHeaderTest, AParaphraseIsAnsweredFromL3WithItsSimilarityInJsonAndSse) {
  auto a = Post("/v1/chat/completions", Chat(kAsked));
  ASSERT_TRUE(a);
  ASSERT_EQ(a->status, 200) << a->body;
  EXPECT_EQ(a->get_header_value("x-strata-cache"), "miss");
  EXPECT_FALSE(a->has_header("x-strata-cache-similarity"));
  auto b = Post("/v1/chat/completions", Chat(kParaphrase));
  ASSERT_TRUE(b);
  ASSERT_EQ(b->status, 200) << b->body;
  EXPECT_EQ(b->get_header_value("x-strata-cache"), "l3");
  const std::string sim = b->get_header_value("x-strata-cache-similarity");
  ASSERT_EQ(sim.size(), 5u) << sim;  // "0.962": three decimals
  EXPECT_GE(std::stod(sim), 0.93);
  EXPECT_LE(std::stod(sim), 1.0);
  const json ja = json::parse(a->body), jb = json::parse(b->body);
  EXPECT_EQ(jb["choices"][0]["message"]["content"], ja["choices"][0]["message"]["content"]);
  EXPECT_NE(jb["usage"]["prompt_tokens"], ja["usage"]["prompt_tokens"])
      << "usage counts this request's own prompt";
  EXPECT_EQ(jb["usage"]["completion_tokens"], ja["usage"]["completion_tokens"]);

  json streamed = Chat("What is the capital city of Australia");
  streamed["stream"] = true;
  auto c = Post("/v1/chat/completions", streamed);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->get_header_value("x-strata-cache"), "l3");
  EXPECT_TRUE(c->has_header("x-strata-cache-similarity"));
  EXPECT_EQ(c->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(StreamText(c->body), ja["choices"][0]["message"]["content"].get<std::string>());
}

TEST_F(NearDupHeaderTest, AnthropicMessagesReplayTheNearDuplicateInTheirOwnShape) {
  ASSERT_EQ(Post("/v1/chat/completions", Chat(kAsked))->status, 200);
  json m = Chat(kParaphrase);
  auto plain = Post("/v1/messages", m);
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  // Another endpoint kind with the same chat: the Anthropic default stop
  // strings and template are the same, so only the wording differs.
  EXPECT_EQ(plain->get_header_value("x-strata-cache"), "l3");
  const json jp = json::parse(plain->body);
  EXPECT_EQ(jp["type"], "message");
  m["stream"] = true;
  auto sse = Post("/v1/messages", m);
  ASSERT_TRUE(sse);
  EXPECT_EQ(sse->get_header_value("x-strata-cache"), "l3");
  EXPECT_NE(sse->body.find("event: message_stop"), std::string::npos);
  EXPECT_EQ(StreamText(sse->body), jp["content"][0]["text"].get<std::string>());
}

TEST_F(NearDupHeaderTest, AnotherTenantOrARequestThatDoesNotAskIsGenerated) {
  ASSERT_EQ(Post("/v1/chat/completions", Chat(kAsked))->status, 200);
  auto other = Post("/v1/chat/completions", Chat(kParaphrase), "key-beta-22");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->get_header_value("x-strata-cache"), "miss");
  auto unasked = Post("/v1/chat/completions", Chat(kParaphrase, false));
  EXPECT_EQ(unasked->get_header_value("x-strata-cache"), "miss");
  json refused = Chat("What is the capital city of Australia ?");
  refused["cache"] = {{"l3", false}};
  EXPECT_EQ(Post("/v1/chat/completions", refused)->get_header_value("x-strata-cache"), "miss");
  json no_cache = Chat("What is the capital city of Australia ??");
  no_cache["no_cache"] = true;
  EXPECT_EQ(Post("/v1/chat/completions", no_cache)->get_header_value("x-strata-cache"), "miss");
  json bad = Chat(kParaphrase);
  bad["cache"] = {{"l3", "yes"}};
  auto r = Post("/v1/chat/completions", bad);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("cache.l3"), std::string::npos) << r->body;
}

TEST_F(NearDupHeaderTest, OtherParametersAreAnotherNamespace) {
  ASSERT_EQ(Post("/v1/chat/completions", Chat(kAsked))->status, 200);
  json longer = Chat(kParaphrase);
  longer["max_tokens"] = 7;
  EXPECT_EQ(Post("/v1/chat/completions", longer)->get_header_value("x-strata-cache"), "miss");
  json stop = Chat(kParaphrase);
  stop["stop"] = {"zz"};
  EXPECT_EQ(Post("/v1/chat/completions", stop)->get_header_value("x-strata-cache"), "miss");
  json seeded = Chat(kParaphrase);
  seeded["temperature"] = 0.5;
  seeded["seed"] = 11;
  EXPECT_EQ(Post("/v1/chat/completions", seeded)->get_header_value("x-strata-cache"), "miss");
}

}  // namespace
}  // namespace strata::server
