// `strata serve` as a process, asked what drop-in clients of the OpenAI,
// Anthropic and llama.cpp servers ask: token counting, /tokenize and
// /detokenize, the OpenAI paths without /v1, 404 and 405 answers, model
// aliases and --accept-any-model, CORS, and the context-overflow message.
// The binary is $STRATA_BIN (ctest sets it); the model is written by
// `strata mkmodel`.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
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
using testing::Spawn;
using testing::WaitExit;

Json Parse(const std::string& text) {
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

class ApiEndpointsProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    demo_ = new testing::DemoModelDir("strata_api_endpoints",
                                      "n_embd=64,n_layers=2,n_heads=4,n_ff=128,n_ctx=4096");
    ASSERT_FALSE(demo_->model.empty()) << demo_->MkmodelLog();
  }
  static void TearDownTestSuite() { delete demo_; }
  void TearDown() override {
    if (pid_ > 0) testing::Kill(pid_);
  }

  // `strata serve -m MODEL --port 0 --ctx CTX EXTRA` (the response cache
  // off, so every answer is generated), waited on until ready; its port.
  int Serve(std::vector<std::string> extra, const std::string& ctx = "1024") {
    static int n = 0;
    log_ = (demo_->dir / ("serve_" + std::to_string(++n) + ".log")).string();
    std::vector<std::string> args = {"serve", "-m",          demo_->model, "--port", "0",
                                     "--ctx", ctx,           "-t",         "1",      "--l1-bytes",
                                     "0",     "--log-level", "info"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = Spawn(args, log_);
    if (const int port = testing::WaitReady(pid_, log_); port > 0) return port;
    ADD_FAILURE() << "the server did not start:\n" << ReadAll(log_);
    return -1;
  }

  std::optional<RawResponse> Ask(const std::string& bytes) {
    RawClient c(port_);
    if (!c.connected() || !c.Send(bytes)) return std::nullopt;
    return c.ReadResponse(std::chrono::seconds(60));
  }
  std::optional<RawResponse> Post(const std::string& path, const Json& body,
                                  const std::string& headers = "") {
    return Ask(HttpRequest("POST", path, body.dump(), headers));
  }
  std::optional<RawResponse> Get(const std::string& path, const std::string& headers = "") {
    return Ask("GET " + path + " HTTP/1.1\r\nHost: t\r\n" + headers + "\r\n");
  }
  // The value of `name{labels}` on /metrics; -1 when absent.
  double Metric(const std::string& name, const std::string& labels) {
    auto r = Get("/metrics");
    if (!r) return -1;
    const std::string key = "\n" + name + "{" + labels + "} ";
    const size_t at = r->body.find(key);
    return at == std::string::npos ? -1 : std::atof(r->body.c_str() + at + key.size());
  }

  static testing::DemoModelDir* demo_;
  pid_t pid_ = -1;
  int port_ = -1;
  std::string log_;
};
testing::DemoModelDir* ApiEndpointsProcessTest::demo_ = nullptr;

Json Messages(const std::string& model, const std::string& text, int max_tokens = 3) {
  return {{"model", model},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"system", "You are terse."},
          {"messages",
           {{{"role", "user"}, {"content", text}},
            {{"role", "assistant"}, {"content", "Noted."}},
            {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "and again"}}}}}}}};
}

