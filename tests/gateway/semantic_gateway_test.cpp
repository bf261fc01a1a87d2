// The semantic tiers (L4/L5) through the gateway: a tiny random-weight chat
// model answers, a random-weight BERT encoder (a real model::Encoder behind
// backend::EncoderBackend) embeds the request texts. Who may be answered by
// a stored answer of similar meaning, what must match exactly, and that an
// encoder failure never fails a request.
#include <gtest/gtest.h>

#include <thread>

#include "backend/encoder.h"
#include "gateway/gateway.h"
#include "model/encoder.h"
#include "model/synthetic.h"
#include "testing/fake_clock.h"
#include "testing/mem_file_system.h"
#include "testing/redis_server.h"
#include "testing/serving_stack.h"
#include "util/log.h"

namespace strata::gateway {
namespace semantic_test {

// The same words as kAsked with other case and punctuation (the encoder
// lower-cases and splits punctuation off: nearly the same tokens).
constexpr const char* kAsked = "the little bird saw the dog in the park";
constexpr const char* kParaphrase = "The little bird saw the dog, in the park!";
constexpr const char* kOther = "what is a model and why is it fast";
constexpr double kThreshold = 0.98;  // random weights: unrelated texts reach ~0.95

struct Observed {
  CacheOutcome outcome = CacheOutcome::kMiss;
  std::optional<double> similarity;
  std::string text;
  bool ok = false;
};

class SemanticGatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs_ = std::make_unique<testing::MemFileSystem>();
    model::SyntheticOptions o;
    o.shape.architecture = "bert";
    o.shape.n_embd = 64;
    o.shape.n_layers = 2;
    o.shape.n_heads = 4;
    o.shape.n_kv_heads = 4;
    o.shape.n_ff = 128;
    o.shape.n_ctx = 24;  // a longer text makes the encoder fail
    ASSERT_TRUE(model::WriteSyntheticModel(*fs_, "enc.gguf", o, *log_).ok());
    auto enc = model::Encoder::Load(*fs_, "enc.gguf", *log_);
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    encoder_ = std::move(enc).value();
    backend_ = std::make_unique<backend::EncoderBackend>(
        *encoder_, backend::EncoderBackendOptions{.name = "enc", .threads = 1});
    Build(L3Mode::kOptIn, {"always"});
  }
  void TearDown() override { s_.Stop(); }
  void Build(L3Mode mode, std::vector<std::string> tenants, bool l1 = true) {
    s_.Stop();
    metrics_ = std::make_unique<obs::MetricsRegistry>();
    GatewayOptions go = testing::TinyGatewayOptions();
    go.l1.max_bytes = l1 ? 8u << 20 : 0;
    go.coalesce = true;
    go.semantic_mode = mode;
    go.semantic_tenants = std::move(tenants);
    go.semantic.dim = 64;
    go.semantic.min_similarity = kThreshold;
    go.semantic_encoder = backend_.get();
    go.semantic_verify.verify_share = verify_share_;
    go.semantic_verify.min_samples = 3;
    go.semantic_hit_trigger = trigger_;
    if (redis_port_ > 0) {
      cache::SharedStoreOptions so;
      so.port = redis_port_;
      so.timeout = std::chrono::milliseconds(200);
      so.backoff_min = std::chrono::milliseconds(10);
      so.backoff_max = std::chrono::milliseconds(50);
      go.shared = so;
    }
    options_ = go;
    testing::StartServingStack(s_, go, *metrics_, clock_, *log_);
  }
  Observed Run(const CompletionRequest& r) { return RunOn(*s_.gw, r); }
  static Observed RunOn(Gateway& gw, const CompletionRequest& r) {
    Observed o;
    auto g = gw.Start(r);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    if (!g.ok()) return o;
    o.outcome = (*g)->cache_outcome();
    o.similarity = (*g)->cache_similarity();
    o.ok = true;
    const auto far = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (true) {
      auto e = (*g)->Next(far);
      if (!e.ok()) break;
      if (e->kind == Event::Kind::kDelta) o.text += e->text;
      if (e->kind == Event::Kind::kFinish) o.ok = o.ok && e->status.ok();
    }
    return o;
  }
  static CompletionRequest Chat(const std::string& text, bool ask = true) {
    CompletionRequest r;
    r.tenant = "alpha";
    r.messages = {{"system", "You are terse."}, {"user", text}};
    r.max_tokens = 8;
    r.sampling.temperature = 0.0f;
    if (ask) r.semantic = true;
    return r;
  }
  double Metric(const std::string& series) const {
    const std::string text = metrics_->Render();
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  }

  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  std::unique_ptr<testing::MemFileSystem> fs_;
  std::unique_ptr<model::Encoder> encoder_;
  std::unique_ptr<backend::EncoderBackend> backend_;
  double verify_share_ = 0;               // verification off unless a test turns it on
  cache::HitRateTriggerOptions trigger_;  // off unless a test turns it on
  int redis_port_ = 0;                    // > 0: the shared tier on this Redis
  GatewayOptions options_;                // Build's
  testing::FakeClock clock_;
  std::unique_ptr<obs::MetricsRegistry> metrics_;
  testing::ServingStack s_;
};

