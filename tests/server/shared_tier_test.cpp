// Two strata instances (gateway + HTTP server each) sharing L1 and L3
// through a real redis-server on a loopback port (skipped, saying why, when
// redis-server is not installed): one instance's answers serve the other's
// requests, tenants stay apart, and Redis dying mid-test never fails a
// request while the metrics say it is down.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "gateway/gateway.h"
#include "server/server.h"
#include "testing/redis_server.h"
#include "testing/tiny_model.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::server {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Waiting for other threads and processes: poll with a deadline (readiness,
// never a timing assertion).
template <typename F>
bool Eventually(F&& f) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (f()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return f();
}

// One strata instance: its own model copy, engine, scheduler, gateway, HTTP
// server and metrics.
struct Instance {
  Instance(int redis_port, util::Logger& log) {
    tiny = testing::MakeTinyModel();
    engine::EngineOptions eo;
    eo.n_ctx = 128;
    eo.n_seq_max = 8;
    engine = std::move(engine::Engine::Create(*tiny.model, eo, log)).value();
    sched = std::move(engine::Scheduler::Start(*engine, {}, log)).value();
    gateway::GatewayOptions go;
    go.model_name = "tiny";
    go.max_tokens_cap = 64;
    go.l1.max_bytes = 4u << 20;
    go.coalesce = true;
    go.l3_mode = gateway::L3Mode::kOptIn;
    go.l3.max_bytes = 4u << 20;
    go.l3.ttl = seconds(600);
    cache::SharedStoreOptions so;
    so.port = redis_port;
    so.timeout = milliseconds(200);
    so.backoff_min = milliseconds(10);
    so.backoff_max = milliseconds(50);
    go.shared = so;
    gw = std::move(
             gateway::Gateway::Create(*tiny.model, *sched, metrics, go, util::RealClock(), log))
             .value();
    ServerOptions sopt;
    sopt.port = 0;
    sopt.http_threads = 8;
    auto keys = ApiKeys::Parse("key-alpha-1 alpha\nkey-beta-22 beta\n", "test").value();
    srv = std::move(HttpServer::Create(sopt, std::move(keys), metrics, util::RealClock(), log))
              .value();
    port = srv->Start().value();
    srv->SetGateway(gw.get());
    srv->SetAdminKey("admin-key-0123456789");
    client = std::make_unique<httplib::Client>("127.0.0.1", port);
    client->set_read_timeout(60, 0);
  }
  ~Instance() {
    srv->Stop();
    srv.reset();
    gw.reset();
    sched.reset();
  }
  httplib::Result Post(const json& body, const std::string& key = "key-alpha-1") {
    httplib::Headers h = {{"Authorization", "Bearer " + key}};
    return client->Post("/v1/chat/completions", h, body.dump(), "application/json");
  }
  httplib::Result Invalidate(const json& body, const std::string& key = "admin-key-0123456789") {
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    return client->Delete("/v1/cache", h, body.dump(), "application/json");
  }
  double Metric(const std::string& series) const {
    const std::string text = metrics.Render();
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  }

  testing::TinyModel tiny;
  obs::MetricsRegistry metrics;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<engine::Scheduler> sched;
  std::unique_ptr<gateway::Gateway> gw;
  std::unique_ptr<HttpServer> srv;
  std::unique_ptr<httplib::Client> client;
  int port = 0;
};

json Chat(const std::string& text, bool l3 = false) {
  json j = {{"model", "tiny"},
            {"messages", {{{"role", "user"}, {"content", text}}}},
            {"max_tokens", 6},
            {"temperature", 0}};
  if (l3) j["cache"] = {{"l3", true}};
  return j;
}

std::string Content(const httplib::Result& r) {
  return json::parse(r->body)["choices"][0]["message"]["content"].get<std::string>();
}

class SharedTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = testing::RedisServer::Start();
    if (!redis_) GTEST_SKIP() << testing::RedisServer::kMissing;
    a_ = std::make_unique<Instance>(redis_->port(), log_);
    b_ = std::make_unique<Instance>(redis_->port(), log_);
    ASSERT_TRUE(a_->gw->shared_stats()->up);
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
  }

  util::CapturingLogger log_;
  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<Instance> a_, b_;
};

