// The L1 response cache and single flight, through the gateway with a tiny
// random-weight model: what is cached, what a hit replays, and how identical
// concurrent requests share one generation.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "engine/engine.h"
#include "gateway/gateway.h"
#include "testing/fake_clock.h"
#include "testing/scheduler_gate.h"
#include "testing/serving_stack.h"
#include "testing/tiny_model.h"
#include "util/log.h"

namespace strata::gateway {
namespace {

using std::chrono::seconds;

using CacheGate = testing::SchedulerGate;

// Everything a client could observe of a generation.
struct CacheObserved {
  std::vector<Event> events;
  CacheOutcome outcome = CacheOutcome::kMiss;
  std::string Text(int32_t choice = 0) const {
    std::string t;
    for (const auto& e : events) {
      if (e.kind == Event::Kind::kDelta && e.index == choice) t += e.text;
    }
    return t;
  }
  int32_t Completion() const {
    int32_t n = 0;
    for (const auto& e : events)
      n += e.kind == Event::Kind::kFinish ? e.usage.completion_tokens : 0;
    return n;
  }
  bool AllOk() const {
    int finishes = 0;
    for (const auto& e : events) {
      if (e.kind != Event::Kind::kFinish) continue;
      ++finishes;
      if (!e.status.ok() || e.finish == FinishReason::kCancelled) return false;
    }
    return finishes > 0;
  }
};

void ExpectSameEvents(const std::vector<Event>& a, const std::vector<Event>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i));
    EXPECT_EQ(a[i].kind, b[i].kind);
    EXPECT_EQ(a[i].index, b[i].index);
    EXPECT_EQ(a[i].text, b[i].text);
    EXPECT_EQ(a[i].finish, b[i].finish);
    EXPECT_EQ(a[i].stop_sequence, b[i].stop_sequence);
    EXPECT_EQ(a[i].status.ok(), b[i].status.ok());
    EXPECT_EQ(a[i].usage.prompt_tokens, b[i].usage.prompt_tokens);
    EXPECT_EQ(a[i].usage.completion_tokens, b[i].usage.completion_tokens);
    EXPECT_EQ(a[i].usage.cached_tokens, b[i].usage.cached_tokens);
    ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size());
    for (size_t k = 0; k < a[i].logprobs.size(); ++k) {
      EXPECT_EQ(a[i].logprobs[k].text, b[i].logprobs[k].text);
      EXPECT_EQ(a[i].logprobs[k].bytes, b[i].logprobs[k].bytes);
      EXPECT_EQ(a[i].logprobs[k].logprob, b[i].logprobs[k].logprob);
      EXPECT_EQ(a[i].logprobs[k].top, b[i].logprobs[k].top);
    }
  }
}

class ResponseCacheGatewayTest : public ::testing::Test {
 protected:
  void SetUp() override { Build({}); }
  void TearDown() override { s_.Stop(); }
  void Build(engine::SchedulerOptions so, bool l1 = true, bool coalesce = true) {
    s_.Stop();  // before its registry goes
    metrics_ = std::make_unique<obs::MetricsRegistry>();
    GatewayOptions go = testing::TinyGatewayOptions();
    go.l1.max_bytes = l1 ? 8u << 20 : 0;
    go.l1.ttl = seconds(60);
    go.l1.ttl_jitter = 0.1;
    go.coalesce = coalesce;
    testing::StartServingStack(s_, go, *metrics_, clock_, *log_, so);
  }