TEST_F(SemanticGatewayTest, ATextOfTheSameMeaningGetsTheStoredAnswerMarkedWithItsSimilarity) {
  const Observed first = Run(Chat(kAsked));
  ASSERT_TRUE(first.ok);
  EXPECT_EQ(first.outcome, CacheOutcome::kMiss);
  const Observed second = Run(Chat(kParaphrase));
  EXPECT_EQ(second.outcome, CacheOutcome::kSemantic);
  ASSERT_TRUE(second.similarity.has_value());
  EXPECT_GE(*second.similarity, kThreshold);
  EXPECT_EQ(second.text, first.text);
  EXPECT_EQ(Run(Chat(kOther)).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(Run(Chat(kAsked)).outcome, CacheOutcome::kL1) << "the exact tier comes first";
  EXPECT_EQ(CacheOutcomeName(CacheOutcome::kSemantic), "semantic");
  EXPECT_EQ(s_.gw->semantic_stats()->hits, 1u);
  EXPECT_EQ(Metric("strata_cache_hits_total{tier=\"semantic\"}"), 1);
}

TEST_F(SemanticGatewayTest, InvalidationRemovesTheSemanticEntriesItSelects) {
  Run(Chat(kAsked));
  CompletionRequest beta = Chat(kAsked);
  beta.tenant = "beta";
  Run(beta);
  EXPECT_EQ(s_.gw->semantic_stats()->entries, 2u);
  // The prompt text is the conversation's contents: a prefix of the system
  // prompt selects both tenants' entries; with a tenant, one.
  Invalidation what;
  what.prompt_prefix = "You are terse.";
  what.tenant = "alpha";
  auto report = s_.gw->Invalidate(what);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->semantic, 1u);
  EXPECT_EQ(report->l1, 1u);
  EXPECT_EQ(Run(Chat(kParaphrase)).outcome, CacheOutcome::kMiss);
  CompletionRequest beta_paraphrase = Chat(kParaphrase);
  beta_paraphrase.tenant = "beta";
  EXPECT_EQ(Run(beta_paraphrase).outcome, CacheOutcome::kSemantic);
  // Nothing selected: refused, nothing removed.
  EXPECT_EQ(s_.gw->Invalidate(Invalidation{}).status().code(), util::StatusCode::kInvalidArgument);
  Invalidation no_match;
  no_match.prompt_prefix = "You are verbose.";
  EXPECT_EQ(s_.gw->Invalidate(no_match)->semantic, 0u);
  EXPECT_EQ(PromptText(Chat("q")), "You are terse.\nq");
}

