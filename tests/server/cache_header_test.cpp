// x-strata-cache over HTTP: every completion response says how it was served
// (miss, l1, coalesced), in JSON and SSE, for the OpenAI and Anthropic APIs,
// and an L1 hit renders in the shape the request asked for.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "gateway/gateway.h"
#include "server/server.h"
#include "testing/scheduler_gate.h"
#include "testing/serving_stack.h"
#include "testing/tiny_model.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::server {
namespace {

using nlohmann::json;

using Gate = testing::SchedulerGate;

class CacheHeaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gateway::GatewayOptions go = testing::TinyGatewayOptions();
    go.l1.max_bytes = 4u << 20;
    go.coalesce = true;
    testing::StartServingStack(s_, go, metrics_, util::RealClock(), *log_);
    ASSERT_NE(s_.gw, nullptr);
    ServerOptions so;
    so.port = 0;
    so.http_threads = 16;
    srv_ = std::move(HttpServer::Create(so, ApiKeys(), metrics_, util::RealClock(), *log_)).value();
    auto port = srv_->Start();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    port_ = *port;
    srv_->SetGateway(s_.gw.get());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    if (srv_) srv_->Stop();
    srv_.reset();
    s_.Stop();
  }
  httplib::Result Post(const std::string& path, const json& body) {
    return client_->Post(path.c_str(), body.dump(), "application/json");
  }
  // The text of an SSE stream in either API, and the finish/stop reason.
  static std::pair<std::string, std::string> StreamText(const std::string& body) {
    std::string text, finish;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      const size_t end = body.find("\n\n", pos);
      const std::string data = body.substr(pos + 6, end - pos - 6);
      pos = end;
      if (data == "[DONE]") break;
      const json j = json::parse(data);
      if (j.contains("choices") && !j["choices"].empty()) {
        const json& c = j["choices"][0];
        if (c.contains("delta") && c["delta"].contains("content")) {
          text += c["delta"]["content"].get<std::string>();
        }
        if (c.contains("text")) text += c["text"].get<std::string>();
        if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
      } else if (j.value("type", "") == "content_block_delta") {
        text += j["delta"]["text"].get<std::string>();
      } else if (j.value("type", "") == "message_delta") {
        finish = j["delta"]["stop_reason"];
      }
    }
    return {text, finish};
  }

  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  obs::MetricsRegistry metrics_;
  testing::ServingStack s_;
  std::unique_ptr<HttpServer> srv_;
  std::unique_ptr<httplib::Client> client_;
  int port_ = 0;
};

const json kCacheChat = {{"model", "tiny"},
                         {"messages", {{{"role", "user"}, {"content", "the cat"}}}},
                         {"max_tokens", 6},
                         {"temperature", 0}};

TEST_F(CacheHeaderTest, OpenAIChatJsonSaysMissThenL1WithTheSameAnswer) {
  auto a = Post("/v1/chat/completions", kCacheChat);
  auto b = Post("/v1/chat/completions", kCacheChat);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->status, 200) << a->body;
  EXPECT_EQ(a->get_header_value("x-strata-cache"), "miss");
  EXPECT_EQ(b->get_header_value("x-strata-cache"), "l1");
  const json ja = json::parse(a->body), jb = json::parse(b->body);
  EXPECT_EQ(ja["choices"], jb["choices"]);
  EXPECT_EQ(ja["usage"], jb["usage"]) << "the stored usage is replayed";
  EXPECT_NE(ja["id"], jb["id"]) << "each response keeps its own id";
}