  static CacheObserved Collect(Generation& g) {
    CacheObserved o;
    o.outcome = g.cache_outcome();
    const auto far = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (true) {
      auto e = g.Next(far);
      if (!e.ok()) {
        EXPECT_EQ(e.status().code(), util::StatusCode::kOutOfRange) << e.status().ToString();
        break;
      }
      o.events.push_back(std::move(*e));
    }
    return o;
  }
  CacheObserved Run(const CompletionRequest& r) {
    auto g = s_.gw->Start(r);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    if (!g.ok()) return {};
    return Collect(**g);
  }
  static CompletionRequest Greedy(const std::string& text, int max_tokens) {
    CompletionRequest r;
    r.prompt = text;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0.0f;
    return r;
  }
  static CompletionRequest Uncached(CompletionRequest r) {
    r.response_cache = false;
    return r;
  }
  double Metric(const std::string& series) const {
    const std::string text = metrics_->Render();
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  }
  // Holds the scheduler thread (once it reaches the gate's first token)
  // until the returned gate is opened.
  std::shared_ptr<CacheGate> SubmitGate() {
    auto gate = std::make_shared<CacheGate>();
    engine::SchedulerRequest sr;
    sr.prompt = {1, 2, 3};
    sr.max_tokens = 2;
    sr.stop_at_eog = false;
    sr.sink = gate;
    EXPECT_TRUE(s_.sched->Submit(std::move(sr)).ok());
    return gate;
  }
  std::shared_ptr<CacheGate> HoldScheduler() {
    auto gate = SubmitGate();
    gate->WaitHolding();
    return gate;
  }

  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  testing::FakeClock clock_;
  std::unique_ptr<obs::MetricsRegistry> metrics_;
  testing::ServingStack s_;
};

TEST_F(ResponseCacheGatewayTest, AHitReplaysExactlyTheEventsOfTheRunThatStoredThem) {
  CompletionRequest r = Greedy("the little dog", 12);
  r.top_logprobs = 3;
  r.n = 2;
  r.stop = {"zz"};
  const CacheObserved cold = Run(Uncached(r));
  const CacheObserved first = Run(r);
  const CacheObserved second = Run(r);
  EXPECT_EQ(cold.outcome, CacheOutcome::kMiss);
  EXPECT_EQ(first.outcome, CacheOutcome::kMiss);
  EXPECT_EQ(second.outcome, CacheOutcome::kL1);
  ASSERT_TRUE(first.AllOk());
  ExpectSameEvents(first.events, second.events);
  EXPECT_EQ(first.Text(0), cold.Text(0));  // caching never changes the answer
  EXPECT_EQ(first.Text(1), cold.Text(1));
  EXPECT_FALSE(second.events.front().logprobs.empty()) << "logprobs are stored with the text";
  const auto s = s_.gw->l1_stats();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->hits, 1u);
  EXPECT_EQ(s->misses, 1u);
  EXPECT_EQ(s->entries, 1u);
  // Only the two generations ran.
  EXPECT_EQ(Metric("strata_generated_tokens_total"), cold.Completion() + first.Completion());
}

TEST_F(ResponseCacheGatewayTest, SampledRequestsWithAFixedSeedAreCachedPerSeed) {
  CompletionRequest r = Greedy("the cat", 10);
  r.sampling.temperature = 1.3f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 0.0f;
  r.sampling.seed = 7;
  r.fixed_seed = true;
  r.n = 3;  // choice i uses seed + i: still reproducible
  const CacheObserved a = Run(r);
  const CacheObserved b = Run(r);
  EXPECT_EQ(a.outcome, CacheOutcome::kMiss);
  EXPECT_EQ(b.outcome, CacheOutcome::kL1);
  ExpectSameEvents(a.events, b.events);
  EXPECT_EQ(a.Text(2), Run(Uncached(r)).Text(2));
  r.sampling.seed = 8;
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kMiss) << "another seed is another answer";
}