TEST_F(SemanticGatewayTest, TenantsAndConversationsNeverShareAnswers) {
  Run(Chat(kAsked));
  CompletionRequest other = Chat(kParaphrase);
  other.tenant = "beta";
  EXPECT_EQ(Run(other).outcome, CacheOutcome::kMiss);
  CompletionRequest history = Chat(kParaphrase);
  history.messages.insert(history.messages.begin() + 1, {{"user", "hi"}, {"assistant", "hello"}});
  EXPECT_EQ(Run(history).outcome, CacheOutcome::kMiss) << "another conversation so far";
  CompletionRequest system = Chat(kParaphrase);
  system.messages.front().content = "You are verbose.";
  EXPECT_EQ(Run(system).outcome, CacheOutcome::kMiss);
  CompletionRequest longer = Chat(kParaphrase);
  longer.max_tokens = 9;
  EXPECT_EQ(Run(longer).outcome, CacheOutcome::kMiss);
}

TEST_F(SemanticGatewayTest, OnlyRequestsThatAskOrWhoseTenantDefaultsToItAreAnswered) {
  Run(Chat(kAsked));
  EXPECT_EQ(Run(Chat(kParaphrase, /*ask=*/false)).outcome, CacheOutcome::kMiss);
  CompletionRequest refused = Chat("The little bird saw the dog in the park.");  // would hit
  refused.semantic = false;
  EXPECT_EQ(Run(refused).outcome, CacheOutcome::kMiss);
  CompletionRequest listed = Chat(kAsked, false);
  listed.tenant = "always";
  Run(listed);
  listed.messages.back().content = kParaphrase;
  EXPECT_EQ(Run(listed).outcome, CacheOutcome::kSemantic);
  // Sampling without a fixed seed neither reads nor fills the tier.
  CompletionRequest sampled = Chat(kOther);
  sampled.sampling.temperature = 0.9f;
  const uint64_t lookups = s_.gw->semantic_stats()->lookups;
  Run(sampled);
  EXPECT_EQ(s_.gw->semantic_stats()->lookups, lookups);
}

TEST_F(SemanticGatewayTest, GuardsKeepNumbersApart) {
  Run(Chat("the dog saw 2 birds in the park"));
  EXPECT_EQ(Run(Chat("The dog saw 3 birds in the park!")).outcome, CacheOutcome::kMiss);
}

TEST_F(SemanticGatewayTest, AnEncoderFailureNeverFailsTheRequest) {
  // Longer than the encoder's 24 tokens: it refuses, the request is generated.
  const std::string text =
      "the dog saw the bird and the cat saw the dog and the bird saw the cat in the park "
      "with her friend";
  const Observed o = Run(Chat(text));
  EXPECT_TRUE(o.ok);
  EXPECT_EQ(o.outcome, CacheOutcome::kMiss);
  EXPECT_EQ(Metric("strata_semantic_encode_failures_total"), 1);
  EXPECT_EQ(s_.gw->semantic_stats()->inserts, 0u) << "no vector, nothing stored";
}

TEST_F(SemanticGatewayTest, ModesAndThresholdChangeLiveButTheTierCannotBeTurnedOnLive) {
  Build(L3Mode::kOn, {});
  Run(Chat(kAsked, false));
  EXPECT_EQ(Run(Chat(kParaphrase, false)).outcome, CacheOutcome::kSemantic);
  GatewayLiveOptions live = s_.gw->live_options();
  live.semantic_min_similarity = 1.0;  // only identical vectors
  ASSERT_TRUE(s_.gw->Reconfigure(live).ok());
  CompletionRequest again = Chat(kParaphrase, false);
  again.max_tokens = 7;
  Run(Chat(kAsked, false));
  EXPECT_NE(Run(again).outcome, CacheOutcome::kSemantic);
  live.semantic_min_similarity = 0.5;  // below the screen's threshold
  EXPECT_FALSE(s_.gw->Reconfigure(live).ok());
  Build(L3Mode::kOff, {});
  EXPECT_FALSE(s_.gw->semantic_stats().has_value());
  live = s_.gw->live_options();
  live.semantic_mode = L3Mode::kOn;
  EXPECT_FALSE(s_.gw->Reconfigure(live).ok());
}