TEST_F(ApiEndpointsProcessTest, CountTokensEqualsWhatMessagesReads) {
  port_ = Serve({"--alias", "demo"});
  ASSERT_GT(port_, 0);
  for (const std::string text : {"hello", "a longer question about the weather in spring"}) {
    Json count = Messages("demo", text);
    count.erase("max_tokens");  // not required for a count
    count.erase("temperature");
    auto c = Post("/v1/messages/count_tokens", count);
    ASSERT_TRUE(c);
    ASSERT_EQ(c->status, 200) << c->body;
    EXPECT_FALSE(c->Header("request-id").empty());
    const int counted = Parse(c->body).value("input_tokens", -1);
    EXPECT_GT(counted, 0) << c->body;
    // The cold request itself: what it read is input + cache reads.
    auto m = Post("/v1/messages", Messages("demo", text));
    ASSERT_TRUE(m);
    ASSERT_EQ(m->status, 200) << m->body;
    const Json usage = Parse(m->body)["usage"];
    EXPECT_EQ(counted, usage.value("input_tokens", 0) + usage.value("cache_read_input_tokens", 0))
        << usage.dump();
  }
  // Errors are Anthropic's, and counted too.
  auto bad = Post("/v1/messages/count_tokens", {{"model", "demo"}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(Parse(bad->body)["type"], "error") << bad->body;
  EXPECT_NE(bad->body.find("messages"), std::string::npos) << bad->body;
  auto unknown = Post("/v1/messages/count_tokens",
                      {{"model", "nope"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(Parse(unknown->body)["error"]["type"], "not_found_error") << unknown->body;
  EXPECT_EQ(
      Metric("strata_http_requests_total", R"(endpoint="/v1/messages/count_tokens",status="200")"),
      2);
  EXPECT_EQ(
      Metric("strata_http_requests_total", R"(endpoint="/v1/messages/count_tokens",status="400")"),
      1);
}

TEST_F(ApiEndpointsProcessTest, TokenizeAndDetokenizeRoundTrip) {
  port_ = Serve({"--alias", "demo"});
  ASSERT_GT(port_, 0);
  const std::string text = "Hello, world: caf\xc3\xa9 \xe2\x82\xac 42";
  auto t = Post("/tokenize", {{"content", text}});
  ASSERT_TRUE(t);
  ASSERT_EQ(t->status, 200) << t->body;
  const Json tokens = Parse(t->body)["tokens"];
  ASSERT_TRUE(tokens.is_array()) << t->body;
  ASSERT_FALSE(tokens.empty());
  for (const Json& id : tokens) EXPECT_TRUE(id.is_number_integer()) << t->body;

  auto d = Post("/detokenize", {{"tokens", tokens}});
  ASSERT_TRUE(d);
  ASSERT_EQ(d->status, 200) << d->body;
  EXPECT_EQ(Parse(d->body)["content"], text) << d->body;

  // With add_special the vocabulary's BOS (if any) leads; never fewer tokens.
  auto special = Post("/tokenize", {{"content", text}, {"add_special", true}, {"model", "demo"}});
  ASSERT_TRUE(special);
  ASSERT_EQ(special->status, 200) << special->body;
  EXPECT_GE(Parse(special->body)["tokens"].size(), tokens.size());

  // Pieces: each token's text, or its bytes where that is part of a character.
  auto p = Post("/tokenize", {{"content", text}, {"with_pieces", true}});
  ASSERT_TRUE(p);
  ASSERT_EQ(p->status, 200) << p->body;
  const Json pieces = Parse(p->body)["tokens"];
  ASSERT_EQ(pieces.size(), tokens.size()) << p->body;
  std::string joined;
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i]["id"], tokens[i]);
    const Json& piece = pieces[i]["piece"];
    if (piece.is_string()) {
      joined += piece.get<std::string>();
    } else {
      ASSERT_TRUE(piece.is_array()) << p->body;
      for (const Json& b : piece) joined += static_cast<char>(b.get<int>());
    }
  }
  EXPECT_NE(joined.find("world"), std::string::npos) << joined;

  // An id outside the vocabulary is a 400 naming its index.
  auto oov = Post("/detokenize", {{"tokens", {tokens[0], 999999999}}});
  ASSERT_TRUE(oov);
  EXPECT_EQ(oov->status, 400) << oov->body;
  EXPECT_NE(oov->body.find("tokens[1]"), std::string::npos) << oov->body;
  auto neg = Post("/detokenize", {{"tokens", {-1}}});
  ASSERT_TRUE(neg);
  EXPECT_EQ(neg->status, 400) << neg->body;
  EXPECT_NE(neg->body.find("tokens[0]"), std::string::npos) << neg->body;
  auto wrong = Post("/detokenize", {{"tokens", {1, "x"}}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 400) << wrong->body;
  EXPECT_EQ(Parse(wrong->body)["error"]["param"], "tokens[1]") << wrong->body;
  // Bounded: at most four contexts of ids (--ctx 1024).
  auto many = Post("/detokenize", {{"tokens", std::vector<int>(4097, 1)}});
  ASSERT_TRUE(many);
  EXPECT_EQ(many->status, 400) << many->body;
  EXPECT_NE(many->body.find("at most 4096"), std::string::npos) << many->body;
  auto missing = Post("/tokenize", {{"with_pieces", true}});
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 400);
  EXPECT_EQ(Parse(missing->body)["error"]["param"], "content") << missing->body;
  for (const char* garbage : {"\xff{[", "[1,2]", "{\"content\": 5}", "{\"tokens\": {}}"}) {
    for (const char* path : {"/tokenize", "/detokenize"}) {
      auto g = Ask(HttpRequest("POST", path, garbage));
      ASSERT_TRUE(g);
      EXPECT_EQ(g->status, 400) << path << " " << garbage << ": " << g->body;
      EXPECT_TRUE(Parse(g->body).contains("error")) << g->body;
    }
  }
  auto unknown = Post("/tokenize", {{"content", "x"}, {"model", "nope"}});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(Parse(unknown->body)["error"]["code"], "model_not_found") << unknown->body;
  EXPECT_EQ(Metric("strata_http_requests_total", R"(endpoint="/tokenize",status="200")"), 3);
  EXPECT_EQ(Metric("strata_http_requests_total", R"(endpoint="/detokenize",status="200")"), 1);
}

TEST_F(ApiEndpointsProcessTest, OpenAIPathsWithoutV1AreAliases) {
  port_ = Serve({"--alias", "demo"});
  ASSERT_GT(port_, 0);
  const Json chat = {{"model", "demo"},
                     {"max_tokens", 4},
                     {"temperature", 0},
                     {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto a = Post("/v1/chat/completions", chat);
  auto b = Post("/chat/completions", chat);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(b->status, 200) << b->body;
  EXPECT_EQ(Parse(b->body)["object"], "chat.completion");
  EXPECT_EQ(Parse(a->body)["choices"], Parse(b->body)["choices"]);
  const Json completion = {
      {"model", "demo"}, {"prompt", "once"}, {"max_tokens", 3}, {"temperature", 0}};
  auto c1 = Post("/v1/completions", completion);
  auto c2 = Post("/completions", completion);
  ASSERT_TRUE(c1 && c2);
  ASSERT_EQ(c2->status, 200) << c2->body;
  EXPECT_EQ(Parse(c1->body)["choices"], Parse(c2->body)["choices"]);
  auto m = Get("/models");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200);
  EXPECT_EQ(Parse(m->body)["data"][0]["id"], "demo") << m->body;
  auto e = Post("/embeddings", {{"model", "demo"}, {"input", "hello"}});
  ASSERT_TRUE(e);
  ASSERT_EQ(e->status, 200) << e->body;
  EXPECT_EQ(Parse(e->body)["object"], "list");
  // Counted as their /v1 endpoints.
  EXPECT_EQ(Metric("strata_http_requests_total", R"(endpoint="/v1/chat/completions",status="200")"),
            2);
  EXPECT_EQ(Metric("strata_http_requests_total", R"(endpoint="/v1/completions",status="200")"), 2);
  EXPECT_EQ(Metric("strata_http_requests_total", R"(endpoint="/v1/models",status="200")"), 1);
  EXPECT_EQ(Metric("strata_http_requests_total", R"(endpoint="/v1/embeddings",status="200")"), 1);
}

TEST_F(ApiEndpointsProcessTest, UnknownRoutesAre404NotFoundAndWrongMethods405) {
  port_ = Serve({"--alias", "demo"});
  ASSERT_GT(port_, 0);
  auto openai = Get("/v2/whatever");
  ASSERT_TRUE(openai);
  EXPECT_EQ(openai->status, 404);
  EXPECT_EQ(Parse(openai->body)["error"]["code"], "not_found") << openai->body;
  auto anthropic = Post("/v1/messages/batches", Json::object());
  ASSERT_TRUE(anthropic);
  EXPECT_EQ(anthropic->status, 404);
  EXPECT_EQ(Parse(anthropic->body)["type"], "error") << anthropic->body;
  EXPECT_EQ(Parse(anthropic->body)["error"]["type"], "not_found_error") << anthropic->body;

  auto get_chat = Get("/v1/chat/completions");
  ASSERT_TRUE(get_chat);
  EXPECT_EQ(get_chat->status, 405);
  EXPECT_EQ(get_chat->Header("allow"), "POST");
  EXPECT_EQ(Parse(get_chat->body)["error"]["code"], "method_not_allowed") << get_chat->body;
  auto post_models = Post("/models", Json::object());
  ASSERT_TRUE(post_models);
  EXPECT_EQ(post_models->status, 405);
  EXPECT_EQ(post_models->Header("allow"), "GET, HEAD");
  auto get_messages = Get("/v1/messages");
  ASSERT_TRUE(get_messages);
  EXPECT_EQ(get_messages->status, 405);
  EXPECT_EQ(Parse(get_messages->body)["type"], "error") << get_messages->body;
  // Without CORS, OPTIONS is a method like any other this path lacks.
  auto options =
      Ask("OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
          "Origin: http://app.example\r\nAccess-Control-Request-Method: POST\r\n\r\n");
  ASSERT_TRUE(options);
  EXPECT_EQ(options->status, 405);
  EXPECT_EQ(options->Header("access-control-allow-origin"), "");
}

TEST_F(ApiEndpointsProcessTest, AliasesAndAcceptAnyModel) {
  port_ = Serve({"--alias", "demo", "--alias", "gpt-4o-mini", "--alias", "claude-local"});
  ASSERT_GT(port_, 0);
  auto models = Get("/v1/models");
  ASSERT_TRUE(models);
  const Json data = Parse(models->body)["data"];
  ASSERT_EQ(data.size(), 3u) << models->body;
  EXPECT_EQ(data[0]["id"], "demo");
  EXPECT_EQ(data[1]["id"], "gpt-4o-mini");
  EXPECT_EQ(data[2]["id"], "claude-local");
  const Json chat = {{"model", "gpt-4o-mini"},
                     {"max_tokens", 2},
                     {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto r = Post("/v1/chat/completions", chat);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Parse(r->body)["model"], "demo") << r->body;  // the first alias
  auto m = Post("/v1/messages", Messages("claude-local", "hi", 2));
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  EXPECT_EQ(Parse(m->body)["model"], "demo") << m->body;
  Json other = chat;
  other["model"] = "gpt-3.5-turbo";
  auto unknown = Post("/v1/chat/completions", other);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(Parse(unknown->body)["error"]["code"], "model_not_found") << unknown->body;
  testing::Kill(pid_);

  port_ = Serve({"--alias", "demo", "--accept-any-model"});
  ASSERT_GT(port_, 0);
  auto any = Post("/v1/chat/completions", other);
  ASSERT_TRUE(any);
  ASSERT_EQ(any->status, 200) << any->body;
  EXPECT_EQ(Parse(any->body)["model"], "demo") << any->body;
  auto any_messages = Post("/v1/messages", Messages("claude-3-haiku", "hi", 2));
  ASSERT_TRUE(any_messages);
  EXPECT_EQ(any_messages->status, 200) << any_messages->body;
  testing::Kill(pid_);
  pid_ = -1;

  // Several models: which one "any" means is not defined, so it is refused.
  const std::string log = (demo_->dir / "refused.log").string();
  const pid_t refused = Spawn({"serve", "-m", demo_->model, "--port", "0", "--backend",
                               "openai:http://127.0.0.1:9", "--accept-any-model"},
                              log);
  EXPECT_NE(WaitExit(refused, std::chrono::seconds(30)), 0);
  EXPECT_NE(ReadAll(log).find("--accept-any-model needs exactly one served model"),
            std::string::npos)
      << ReadAll(log);
}

TEST_F(ApiEndpointsProcessTest, CorsAnswersAllowedOriginsOnly) {
  const std::string keys = (demo_->dir / "cors_keys.txt").string();
  std::ofstream(keys) << "sk-cors-0123456789 web\n";
  port_ = Serve({"--alias", "demo", "--cors-origin", "http://app.example", "--cors-origin",
                 "http://other.example", "--api-keys", keys});
  ASSERT_GT(port_, 0);
  const std::string origin = "Origin: http://app.example\r\n";
  // A preflight: 204, no key needed.
  auto pre = Ask("OPTIONS /v1/messages HTTP/1.1\r\nHost: t\r\n" + origin +
                 "Access-Control-Request-Method: POST\r\n"
                 "Access-Control-Request-Headers: x-api-key, content-type, x-stainless-os, bad "
                 "header\r\n\r\n");
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204) << pre->body;
  EXPECT_EQ(pre->Header("access-control-allow-origin"), "http://app.example");
  EXPECT_EQ(pre->Header("access-control-allow-methods"), "POST, OPTIONS");
  const std::string allowed = pre->Header("access-control-allow-headers");
  for (const char* h : {"authorization", "content-type", "x-api-key", "anthropic-version",
                        "x-request-id", "x-stainless-os"}) {
    EXPECT_NE(allowed.find(h), std::string::npos) << h << " in " << allowed;
  }
  EXPECT_EQ(allowed.find("bad header"), std::string::npos) << allowed;
  EXPECT_FALSE(pre->Header("access-control-max-age").empty());
  EXPECT_EQ(pre->Header("vary"), "Origin");

  // The real request still needs the key; its error carries CORS too.
  auto refused = Post("/v1/messages", Messages("demo", "hi", 2), origin);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  EXPECT_EQ(refused->Header("access-control-allow-origin"), "http://app.example");
  const std::string key = "x-api-key: sk-cors-0123456789\r\n";
  auto ok = Post("/v1/messages", Messages("demo", "hi", 2), origin + key);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(ok->Header("access-control-allow-origin"), "http://app.example");
  EXPECT_EQ(ok->Header("vary"), "Origin");
  const std::string exposed = ok->Header("access-control-expose-headers");
  EXPECT_NE(exposed.find("x-strata-cache"), std::string::npos) << exposed;
  EXPECT_NE(exposed.find("x-request-id"), std::string::npos) << exposed;
  Json stream = Messages("demo", "hi", 2);
  stream["stream"] = true;
  auto sse = Post("/v1/messages", stream, "Origin: http://other.example\r\n" + key);
  ASSERT_TRUE(sse);
  EXPECT_EQ(sse->status, 200);
  EXPECT_EQ(sse->Header("content-type"), "text/event-stream");
  EXPECT_EQ(sse->Header("access-control-allow-origin"), "http://other.example");
  auto health = Get("/health", origin);
  ASSERT_TRUE(health);
  EXPECT_EQ(health->Header("access-control-allow-origin"), "http://app.example");

  // Another origin gets no CORS headers, and no preflight.
  const std::string evil = "Origin: http://evil.example\r\n";
  auto other = Post("/v1/messages", Messages("demo", "hi", 2), evil + key);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_EQ(other->Header("access-control-allow-origin"), "");
  auto evil_pre = Ask("OPTIONS /v1/messages HTTP/1.1\r\nHost: t\r\n" + evil +
                      "Access-Control-Request-Method: POST\r\n\r\n");
  ASSERT_TRUE(evil_pre);
  EXPECT_EQ(evil_pre->status, 405);
  EXPECT_EQ(evil_pre->Header("access-control-allow-origin"), "");
  EXPECT_EQ(evil_pre->Header("allow"), "POST, OPTIONS");
  testing::Kill(pid_);

  // "*": any origin, answered with "*".
  port_ = Serve({"--alias", "demo", "--cors-origin", "*"});
  ASSERT_GT(port_, 0);
  auto star =
      Ask("OPTIONS /chat/completions HTTP/1.1\r\nHost: t\r\nOrigin: http://x.example\r\n"
          "Access-Control-Request-Method: POST\r\n\r\n");
  ASSERT_TRUE(star);
  EXPECT_EQ(star->status, 204);
  EXPECT_EQ(star->Header("access-control-allow-origin"), "*");
  auto nowhere = Ask("OPTIONS /v2/nothing HTTP/1.1\r\nHost: t\r\nOrigin: http://x.example\r\n\r\n");
  ASSERT_TRUE(nowhere);
  EXPECT_EQ(nowhere->status, 404);
}

TEST_F(ApiEndpointsProcessTest, ContextOverflowNamesBothContexts) {
  port_ = Serve({"--alias", "demo", "--max-tokens-cap", "64"}, "64");
  ASSERT_GT(port_, 0);
  std::string prompt;
  for (int i = 0; i < 10; ++i) prompt += "word ";
  auto r = Post("/v1/completions", {{"model", "demo"}, {"prompt", prompt}, {"max_tokens", 60}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const Json err = Parse(r->body)["error"];
  EXPECT_EQ(err["code"], "context_length_exceeded") << r->body;
  const std::string msg = err.value("message", "");
  EXPECT_NE(msg.find("plus max_tokens (60) exceeds the context of 64 tokens (the model's: 4096)"),
            std::string::npos)
      << msg;
  std::string longer;
  for (int i = 0; i < 100; ++i) longer += "word ";
  auto full = Post("/v1/messages", {{"model", "demo"},
                                    {"max_tokens", 1},
                                    {"messages", {{{"role", "user"}, {"content", longer}}}}});
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 400) << full->body;
  EXPECT_NE(full->body.find("the context of 64 tokens (the model's: 4096)"), std::string::npos)
      << full->body;
}

}  // namespace
}  // namespace strata