TEST_F(ResponseCacheGatewayTest, SamplingWithoutAFixedSeedIsNeverCachedNorCoalesced) {
  CompletionRequest r = Greedy("the cat", 6);
  r.sampling.temperature = 0.9f;
  r.fixed_seed = false;
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kMiss);
  auto gate = HoldScheduler();
  auto g1 = s_.gw->Start(r);
  auto g2 = s_.gw->Start(r);
  ASSERT_TRUE(g1.ok() && g2.ok());
  EXPECT_EQ((*g2)->cache_outcome(), CacheOutcome::kMiss);
  gate->Open();
  Collect(**g1);
  Collect(**g2);
  EXPECT_EQ(s_.gw->l1_stats()->stores, 0u);
  EXPECT_EQ(s_.gw->l1_stats()->misses, 0u) << "not even looked up";
}

TEST_F(ResponseCacheGatewayTest, ARequestThatOptsOutIsNeitherServedNorStored) {
  const CompletionRequest r = Greedy("a red fox", 8);
  EXPECT_EQ(Run(Uncached(r)).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(s_.gw->l1_stats()->stores, 0u);
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kL1);
  EXPECT_EQ(Run(Uncached(r)).outcome, CacheOutcome::kMiss) << "opted out of a warm entry";
}

TEST_F(ResponseCacheGatewayTest, TenantsNeverShareAnswers) {
  CompletionRequest r = Greedy("the cat sat", 6);
  r.tenant = "alpha";
  Run(r);
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kL1);
  r.tenant = "beta";
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kL1);
}

TEST_F(ResponseCacheGatewayTest, EveryParameterThatChangesTheAnswerIsInTheKey) {
  const CompletionRequest base = Greedy("the cat sat", 6);
  Run(base);
  ASSERT_EQ(Run(base).outcome, CacheOutcome::kL1);
  std::vector<std::pair<std::string, CompletionRequest>> variants;
  auto add = [&](const std::string& what, auto change) {
    CompletionRequest r = base;
    change(r);
    variants.emplace_back(what, r);
  };
  add("max_tokens", [](CompletionRequest& r) { r.max_tokens = 7; });
  add("n", [](CompletionRequest& r) { r.n = 2; });
  add("stop", [](CompletionRequest& r) { r.stop = {"q"}; });
  add("top_logprobs", [](CompletionRequest& r) { r.top_logprobs = 0; });
  add("top_k", [](CompletionRequest& r) { r.sampling.top_k = 3; });
  add("repetition_penalty", [](CompletionRequest& r) { r.sampling.repetition_penalty = 1.2f; });
  add("seed", [](CompletionRequest& r) { r.sampling.seed = 1; });
  add("logit_bias", [](CompletionRequest& r) { r.sampling.logit_bias = {{5, -100.0f}}; });
  add("logit_bias value", [](CompletionRequest& r) { r.sampling.logit_bias = {{5, -99.0f}}; });
  add("prompt", [](CompletionRequest& r) { r.prompt = "the cat sat down"; });
  add("chat instead of prompt", [](CompletionRequest& r) {
    r.prompt.reset();
    r.messages = {{"user", "the cat sat"}};
  });
  for (const auto& [what, r] : variants) {
    EXPECT_EQ(Run(r).outcome, CacheOutcome::kMiss) << what;
  }
}

TEST_F(ResponseCacheGatewayTest, AGenerationCancelledHalfwayIsNotStored) {
  const CompletionRequest r = Greedy("once upon a time", 60);
  auto first_gate = HoldScheduler();
  auto g = s_.gw->Start(r);
  ASSERT_TRUE(g.ok());
  auto second_gate = SubmitGate();  // stops the engine right after the first token
  first_gate->Open();
  second_gate->WaitHolding();
  auto first = (*g)->Next(std::chrono::steady_clock::now() + std::chrono::minutes(1));
  ASSERT_TRUE(first.ok());
  (*g)->Cancel();  // the client went away; nobody else waits
  g->reset();
  second_gate->Open();
  EXPECT_TRUE(s_.sched->Drain(std::chrono::minutes(1)));
  EXPECT_EQ(s_.gw->l1_stats()->stores, 0u);
  EXPECT_EQ(Metric("strata_generations_finished_total{reason=\"cancelled\"}"), 1);
}

