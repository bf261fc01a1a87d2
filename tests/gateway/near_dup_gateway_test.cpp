// The L3 near-duplicate tier through the gateway with a tiny random-weight
// model: who may be answered by a paraphrase's stored answer, what must
// match exactly, and what is never stored.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "gateway/gateway.h"
#include "testing/fake_clock.h"
#include "testing/scheduler_gate.h"
#include "testing/serving_stack.h"
#include "testing/tiny_model.h"
#include "util/log.h"

namespace strata::gateway {
namespace {

using NearDupGate = testing::SchedulerGate;

constexpr const char* kAsked = "How do I reverse a linked list in Python?";
constexpr const char* kParaphrase = "how do i reverse a linked-list in PYTHON";
constexpr const char* kOther = "How do I sort a linked list in Python?";

struct NearDupObserved {
  CacheOutcome outcome = CacheOutcome::kMiss;
  std::optional<double> similarity;
  std::string text;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  bool ok = false;
};

class NearDupGatewayTest : public ::testing::Test {
 protected:
  void SetUp() override { Build(L3Mode::kOptIn, {"always"}); }
  void TearDown() override { s_.Stop(); }
  void Build(L3Mode mode, std::vector<std::string> l3_tenants, bool l1 = true) {
    s_.Stop();  // before its registry goes
    metrics_ = std::make_unique<obs::MetricsRegistry>();
    GatewayOptions go = testing::TinyGatewayOptions();
    go.l1.max_bytes = l1 ? 8u << 20 : 0;
    go.coalesce = true;
    go.l3_mode = mode;
    go.l3_tenants = std::move(l3_tenants);
    go.l3.max_bytes = 8u << 20;
    go.l3.ttl = std::chrono::seconds(600);
    testing::StartServingStack(s_, go, *metrics_, clock_, *log_);
  }
  NearDupObserved Run(const CompletionRequest& r) {
    NearDupObserved o;
    auto g = s_.gw->Start(r);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    if (!g.ok()) return o;
    o.outcome = (*g)->cache_outcome();
    o.similarity = (*g)->cache_similarity();
    o.prompt_tokens = (*g)->prompt_tokens();
    o.ok = true;
    const auto far = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (true) {
      auto e = (*g)->Next(far);
      if (!e.ok()) break;
      if (e->kind == Event::Kind::kDelta) o.text += e->text;
      if (e->kind == Event::Kind::kFinish) {
        o.ok = o.ok && e->status.ok() && e->finish != FinishReason::kCancelled;
        o.completion_tokens += e->usage.completion_tokens;
        EXPECT_EQ(e->usage.prompt_tokens, o.prompt_tokens);
      }
    }
    return o;
  }
  static CompletionRequest Chat(const std::string& text, bool ask_l3 = true) {
    CompletionRequest r;
    r.tenant = "alpha";
    r.messages = {{"system", "You are terse."}, {"user", text}};
    r.max_tokens = 8;
    r.sampling.temperature = 0.0f;
    if (ask_l3) r.l3 = true;
    return r;
  }
  double Metric(const std::string& series) const {
    const std::string text = metrics_->Render();
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  }

  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  testing::FakeClock clock_;
  std::unique_ptr<obs::MetricsRegistry> metrics_;
  testing::ServingStack s_;
};

TEST_F(NearDupGatewayTest, AParaphraseGetsTheStoredAnswerMarkedWithItsSimilarity) {
  const NearDupObserved first = Run(Chat(kAsked));
  ASSERT_TRUE(first.ok);
  EXPECT_EQ(first.outcome, CacheOutcome::kMiss);
  const NearDupObserved second = Run(Chat(kParaphrase));
  EXPECT_EQ(second.outcome, CacheOutcome::kL3);
  ASSERT_TRUE(second.similarity.has_value());
  EXPECT_GE(*second.similarity, cache::kDefaultNearDupSimilarity);
  EXPECT_LE(*second.similarity, 1.0);
  EXPECT_EQ(second.text, first.text);
  EXPECT_EQ(second.completion_tokens, first.completion_tokens);
  EXPECT_NE(second.prompt_tokens, first.prompt_tokens) << "its own prompt's token count";
  EXPECT_EQ(Run(Chat(kOther)).outcome, CacheOutcome::kMiss) << "another question";
  EXPECT_EQ(Run(Chat(kAsked)).outcome, CacheOutcome::kL1) << "the exact tier comes first";
}

TEST_F(NearDupGatewayTest, ACompletionPromptIsComparedWhole) {
  CompletionRequest a;
  a.tenant = "alpha";
  a.prompt = "Translate to French: the weather is nice today";
  a.max_tokens = 6;
  a.sampling.temperature = 0.0f;
  a.l3 = true;
  Run(a);
  CompletionRequest b = a;
  b.prompt = "translate to french - The weather is nice today!";
  EXPECT_EQ(Run(b).outcome, CacheOutcome::kL3);
}

TEST_F(NearDupGatewayTest, TenantsNeverShareNearDuplicates) {
  Run(Chat(kAsked));
  CompletionRequest other = Chat(kParaphrase);
  other.tenant = "beta";
  EXPECT_EQ(Run(other).outcome, CacheOutcome::kMiss);
  CompletionRequest third = Chat(kAsked);
  third.tenant = "gamma";
  EXPECT_EQ(Run(third).outcome, CacheOutcome::kMiss) << "not even the identical text";
}

TEST_F(NearDupGatewayTest, OnlyRequestsThatAskOrWhoseTenantDefaultsToItAreAnswered) {
  Run(Chat(kAsked));
  EXPECT_EQ(Run(Chat(kParaphrase, /*ask_l3=*/false)).outcome, CacheOutcome::kMiss)
      << "opt-in: not asked";
  CompletionRequest refused = Chat("How do I reverse a linked list in python");  // would hit
  refused.l3 = false;
  EXPECT_EQ(Run(refused).outcome, CacheOutcome::kMiss);
  // A tenant listed in l3_tenants gets L3 without asking, and may still refuse.
  CompletionRequest listed = Chat(kAsked, false);
  listed.tenant = "always";
  Run(listed);
  listed.messages.back().content = kParaphrase;
  EXPECT_EQ(Run(listed).outcome, CacheOutcome::kL3);
  listed.l3 = false;
  EXPECT_EQ(Run(listed).outcome, CacheOutcome::kMiss);
}

TEST_F(NearDupGatewayTest, ModeOnAnswersEveryoneUnlessTheyRefuseAndOffAnswersNoOne) {
  Build(L3Mode::kOn, {});
  Run(Chat(kAsked, false));
  EXPECT_EQ(Run(Chat(kParaphrase, false)).outcome, CacheOutcome::kL3);
  CompletionRequest refused = Chat(kParaphrase);
  refused.l3 = false;
  EXPECT_EQ(Run(refused).outcome, CacheOutcome::kMiss);
  Build(L3Mode::kOff, {"alpha"});
  Run(Chat(kAsked));
  EXPECT_EQ(Run(Chat(kParaphrase)).outcome, CacheOutcome::kMiss);
  EXPECT_FALSE(s_.gw->l3_stats().has_value());
}

TEST_F(NearDupGatewayTest, EverythingButTheWordingMustMatchExactly) {
  const CompletionRequest base = Chat(kAsked);
  Run(base);
  ASSERT_EQ(Run(Chat(kParaphrase)).outcome, CacheOutcome::kL3);
  std::vector<std::pair<std::string, CompletionRequest>> variants;
  auto add = [&](const std::string& what, auto change) {
    CompletionRequest r = Chat(kParaphrase);
    change(r);
    variants.emplace_back(what, r);
  };
  add("max_tokens", [](CompletionRequest& r) { r.max_tokens = 9; });
  add("no max_tokens", [](CompletionRequest& r) { r.max_tokens.reset(); });
  add("n", [](CompletionRequest& r) { r.n = 2; });
  add("stop", [](CompletionRequest& r) { r.stop = {"q"}; });
  add("logprobs", [](CompletionRequest& r) { r.top_logprobs = 0; });
  add("ignore_eos", [](CompletionRequest& r) { r.ignore_eos = true; });
  add("top_k", [](CompletionRequest& r) { r.sampling.top_k = 3; });
  add("repetition_penalty", [](CompletionRequest& r) { r.sampling.repetition_penalty = 1.1f; });
  add("seeded sampling", [](CompletionRequest& r) {
    r.sampling.temperature = 0.7f;
    r.sampling.seed = 3;
    r.fixed_seed = true;
  });
  add("system prompt",
      [](CompletionRequest& r) { r.messages.front().content = "You are verbose."; });
  add("history", [](CompletionRequest& r) {
    r.messages.insert(r.messages.begin() + 1, {{"user", "hi"}, {"assistant", "hello"}});
  });
  add("completion endpoint", [](CompletionRequest& r) {
    r.prompt = r.messages.back().content;
    r.messages.clear();
  });
  for (const auto& [what, r] : variants) {
    EXPECT_EQ(Run(r).outcome, CacheOutcome::kMiss) << what;
  }
}

TEST_F(NearDupGatewayTest, SamplingWithoutAFixedSeedNeitherReadsNorFillsL3) {
  CompletionRequest r = Chat(kAsked);
  r.sampling.temperature = 0.9f;
  Run(r);
  EXPECT_EQ(s_.gw->l3_stats()->inserts, 0u);
  EXPECT_EQ(s_.gw->l3_stats()->lookups, 0u);
  Run(Chat(kAsked));
  r.messages.back().content = kParaphrase;
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kMiss);
}

TEST_F(NearDupGatewayTest, L3WorksWithL1OffAndARefusedL1) {
  Build(L3Mode::kOptIn, {}, /*l1=*/false);
  Run(Chat(kAsked));
  EXPECT_EQ(Run(Chat(kParaphrase)).outcome, CacheOutcome::kL3);
  CompletionRequest no_l1 = Chat("What is the tallest mountain in Europe?");
  no_l1.response_cache = false;
  Run(no_l1);
  no_l1.messages.back().content = "what's the tallest mountain in europe";
  EXPECT_EQ(Run(no_l1).outcome, CacheOutcome::kL3);
}

TEST_F(NearDupGatewayTest, ACancelledGenerationIsNotStored) {
  auto gate = std::make_shared<NearDupGate>();
  engine::SchedulerRequest sr;
  sr.prompt = {1, 2, 3};
  sr.max_tokens = 2;
  sr.stop_at_eog = false;
  sr.sink = gate;
  ASSERT_TRUE(s_.sched->Submit(std::move(sr)).ok());
  gate->WaitHolding();
  auto g = s_.gw->Start(Chat(kAsked));
  ASSERT_TRUE(g.ok());
  (*g)->Cancel();  // the client went away before any token
  g->reset();
  gate->Open();
  EXPECT_TRUE(s_.sched->Drain(std::chrono::minutes(1)));
  EXPECT_EQ(s_.gw->l3_stats()->inserts, 0u);
}

TEST_F(NearDupGatewayTest, TextsWithoutWordsSkipL3) {
  Run(Chat("?!?"));
  EXPECT_EQ(Run(Chat("?!?")).outcome, CacheOutcome::kL1);
  EXPECT_EQ(s_.gw->l3_stats()->lookups, 0u);
}

TEST_F(NearDupGatewayTest, L3MetricsAreExported) {
  Run(Chat(kAsked));
  Run(Chat(kParaphrase));
  Run(Chat(kOther));
  EXPECT_EQ(Metric("strata_cache_hits_total{tier=\"l3\"}"), 1);
  EXPECT_EQ(Metric("strata_cache_misses_total{tier=\"l3\"}"), 2);
  EXPECT_EQ(Metric("strata_cache_entries{tier=\"l3\"}"), 2);
  EXPECT_EQ(Metric("strata_cache_bytes{tier=\"l3\"}"),
            static_cast<double>(s_.gw->l3_stats()->bytes));
  EXPECT_EQ(Metric("strata_cache_evictions_total{tier=\"l3\"}"), 0);
}

TEST(L3ModeNames, RoundTrip) {
  for (L3Mode m : {L3Mode::kOff, L3Mode::kOptIn, L3Mode::kOn}) {
    EXPECT_EQ(ParseL3Mode(L3ModeName(m)), m);
  }
  EXPECT_FALSE(ParseL3Mode("maybe").has_value());
}

}  // namespace
}  // namespace strata::gateway