// Verification: while the threshold is being learned every would-be hit is
// generated anyway and compared; once enough agreed, hits are served at the
// learned threshold, and the estimate is exported.
TEST_F(SemanticGatewayTest, WouldBeHitsAreVerifiedAndTheLearnedThresholdIsServed) {
  verify_share_ = 0.5;
  Build(L3Mode::kOptIn, {}, /*l1=*/false);  // the same text reaches the semantic tier
  const Observed first = Run(Chat(kAsked));
  for (int i = 0; i < 3; ++i) {
    const Observed o = Run(Chat(kAsked));
    EXPECT_EQ(o.outcome, CacheOutcome::kMiss) << "warming up: verified, not served";
    EXPECT_EQ(o.text, first.text);
  }
  EXPECT_EQ(Metric("strata_semantic_verifications_total{result=\"agreed\"}"), 3);
  EXPECT_NEAR(Metric("strata_semantic_threshold"), 1.0, 1e-4);
  EXPECT_EQ(Metric("strata_semantic_false_hit_rate"), 0);
  EXPECT_GT(Metric("strata_semantic_false_hit_rate_upper"), 0);
  int served = 0, verified = 0;
  for (int i = 0; i < 20; ++i) {
    const Observed o = Run(Chat(kAsked));
    EXPECT_EQ(o.text, first.text);
    (o.outcome == CacheOutcome::kSemantic ? served : verified) += 1;
  }
  EXPECT_GT(served, 0);
  EXPECT_GT(verified, 0) << "a share keeps being verified";
  // A rewording below the learned threshold (1.0) is not served.
  EXPECT_EQ(Run(Chat(kParaphrase)).outcome, CacheOutcome::kMiss);
}

template <typename F>
bool Eventually(F&& f) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return f();
}

// Two instances on one Redis (a real redis-server; skipped without it):
// each one's semantic entries reach the other's index (a new instance's by
// a warm start, later ones through the stream), so a rewording asked of
// the other is answered; an invalidation clears them everywhere.
TEST_F(SemanticGatewayTest, InstancesShareTheirSemanticEntriesThroughRedis) {
  auto redis = testing::RedisServer::Start();
  if (!redis) GTEST_SKIP() << testing::RedisServer::kMissing;
  redis_port_ = redis->port();
  Build(L3Mode::kOptIn, {});
  ASSERT_EQ(Run(Chat(kAsked)).outcome, CacheOutcome::kMiss);
  ASSERT_TRUE(s_.gw->FlushShared(std::chrono::seconds(5)));

  obs::MetricsRegistry b_metrics;
  testing::ServingStack b;
  testing::StartServingStack(b, options_, b_metrics, clock_, *log_);
  // The warm start adopts what Redis holds.
  ASSERT_TRUE(Eventually([&] { return b.gw->semantic_stats()->entries == 1; }));
  const Observed reworded = RunOn(*b.gw, Chat(kParaphrase));
  EXPECT_EQ(reworded.outcome, CacheOutcome::kSemantic);
  EXPECT_EQ(reworded.text, Run(Chat(kAsked)).text);
  // B's new answer reaches A through the stream.
  ASSERT_EQ(RunOn(*b.gw, Chat(kOther)).outcome, CacheOutcome::kMiss);
  ASSERT_TRUE(b.gw->FlushShared(std::chrono::seconds(5)));
  ASSERT_TRUE(Eventually([&] { return s_.gw->semantic_stats()->entries == 2; }));
  EXPECT_GE(Metric("strata_semantic_shared_adopted_total"), 1);
  // Another tenant never sees them.
  CompletionRequest beta = Chat(kParaphrase);
  beta.tenant = "beta";
  EXPECT_EQ(RunOn(*b.gw, beta).outcome, CacheOutcome::kMiss);

  // An invalidation on A removes them from Redis and from B.
  Invalidation what;
  what.tenant = "alpha";
  auto report = s_.gw->Invalidate(what);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->semantic, 2u);
  EXPECT_GE(report->shared, 4u) << "two L1 and two semantic entries in Redis";
  ASSERT_TRUE(Eventually([&] {
    const auto st = b.gw->semantic_stats();
    return st->entries == 1;  // beta's
  }));
  EXPECT_EQ(RunOn(*b.gw, Chat(kParaphrase)).outcome, CacheOutcome::kMiss);
  b.Stop();
}