TEST_F(ResponseCacheGatewayTest, ARefusedRequestLeavesNoFlightBehind) {
  Build({.max_running = 1, .max_queue = 0});
  auto gate = HoldScheduler();  // holds the only slot
  const CompletionRequest r = Greedy("the dog", 5);
  auto refused = s_.gw->Start(r);
  EXPECT_EQ(refused.status().code(), util::StatusCode::kResourceExhausted);
  gate->Open();
  // Leads a new flight (not a follower of the refused one) once the slot is free.
  util::StatusOr<std::unique_ptr<Generation>> g = s_.gw->Start(r);
  while (g.status().code() == util::StatusCode::kResourceExhausted) {
    std::this_thread::yield();
    g = s_.gw->Start(r);
  }
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)->cache_outcome(), CacheOutcome::kMiss);
  const CacheObserved o = Collect(**g);
  EXPECT_EQ(o.outcome, CacheOutcome::kMiss);
  EXPECT_TRUE(o.AllOk());
}

TEST_F(ResponseCacheGatewayTest, HundredIdenticalConcurrentRequestsMakeOneGeneration) {
  const CompletionRequest r = Greedy("the quick brown fox", 24);
  const std::string reference = Run(Uncached(r)).Text();  // an uncached run's answer
  ASSERT_FALSE(reference.empty());
  const double tokens_before = Metric("strata_generated_tokens_total");
  auto gate = HoldScheduler();  // the cache is cold and nothing advances yet
  constexpr int kN = 100;
  std::vector<CacheObserved> seen(kN);
  std::atomic<int> started{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kN; ++i) {
    clients.emplace_back([&, i] {
      auto g = s_.gw->Start(r);
      ++started;
      if (!g.ok()) {
        ADD_FAILURE() << g.status().ToString();
        return;
      }
      seen[static_cast<size_t>(i)] = Collect(**g);
    });
  }
  while (started.load() < kN) std::this_thread::yield();
  gate->Open();
  for (auto& c : clients) c.join();
  int misses = 0, coalesced = 0;
  for (const CacheObserved& o : seen) {
    EXPECT_EQ(o.Text(), reference);
    EXPECT_TRUE(o.AllOk());
    misses += o.outcome == CacheOutcome::kMiss;
    coalesced += o.outcome == CacheOutcome::kCoalesced;
  }
  EXPECT_EQ(misses, 1);
  EXPECT_EQ(coalesced, kN - 1);
  EXPECT_EQ(Metric("strata_generated_tokens_total") - tokens_before, 24) << "one generation";
  EXPECT_EQ(Metric("strata_cache_coalesced_total"), kN - 1);
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kL1);
}

TEST_F(ResponseCacheGatewayTest, TheLeadersClientLeavingDoesNotTruncateItsFollowers) {
  const CompletionRequest r = Greedy("the old man and the sea", 40);
  const CacheObserved reference = Run(Uncached(r));
  auto gate = HoldScheduler();
  auto leader = s_.gw->Start(r);
  auto follower = s_.gw->Start(r);
  ASSERT_TRUE(leader.ok() && follower.ok());
  EXPECT_EQ((*leader)->cache_outcome(), CacheOutcome::kMiss);
  EXPECT_EQ((*follower)->cache_outcome(), CacheOutcome::kCoalesced);
  (*leader)->Cancel();
  leader->reset();  // the first client hung up before anything was generated
  gate->Open();
  const CacheObserved f = Collect(**follower);
  EXPECT_TRUE(f.AllOk());
  EXPECT_EQ(f.Text(), reference.Text());
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kL1) << "the finished flight was stored";
}