TEST_F(CacheHeaderTest, AHitReplaysInTheShapeOfTheRequestThatHitIt) {
  auto json_first = Post("/v1/chat/completions", kCacheChat);
  json streamed = kCacheChat;
  streamed["stream"] = true;
  auto sse = Post("/v1/chat/completions", streamed);
  ASSERT_TRUE(json_first && sse);
  EXPECT_EQ(sse->get_header_value("x-strata-cache"), "l1");
  EXPECT_EQ(sse->get_header_value("Content-Type"), "text/event-stream");
  const auto [text, finish] = StreamText(sse->body);
  const json j = json::parse(json_first->body);
  EXPECT_EQ(text, j["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(finish, j["choices"][0]["finish_reason"].get<std::string>());
  EXPECT_NE(sse->body.find("data: [DONE]"), std::string::npos);
}

TEST_F(CacheHeaderTest, CompletionsJsonAndStreamCarryTheHeader) {
  const json body = {{"model", "tiny"},
                     {"prompt", "once upon"},
                     {"max_tokens", 5},
                     {"temperature", 0},
                     {"stream", true}};
  auto a = Post("/v1/completions", body);
  auto b = Post("/v1/completions", body);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->get_header_value("x-strata-cache"), "miss");
  EXPECT_EQ(b->get_header_value("x-strata-cache"), "l1");
  EXPECT_EQ(StreamText(a->body), StreamText(b->body));
  json plain = body;
  plain["stream"] = false;
  auto c = Post("/v1/completions", plain);
  EXPECT_EQ(c->get_header_value("x-strata-cache"), "l1");
  EXPECT_EQ(json::parse(c->body)["choices"][0]["text"].get<std::string>(),
            StreamText(a->body).first);
}

TEST_F(CacheHeaderTest, AnthropicMessagesJsonAndStreamCarryTheHeader) {
  const json body = {{"model", "tiny"},
                     {"max_tokens", 5},
                     {"temperature", 0},
                     {"messages", {{{"role", "user"}, {"content", "hi there"}}}}};
  auto a = Post("/v1/messages", body);
  ASSERT_TRUE(a);
  ASSERT_EQ(a->status, 200) << a->body;
  EXPECT_EQ(a->get_header_value("x-strata-cache"), "miss");
  json streamed = body;
  streamed["stream"] = true;
  auto b = Post("/v1/messages", streamed);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->get_header_value("x-strata-cache"), "l1");
  const json ja = json::parse(a->body);
  const auto [text, stop] = StreamText(b->body);
  EXPECT_EQ(text, ja["content"][0]["text"].get<std::string>());
  EXPECT_EQ(stop, ja["stop_reason"].get<std::string>());
  EXPECT_NE(b->body.find("event: message_stop"), std::string::npos);
  auto c = Post("/v1/messages", body);
  EXPECT_EQ(c->get_header_value("x-strata-cache"), "l1");
  EXPECT_EQ(json::parse(c->body)["content"], ja["content"]);
}

TEST_F(CacheHeaderTest, OptingOutOrSamplingWithoutASeedIsAlwaysAMiss) {
  json l1_off = kCacheChat;
  l1_off["cache"] = {{"l1", false}};
  json no_cache = kCacheChat;
  no_cache["no_cache"] = true;
  json sampled = kCacheChat;
  sampled["temperature"] = 0.8;
  for (const json& body : {l1_off, no_cache, sampled}) {
    for (int i = 0; i < 2; ++i) {
      auto r = Post("/v1/chat/completions", body);
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 200);
      EXPECT_EQ(r->get_header_value("x-strata-cache"), "miss") << body.dump();
    }
  }
  json seeded = sampled;
  seeded["seed"] = 1234;
  EXPECT_EQ(Post("/v1/chat/completions", seeded)->get_header_value("x-strata-cache"), "miss");
  EXPECT_EQ(Post("/v1/chat/completions", seeded)->get_header_value("x-strata-cache"), "l1");
  json bad = kCacheChat;
  bad["cache"] = {{"l1", "no"}};
  auto r = Post("/v1/chat/completions", bad);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("cache.l1"), std::string::npos) << r->body;
}

TEST_F(CacheHeaderTest, IdenticalConcurrentRequestsSayCoalesced) {
  auto gate = std::make_shared<Gate>();
  engine::SchedulerRequest sr;
  sr.prompt = {1, 2, 3};
  sr.max_tokens = 2;
  sr.stop_at_eog = false;
  sr.sink = gate;
  ASSERT_TRUE(s_.sched->Submit(std::move(sr)).ok());
  gate->WaitHolding();  // nothing generates until the gate opens
  std::string headers[2];
  std::string bodies[2];
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", port_);
      c.set_read_timeout(60, 0);
      json body = kCacheChat;
      body["stream"] = i == 1;
      auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
      if (!r) return;
      headers[i] = r->get_header_value("x-strata-cache");
      bodies[i] = r->body;
    });
  }
  // Both requests reach the gateway: one leads, one follows.
  while (metrics_.Render().find("strata_cache_coalesced_total 1") == std::string::npos) {
    std::this_thread::yield();
  }
  gate->Open();
  for (auto& c : clients) c.join();
  EXPECT_TRUE((headers[0] == "miss" && headers[1] == "coalesced") ||
              (headers[0] == "coalesced" && headers[1] == "miss"))
      << headers[0] << " " << headers[1];
  EXPECT_EQ(json::parse(bodies[0])["choices"][0]["message"]["content"].get<std::string>(),
            StreamText(bodies[1]).first);
}

TEST_F(CacheHeaderTest, TierMetricsAreServed) {
  Post("/v1/chat/completions", kCacheChat);
  Post("/v1/chat/completions", kCacheChat);
  const std::string m = client_->Get("/metrics")->body;
  EXPECT_NE(m.find("strata_cache_hits_total{tier=\"l1\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("strata_cache_misses_total{tier=\"l1\"} 1"), std::string::npos);
  EXPECT_NE(m.find("strata_cache_entries{tier=\"l1\"} 1"), std::string::npos);
  EXPECT_NE(m.find("strata_cache_bytes{tier=\"l1\"}"), std::string::npos);
  EXPECT_NE(m.find("strata_cache_coalesced_total 0"), std::string::npos);
}

}  // namespace
}  // namespace strata::server