TEST_F(SharedTierTest, OneInstancesAnswerIsAnotherInstancesL1Hit) {
  auto first = a_->Post(Chat("the little red hen"));
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_EQ(first->get_header_value("x-strata-cache"), "miss");
  ASSERT_TRUE(a_->gw->FlushShared(seconds(5)));
  auto second = b_->Post(Chat("the little red hen"));
  ASSERT_TRUE(second);
  EXPECT_EQ(second->get_header_value("x-strata-cache"), "l1");
  EXPECT_EQ(Content(second), Content(first));
  EXPECT_EQ(json::parse(second->body)["usage"], json::parse(first->body)["usage"]);
  EXPECT_EQ(b_->Metric("strata_cache_remote_hits_total{tier=\"l1\"}"), 1);
  EXPECT_EQ(b_->Metric("strata_generated_tokens_total"), 0) << "B generated nothing";
  // B copied it into its own L1: the next hit does not need Redis.
  EXPECT_EQ(b_->Post(Chat("the little red hen"))->get_header_value("x-strata-cache"), "l1");
  EXPECT_EQ(b_->Metric("strata_cache_remote_hits_total{tier=\"l1\"}"), 1);
  EXPECT_EQ(b_->Metric("strata_cache_hits_total{tier=\"l1\"}"), 1);
}

TEST_F(SharedTierTest, OneInstancesAnswerIsAnotherInstancesNearDuplicate) {
  auto first = a_->Post(Chat("What is the capital city of Australia?", true));
  ASSERT_EQ(first->status, 200) << first->body;
  ASSERT_TRUE(a_->gw->FlushShared(seconds(5)));
  auto near = b_->Post(Chat("what's the capital city of australia", true));
  ASSERT_TRUE(near);
  EXPECT_EQ(near->get_header_value("x-strata-cache"), "l3");
  EXPECT_GE(std::stod(near->get_header_value("x-strata-cache-similarity")), 0.93);
  EXPECT_EQ(Content(near), Content(first));
  EXPECT_EQ(b_->Metric("strata_cache_remote_hits_total{tier=\"l3\"}"), 1);
  // Not asked for: no near-duplicate, even through Redis.
  EXPECT_EQ(
      b_->Post(Chat("What is the capital city of australia ?"))->get_header_value("x-strata-cache"),
      "miss");
}

TEST_F(SharedTierTest, TenantsStayApartThroughRedis) {
  ASSERT_EQ(a_->Post(Chat("a tale of two cities", true))->status, 200);
  ASSERT_TRUE(a_->gw->FlushShared(seconds(5)));
  auto near = b_->Post(Chat("A tale of two cities!", true), "key-beta-22");
  EXPECT_EQ(near->get_header_value("x-strata-cache"), "miss");
  auto exact = b_->Post(Chat("a tale of two cities"), "key-beta-22");
  EXPECT_EQ(exact->get_header_value("x-strata-cache"), "miss");
  EXPECT_EQ(b_->Metric("strata_cache_remote_hits_total{tier=\"l1\"}"), 0);
  EXPECT_EQ(b_->Metric("strata_cache_remote_hits_total{tier=\"l3\"}"), 0);
  // alpha on B still gets alpha's answer.
  EXPECT_EQ(b_->Post(Chat("a tale of two cities", true))->get_header_value("x-strata-cache"), "l1");
}

TEST_F(SharedTierTest, RedisDyingMidTestNeverFailsARequestAndTheMetricsSaySo) {
  ASSERT_EQ(a_->Post(Chat("once upon a time"))->status, 200);
  ASSERT_TRUE(a_->gw->FlushShared(seconds(5)));
  EXPECT_EQ(a_->Metric("strata_cache_remote_up"), 1);
  redis_->Kill();
  // B never saw this prompt and Redis is gone: generated, not failed.
  for (const char* text : {"once upon a time", "the end of the story", "a third prompt"}) {
    auto r = b_->Post(Chat(text, true));
    ASSERT_TRUE(r) << text;
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("x-strata-cache"), "miss");
  }
  auto again = a_->Post(Chat("once upon a time"));
  EXPECT_EQ(again->get_header_value("x-strata-cache"), "l1") << "A's local tier keeps serving";
  auto fresh = a_->Post(Chat("something new"));
  EXPECT_EQ(fresh->status, 200);
  EXPECT_EQ(b_->Metric("strata_cache_remote_up"), 0);
  EXPECT_GE(b_->Metric("strata_cache_remote_errors_total"), 1);
  EXPECT_GE(b_->Metric("strata_cache_remote_skipped_total"), 1);
  EXPECT_TRUE(log_.Contains("redis down"));

  ASSERT_TRUE(redis_->Restart());
  EXPECT_TRUE(Eventually([&] { return b_->Metric("strata_cache_remote_up") == 1; }));
  EXPECT_TRUE(Eventually([&] { return a_->Metric("strata_cache_remote_up") == 1; }));
  EXPECT_TRUE(log_.Contains("redis back"));
  ASSERT_EQ(a_->Post(Chat("after the storm"))->status, 200);
  ASSERT_TRUE(a_->gw->FlushShared(seconds(5)));
  EXPECT_EQ(b_->Post(Chat("after the storm"))->get_header_value("x-strata-cache"), "l1");
}

}  // namespace
}  // namespace strata::server