TEST_F(ResponseCacheGatewayTest, WhenEveryReaderLeavesTheGenerationStops) {
  const CompletionRequest r = Greedy("the old man and the sea", 60);
  auto gate = HoldScheduler();
  auto a = s_.gw->Start(r);
  auto b = s_.gw->Start(r);
  ASSERT_TRUE(a.ok() && b.ok());
  a->reset();
  b->reset();
  gate->Open();
  EXPECT_TRUE(s_.sched->Drain(std::chrono::minutes(1)));
  EXPECT_EQ(s_.gw->l1_stats()->stores, 0u);
  EXPECT_LT(Metric("strata_generated_tokens_total"), 60) << "cancelled, not run to the end";
}

TEST_F(ResponseCacheGatewayTest, AFollowerJoiningMidGenerationReadsFromTheFirstEvent) {
  const CompletionRequest r = Greedy("a long time ago", 30);
  const CacheObserved reference = Run(Uncached(r));
  ASSERT_FALSE(reference.events.front().text.empty());
  auto first_gate = HoldScheduler();
  auto leader = s_.gw->Start(r);
  ASSERT_TRUE(leader.ok());
  auto second_gate = SubmitGate();  // prefilled with the leader: stops it after its first token
  first_gate->Open();
  second_gate->WaitHolding();
  auto e = (*leader)->Next(std::chrono::steady_clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(e.ok()) << "the leader had produced its first event";
  auto late = s_.gw->Start(r);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ((*late)->cache_outcome(), CacheOutcome::kCoalesced);
  second_gate->Open();
  const CacheObserved f = Collect(**late);
  EXPECT_EQ(f.Text(), reference.Text());
  EXPECT_TRUE(f.AllOk());
  CacheObserved l = Collect(**leader);
  l.events.insert(l.events.begin(), std::move(*e));
  EXPECT_EQ(l.Text(), reference.Text());
}

TEST_F(ResponseCacheGatewayTest, CoalescingWorksWithL1Off) {
  Build({}, /*l1=*/false, /*coalesce=*/true);
  EXPECT_FALSE(s_.gw->l1_stats().has_value());
  const CompletionRequest r = Greedy("the cat", 8);
  auto gate = HoldScheduler();
  auto a = s_.gw->Start(r);
  auto b = s_.gw->Start(r);
  gate->Open();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*b)->cache_outcome(), CacheOutcome::kCoalesced);
  EXPECT_EQ(Collect(**a).Text(), Collect(**b).Text());
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kMiss) << "nothing is stored without L1";
}

TEST_F(ResponseCacheGatewayTest, EntriesExpireAfterTheirJitteredTtl) {
  const CompletionRequest r = Greedy("the cat", 4);
  Run(r);
  clock_.Advance(seconds(53));  // ttl 60 s, jitter 0.1: alive until at least 54 s
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kL1);
  clock_.Advance(seconds(14));  // past 66 s: gone
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(s_.gw->l1_stats()->expirations, 1u);
  EXPECT_EQ(Metric("strata_cache_expirations_total{tier=\"l1\"}"), 1);
}

TEST_F(ResponseCacheGatewayTest, PerTierMetricsAreExported) {
  const CompletionRequest r = Greedy("the cat", 4);
  Run(r);
  Run(r);
  Run(r);
  EXPECT_EQ(Metric("strata_cache_hits_total{tier=\"l1\"}"), 2);
  EXPECT_EQ(Metric("strata_cache_misses_total{tier=\"l1\"}"), 1);
  EXPECT_EQ(Metric("strata_cache_entries{tier=\"l1\"}"), 1);
  EXPECT_EQ(Metric("strata_cache_bytes{tier=\"l1\"}"),
            static_cast<double>(s_.gw->l1_stats()->bytes));
  EXPECT_GT(Metric("strata_cache_bytes{tier=\"l1\"}"), 0);
  EXPECT_EQ(Metric("strata_cache_evictions_total{tier=\"l1\"}"), 0);
  EXPECT_EQ(Metric("strata_cache_coalesced_total"), 0);
}

}  // namespace
}  // namespace strata::gateway
