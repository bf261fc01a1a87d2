// The token endpoints, model-name resolution and CORS of the HTTP server,
// in-process on a loopback port with a real client; and the count_tokens
// parser on its own.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "server/api.h"
#include "server/server.h"
#include "testing/serving_stack.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::server {
namespace {

using nlohmann::json;

TEST(CountTokensParse, NeedsNoMaxTokensAndParsesAsMessagesDoes) {
  const std::string body =
      R"({"model":"m","system":"s","messages":[{"role":"user","content":"hi"}]})";
  auto counted = ParseCountTokensRequest(body);
  ASSERT_TRUE(counted.ok()) << counted.status().ToString();
  json with_max = json::parse(body);
  with_max["max_tokens"] = 7;
  with_max["stream"] = true;
  auto sent = ParseRequest(ApiKind::kAnthropicMessages, with_max.dump());
  ASSERT_TRUE(sent.ok());
  ASSERT_EQ(counted->request.messages.size(), sent->request.messages.size());
  for (size_t i = 0; i < sent->request.messages.size(); ++i) {
    EXPECT_EQ(counted->request.messages[i].role, sent->request.messages[i].role);
    EXPECT_EQ(counted->request.messages[i].content, sent->request.messages[i].content);
  }
  EXPECT_FALSE(counted->stream);
  // stream does not matter to a count; the rest is checked as for messages.
  EXPECT_TRUE(ParseCountTokensRequest(with_max.dump()).ok());
  for (const char* bad :
       {"", "{", "[]", R"({"model":"m"})", R"({"model":"m","messages":[]})",
        R"({"model":"m","messages":[{"role":"tool","content":"x"}]})",
        R"({"model":"m","max_tokens":"x","messages":[{"role":"user","content":"x"}]})"}) {
    auto r = ParseCountTokensRequest(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(HttpStatus(r.status()), 400) << bad;
  }
}

TEST(ErrorMappingRoutes, NoRouteAndWrongMethod) {
  const auto& none = MapError(util::NotFoundError("x").WithReason(util::ErrorReason::kNoRoute));
  EXPECT_EQ(none.http_status, 404);
  EXPECT_STREQ(none.openai_code, "not_found");
  EXPECT_STREQ(none.anthropic_type, "not_found_error");
  const auto& method =
      MapError(util::InvalidArgumentError("x").WithReason(util::ErrorReason::kMethodNotAllowed));
  EXPECT_EQ(method.http_status, 405);
  EXPECT_STREQ(method.openai_code, "method_not_allowed");
  EXPECT_EQ(util::ErrorReasonName(util::ErrorReason::kMethodNotAllowed), "method_not_allowed");
}

class ApiEndpointsTest : public ::testing::Test {
 protected:
  void Start(ServerOptions so) {
    testing::StartServingStack(stack_, testing::TinyGatewayOptions(), metrics_, util::RealClock(),
                               *log_);
    ASSERT_NE(stack_.gw, nullptr);
    so.port = 0;
    srv_ = std::move(HttpServer::Create(so, ApiKeys(), metrics_, util::RealClock(), *log_)).value();
    auto port = srv_->Start();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    srv_->SetGateway(stack_.gw.get());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    if (srv_) srv_->Stop();
    srv_.reset();
    stack_.Stop();
  }
  httplib::Result Post(const std::string& path, const json& body,
                       const httplib::Headers& headers = {}) {
    return client_->Post(path.c_str(), headers, body.dump(), "application/json");
  }

  std::unique_ptr<util::CapturingLogger> log_ = std::make_unique<util::CapturingLogger>();
  obs::MetricsRegistry metrics_;
  testing::ServingStack stack_;
  std::unique_ptr<HttpServer> srv_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ApiEndpointsTest, CountTokensIsThePromptTheGatewayTokenizes) {
  Start({});
  const json body = {{"model", "tiny"},
                     {"system", "sys"},
                     {"messages",
                      {{{"role", "user"}, {"content", "the cat"}},
                       {{"role", "assistant"}, {"content", "sat"}},
                       {{"role", "user"}, {"content", "on the mat"}}}}};
  auto r = Post("/v1/messages/count_tokens", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json with_max = body;
  with_max["max_tokens"] = 4;
  auto parsed = ParseRequest(ApiKind::kAnthropicMessages, with_max.dump());
  ASSERT_TRUE(parsed.ok());
  parsed->request.model = "tiny";
  auto tokens = stack_.gw->Tokenize(parsed->request);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(json::parse(r->body)["input_tokens"], tokens->size());
  // A prompt past the context is still counted: the count is what a client
  // checks before it sends.
  json huge = body;
  huge["messages"][0]["content"] = std::string(2000, 'a');
  auto big = Post("/v1/messages/count_tokens", huge);
  ASSERT_TRUE(big);
  ASSERT_EQ(big->status, 200) << big->body;
  EXPECT_GT(json::parse(big->body)["input_tokens"].get<int>(), 128);
}

TEST_F(ApiEndpointsTest, AnyModelIsTheOneServedWhenAsked) {
  ServerOptions so;
  so.model_aliases = {"alias-a"};
  so.accept_any_model = true;
  Start(so);
  const json chat = {{"model", "gpt-3.5-turbo"},
                     {"max_tokens", 2},
                     {"messages", {{{"role", "user"}, {"content", "x"}}}}};
  auto r = Post("/v1/chat/completions", chat);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["model"], "tiny");
  auto models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  const json data = json::parse(models->body)["data"];
  ASSERT_EQ(data.size(), 2u) << models->body;
  EXPECT_EQ(data[0]["id"], "tiny");
  EXPECT_EQ(data[1]["id"], "alias-a");
  auto t = Post("/tokenize", {{"content", "the cat"}, {"model", "whatever"}});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, 200) << t->body;
}

TEST_F(ApiEndpointsTest, CorsHeadersOnlyForAllowedOrigins) {
  ServerOptions so;
  so.cors_origins = {"https://ui.example"};
  Start(so);
  const json chat = {
      {"model", "tiny"}, {"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", "x"}}}}};
  auto ok = Post("/v1/chat/completions", chat, {{"Origin", "https://ui.example"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "https://ui.example");
  EXPECT_EQ(ok->get_header_value("Vary"), "Origin");
  auto missing = client_->Get("/nothing", {{"Origin", "https://ui.example"}});
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->get_header_value("Access-Control-Allow-Origin"), "https://ui.example");
  auto no_origin = Post("/v1/chat/completions", chat);
  ASSERT_TRUE(no_origin);
  EXPECT_FALSE(no_origin->has_header("Access-Control-Allow-Origin"));
  auto other = Post("/v1/chat/completions", chat, {{"Origin", "https://ui.example.evil"}});
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
  auto pre = client_->Options("/v1/embeddings", {{"Origin", "https://ui.example"},
                                                 {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Methods"), "POST, OPTIONS");
}

}  // namespace
}  // namespace strata::server