namespace strata::server {
namespace {

TEST_F(SharedTierTest, CacheInvalidationNeedsTheAdminKey) {
  auto none = a_->Invalidate({{"tenant", "alpha"}}, "");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401) << none->body;
  auto api_key = a_->Invalidate({{"tenant", "alpha"}}, "key-alpha-1");
  EXPECT_EQ(api_key->status, 401) << "an API key is not the admin key";
  EXPECT_EQ(json::parse(api_key->body)["error"]["message"].get<std::string>().find("key-alpha"),
            std::string::npos)
      << "never echoes what was presented";
  auto post = a_->client->Post("/v1/cache", "{}", "application/json");
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "DELETE");
}

TEST_F(SharedTierTest, AnInvalidationByPromptPrefixReachesEveryTierAndEveryInstance) {
  const std::string stale = "the refund policy allows thirty days";
  ASSERT_EQ(a_->Post(Chat(stale, true))->status, 200);
  ASSERT_EQ(a_->Post(Chat("the weather on Mars"))->status, 200);
  ASSERT_TRUE(a_->gw->FlushShared(seconds(5)));
  ASSERT_EQ(b_->Post(Chat(stale))->get_header_value("x-strata-cache"), "l1");  // B keeps a copy
  EXPECT_EQ(b_->Metric("strata_cache_entries{tier=\"l1\"}"), 1);

  auto r = a_->Invalidate({{"prompt_prefix", "the refund policy"}, {"reason", "policy changed"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json body = json::parse(r->body);
  EXPECT_EQ(body["invalidated"]["l1"], 1);
  EXPECT_EQ(body["invalidated"]["l3"], 1);
  EXPECT_EQ(body["invalidated"]["shared"], 2) << "its L1 and L3 entries in Redis";
  EXPECT_GE(body["invalidated"]["l2_blocks"].get<int>(), 1) << "the prompt's prefix blocks";
  EXPECT_EQ(body["reason"], "policy changed");
  EXPECT_TRUE(body["warnings"].empty()) << body.dump();
  EXPECT_EQ(a_->Metric("strata_cache_invalidated_total{tier=\"l1\"}"), 1);
  EXPECT_TRUE(log_.Contains("reason: policy changed"));

  // B hears of it through the stream and drops its copy.
  EXPECT_TRUE(Eventually([&] { return b_->Metric("strata_cache_invalidations_total") == 1; }));
  EXPECT_EQ(b_->Metric("strata_cache_entries{tier=\"l1\"}"), 0);
  EXPECT_EQ(b_->Metric("strata_cache_invalidated_total{tier=\"l1\"}"), 1);
  // Nobody serves the stale answer; the other answer stays.
  EXPECT_EQ(b_->Post(Chat(stale))->get_header_value("x-strata-cache"), "miss");
  EXPECT_EQ(a_->Post(Chat("the weather on Mars"))->get_header_value("x-strata-cache"), "l1");
}

TEST_F(SharedTierTest, AnExactRequestInvalidationRemovesOnlyThatAnswer) {
  ASSERT_EQ(a_->Post(Chat("alpha one"))->status, 200);
  ASSERT_EQ(a_->Post(Chat("alpha two"))->status, 200);
  ASSERT_EQ(a_->Post(Chat("alpha one"), "key-beta-22")->status, 200);
  ASSERT_TRUE(a_->gw->FlushShared(seconds(5)));
  auto r = a_->Invalidate({{"tenant", "alpha"}, {"request", Chat("alpha one")}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["invalidated"]["l1"], 1);
  EXPECT_EQ(json::parse(r->body)["invalidated"]["shared"], 1);
  EXPECT_TRUE(json::parse(r->body)["warnings"].empty()) << r->body;
  EXPECT_EQ(a_->Post(Chat("alpha one"))->get_header_value("x-strata-cache"), "miss");
  EXPECT_EQ(a_->Post(Chat("alpha two"))->get_header_value("x-strata-cache"), "l1");
  EXPECT_EQ(a_->Post(Chat("alpha one"), "key-beta-22")->get_header_value("x-strata-cache"), "l1")
      << "another tenant's answer to the same request stays";
}

TEST_F(SharedTierTest, AModelVersionInvalidationTakesTheVersionGetModelsNames) {
  ASSERT_EQ(a_->Post(Chat("versioned words"))->status, 200);
  auto models = a_->client->Get("/v1/models", {{"Authorization", "Bearer key-alpha-1"}});
  const std::string version = json::parse(models->body)["data"][0]["strata_model_version"];
  EXPECT_EQ(version.size(), 16u);
  auto other = a_->Invalidate({{"model_version", "0000000000000001"}});
  ASSERT_EQ(other->status, 200) << other->body;
  EXPECT_EQ(json::parse(other->body)["invalidated"]["l1"], 0);
  auto r = a_->Invalidate({{"model_version", version}, {"model", "tiny"}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["invalidated"]["l1"], 1);
  EXPECT_EQ(a_->Post(Chat("versioned words"))->get_header_value("x-strata-cache"), "miss");
}

TEST_F(SharedTierTest, ATenantInvalidationLeavesOtherTenantsAlone) {
  ASSERT_EQ(a_->Post(Chat("shared words"))->status, 200);
  ASSERT_EQ(a_->Post(Chat("shared words"), "key-beta-22")->status, 200);
  ASSERT_TRUE(a_->gw->FlushShared(seconds(5)));
  auto r = a_->Invalidate({{"tenant", "beta"}});
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["invalidated"]["l1"], 1);
  EXPECT_EQ(a_->Post(Chat("shared words"), "key-beta-22")->get_header_value("x-strata-cache"),
            "miss");
  EXPECT_EQ(a_->Post(Chat("shared words"))->get_header_value("x-strata-cache"), "l1");
  // And through Redis: B finds alpha's, not beta's old one.
  EXPECT_EQ(b_->Post(Chat("shared words"))->get_header_value("x-strata-cache"), "l1");
}

TEST_F(SharedTierTest, TheCacheSnapshotNeedsTheAdminKeyAndHoldsTheAnswers) {
  ASSERT_EQ(a_->Post(Chat("snapshot words"))->status, 200);
  auto refused = a_->client->Get("/admin/cache/snapshot");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  auto got =
      a_->client->Get("/admin/cache/snapshot", {{"Authorization", "Bearer admin-key-0123456789"}});
  ASSERT_TRUE(got);
  ASSERT_EQ(got->status, 200);
  EXPECT_EQ(got->get_header_value("Content-Type"), "application/octet-stream");
  // B (cold for this prompt) loads it: its first request is an L1 hit.
  auto report = b_->gw->ImportCache(got->body);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->l1, 1u);
  EXPECT_EQ(b_->Post(Chat("snapshot words"))->get_header_value("x-strata-cache"), "l1");
  EXPECT_EQ(b_->Metric("strata_cache_remote_hits_total{tier=\"l1\"}"), 0) << "not from Redis";
}

TEST_F(SharedTierTest, BadInvalidationsAreRefusedWithAClearError) {
  struct Case {
    std::string body;
    int status;
    const char* says;
  };
  const Case cases[] = {
      {"not json", 400, "JSON object"},
      {"{}", 400, "at least one"},
      {R"({"tenant": "alpha", "colour": 1})", 400, "colour"},
      {R"({"tenant": 7})", 400, "tenant"},
      {R"({"prompt_prefix": ""})", 400, "prompt_prefix"},
      {R"({"model_version": "xyz"})", 400, "16 hex digits"},
      {R"({"model": "no-such-model"})", 404, "no-such-model"},
      {R"({"request": {"messages": "hello"}})", 400, "request"},
      {R"({"request": {"model": "tiny"}})", 400, "messages"},
  };
  for (const Case& c : cases) {
    auto r = a_->client->Delete("/v1/cache", {{"Authorization", "Bearer admin-key-0123456789"}},
                                c.body, "application/json");
    ASSERT_TRUE(r) << c.body;
    EXPECT_EQ(r->status, c.status) << c.body << " -> " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.says), std::string::npos)
        << c.body << " -> " << r->body;
  }
  EXPECT_EQ(a_->Metric("strata_cache_invalidations_total"), 0);
}

}  // namespace
}  // namespace strata::server