// Warm-up: what one instance exports, a new one imports before its first
// request: L1, the semantic tier and the prompt's prefix blocks (L2).
TEST_F(SemanticGatewayTest, ASnapshotWarmsANewInstance) {
  CompletionRequest long_prompt = Chat(kAsked);
  long_prompt.messages.front().content =
      "You are terse. Answer in one short sentence, and never more than that.";
  const Observed first = Run(long_prompt);
  ASSERT_TRUE(first.ok);
  // A second question after the same system prompt: its blocks are shared,
  // so the snapshot carries them.
  CompletionRequest second = long_prompt;
  second.messages.back().content = "where did the bird fly after it saw the dog";
  ASSERT_TRUE(Run(second).ok);
  auto snapshot = s_.gw->ExportCache();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();

  obs::MetricsRegistry b_metrics;
  testing::ServingStack b;
  testing::StartServingStack(b, options_, b_metrics, clock_, *log_);
  auto report = b.gw->ImportCache(*snapshot);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->l1, 2u);
  EXPECT_EQ(report->semantic, 2u);
  EXPECT_GE(report->l2_prefixes, 1u);
  EXPECT_GE(report->l2_blocks, 1u);
  EXPECT_TRUE(report->warnings.empty());
  const Observed exact = RunOn(*b.gw, long_prompt);
  EXPECT_EQ(exact.outcome, CacheOutcome::kL1);
  EXPECT_EQ(exact.text, first.text);
  CompletionRequest reworded = long_prompt;
  reworded.messages.back().content = kParaphrase;
  EXPECT_EQ(RunOn(*b.gw, reworded).outcome, CacheOutcome::kSemantic);
  // The prefix blocks were computed before the first request: a new
  // question after the same system prompt adopts them.
  CompletionRequest other = long_prompt;
  other.messages.back().content = kOther;
  EXPECT_EQ(RunOn(*b.gw, other).outcome, CacheOutcome::kMiss);
  EXPECT_GT(b.sched->Stats().prefix_hits, 0);
  // Damaged bytes: nothing applied.
  std::string damaged = *snapshot;
  damaged.resize(damaged.size() - 3);
  EXPECT_EQ(b.gw->ImportCache(damaged).status().code(), util::StatusCode::kDataLoss);
  b.Stop();
}

// The hit-rate trigger: lookups the tier cannot answer push its rate below
// the floor; it re-learns (threshold from recent checks, lists retrained),
// says so in a log line and the metrics, and reports the rate after.
TEST_F(SemanticGatewayTest, AHitRateBelowTheFloorMakesTheTierRelearn) {
  trigger_ = {.floor = 0.5, .window = 10, .cooldown = 100};
  Build(L3Mode::kOptIn, {}, /*l1=*/false);
  Run(Chat(kAsked));             // a lookup (a miss), then stored: later ones of it hit
  for (int i = 0; i < 9; ++i) {  // with it, 10 lookups and 1 hit: rate 0.1
    CompletionRequest r = Chat(i == 0 ? kParaphrase : kOther);
    r.max_tokens = i == 0 ? 8 : 20 + i;  // distinct scopes: misses
    Run(r);
  }
  EXPECT_EQ(Metric("strata_semantic_relearns_total"), 1);
  EXPECT_NEAR(Metric("strata_semantic_relearn_hit_rate{when=\"before\"}"), 0.1, 1e-9);
  EXPECT_NEAR(Metric("strata_semantic_hit_rate"), 0.1, 1e-9);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Run(Chat(kAsked)).outcome, CacheOutcome::kSemantic);
  EXPECT_NEAR(Metric("strata_semantic_relearn_hit_rate{when=\"after\"}"), 1.0, 1e-9);
  EXPECT_NEAR(Metric("strata_semantic_hit_rate"), 1.0, 1e-9);
  EXPECT_EQ(Metric("strata_semantic_relearns_total"), 1) << "settled, not triggered again";
}

}  // namespace semantic_test
}  // namespace strata::gateway
