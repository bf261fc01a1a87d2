// The L2 tier wired to the one eviction framework: the adapter from
// cache::EvictionPolicy to engine::BlockEvictionPolicy (each policy through the
// same conformance checks), exactness under eviction pressure, and the L2
// metrics.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <string>

#include "cache/eviction_policy.h"
#include "engine/engine.h"
#include "engine/kv_pool.h"
#include "engine/scheduler.h"
#include "gateway/block_eviction_adapter.h"
#include "gateway/prefix_metrics.h"
#include "obs/metrics.h"
#include "sampling/sampler.h"
#include "testing/fake_clock.h"
#include "testing/recording_sink.h"
#include "testing/tiny_model.h"
#include "util/log.h"
#include "util/random.h"

namespace strata::gateway {
namespace {

using cache::PolicyKind;
using std::chrono::seconds;

model::ModelConfig SmallConfig() {
  model::ModelConfig c;
  c.n_layers = 1;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  return c;
}

class BlockEvictionConformance : public ::testing::TestWithParam<PolicyKind> {
 protected:
  std::unique_ptr<engine::KvBlockPool> Pool(int32_t n_blocks) {
    return std::make_unique<engine::KvBlockPool>(
        SmallConfig(), n_blocks, 4, BlockEvictionFactory(GetParam(), clock_)(n_blocks));
  }
  testing::FakeClock clock_;
};

TEST_P(BlockEvictionConformance, TouchedReferencedBlocksAreNeverVictims) {
  auto policy = BlockEvictionFactory(GetParam(), clock_)(8);
  for (int32_t b = 0; b < 4; ++b) policy->Insert(b);
  // Block 0 is hit a lot, then referenced (no longer evictable), then hit again.
  for (int i = 0; i < 20; ++i) policy->Touch(0);
  policy->Erase(0);
  for (int i = 0; i < 20; ++i) {
    policy->Touch(0);
    clock_.Advance(seconds(1));
  }
  std::set<int32_t> victims;
  while (auto v = policy->Victim()) {
    EXPECT_NE(*v, 0);
    victims.insert(*v);
    policy->Evict(*v);
  }
  EXPECT_EQ(victims, (std::set<int32_t>{1, 2, 3}));
  // Released again, it is the only candidate.
  policy->Insert(0);
  EXPECT_EQ(policy->Victim(), 0);
}

TEST_P(BlockEvictionConformance, APoolUnderPressureNeverReclaimsAReferencedBlock) {
  // Random sequences share prefixes of a few chains; the pool CHECKs that every
  // victim is unreferenced, and here every allocation must be a block nobody holds.
  const int32_t n_blocks = 24;
  auto pool = Pool(n_blocks);
  util::Rng rng(5);
  struct Seq {
    std::vector<int32_t> blocks;
  };
  std::vector<Seq> live;
  int64_t hits = 0;
  for (int step = 0; step < 3000; ++step) {
    clock_.Advance(std::chrono::milliseconds(rng.Below(500)));
    if (!live.empty() && (live.size() > 4 || rng.Below(2) == 0)) {
      const size_t i = rng.Below(live.size());
      for (auto it = live[i].blocks.rbegin(); it != live[i].blocks.rend(); ++it) pool->Unref(*it);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    // A chain: the hash of block d of chain c is c * 100 + d + 1.
    const uint64_t chain = rng.Below(6);
    const size_t len = 1 + rng.Below(5);
    Seq s;
    bool cached = true;
    for (size_t d = 0; d < len; ++d) {
      const uint64_t h = chain * 100 + d + 1;
      if (cached) {
        if (auto b = pool->Lookup(h)) {
          pool->Ref(*b);
          s.blocks.push_back(*b);
          ++hits;
          continue;
        }
        cached = false;
      }
      const std::optional<int32_t> b = pool->Allocate();
      if (!b) break;
      EXPECT_EQ(pool->ref_count(*b), 1);
      for (const Seq& other : live) {
        for (int32_t held : other.blocks) ASSERT_NE(held, *b) << "a referenced block was reclaimed";
      }
      for (int32_t held : s.blocks) ASSERT_NE(held, *b);
      const int32_t kept = pool->Publish(*b, h);
      if (kept != *b) pool->Unref(*b);
      s.blocks.push_back(kept);
    }
    live.push_back(std::move(s));
  }
  EXPECT_GT(pool->prefix_stats().evictions, 50) << "no eviction pressure";
  EXPECT_GT(hits, 100) << "no sharing";
}

INSTANTIATE_TEST_SUITE_P(Policies, BlockEvictionConformance,
                         ::testing::Values(PolicyKind::kLru, PolicyKind::kDualFactor,
                                           PolicyKind::kWTinyLfu),
                         [](const ::testing::TestParamInfo<PolicyKind>& p) {
                           std::string n(cache::PolicyKindName(p.param));
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(BlockEvictionAdapter, DualFactorRemembersHitsMadeWhileABlockWasReferenced) {
  testing::FakeClock clock;
  auto p = BlockEvictionFactory(PolicyKind::kDualFactor, clock)(4);
  // Block 0 (popular, hit while in use) is released before block 1 (hit once):
  // by recency alone 0 would go first; its access count keeps it.
  for (int i = 0; i < 6; ++i) p->Touch(0);
  p->Insert(0);
  p->Touch(1);
  p->Insert(1);
  EXPECT_EQ(p->Victim(), 1);
  // LRU through the same adapter goes by recency.
  auto lru = BlockEvictionFactory(PolicyKind::kLru, clock)(4);
  for (int i = 0; i < 6; ++i) lru->Touch(0);
  lru->Insert(0);
  lru->Touch(1);
  lru->Insert(1);
  EXPECT_EQ(lru->Victim(), 0);
}

TEST(BlockEvictionAdapter, AReclaimedBlockStartsWithoutHistory) {
  testing::FakeClock clock;
  auto p = BlockEvictionFactory(PolicyKind::kDualFactor, clock)(4);
  for (int i = 0; i < 6; ++i) p->Touch(0);
  p->Insert(0);
  p->Evict(0);  // new content in block 0 from now on
  p->Touch(1);
  p->Touch(1);
  p->Insert(1);
  p->Insert(0);
  EXPECT_EQ(p->Victim(), 0);
}

using Sink = testing::RecordingSink;

class L2TierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = testing::MakeTinyModel();
    ASSERT_NE(tiny_.model, nullptr);
  }
  // A context of 64 tokens in blocks of 4 and a pool of `n_blocks`.
  std::unique_ptr<engine::Engine> Make(int32_t n_blocks, std::optional<PolicyKind> kind) {
    engine::EngineOptions o;
    o.n_threads = 1;
    o.n_ctx = 64;
    o.n_kv_blocks = n_blocks;
    o.block_size = 4;
    if (kind) o.block_eviction = BlockEvictionFactory(*kind, clock_);
    return std::move(engine::Engine::Create(*tiny_.model, o, *log_)).value();
  }
  std::vector<int32_t> Tokens(int n, uint64_t seed) {
    util::Rng r(seed);
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(3 + static_cast<int32_t>(r.Below(250)));
    return t;
  }
  struct Run {
    std::vector<std::vector<int32_t>> tokens;
    int64_t cached_tokens = 0;
  };
  // Submits every prompt (greedy and seeded sampling alternately) and waits.
  Run RunAll(engine::Engine& e, const std::vector<std::vector<int32_t>>& prompts, bool cache,
             int32_t max_running) {
    auto sched = std::move(engine::Scheduler::Start(
                               e, {.max_running = max_running, .max_batch_tokens = 16}, *log_))
                     .value();
    std::vector<std::shared_ptr<Sink>> sinks;
    for (size_t i = 0; i < prompts.size(); ++i) {
      sampling::SamplingParams params;
      params.temperature = i % 2 == 0 ? 0.0f : 0.9f;
      params.seed = i;
      sinks.push_back(std::make_shared<Sink>(params));
      EXPECT_TRUE(
          sched->Submit(testing::RecordedRequest(prompts[i], 6, sinks.back(), cache ? 99 : 0))
              .ok());
    }
    Run run;
    for (auto& s : sinks) {
      s->Wait();
      run.cached_tokens += s->usage_.cached_tokens;
      run.tokens.push_back(s->tokens_);
    }
    return run;
  }
  // Prompts over a few shared "system prompts" of different lengths.
  std::vector<std::vector<int32_t>> SharedPrefixPrompts(int n) {
    const std::vector<std::vector<int32_t>> systems = {Tokens(8, 10), Tokens(17, 11),
                                                       Tokens(28, 12), Tokens(36, 13)};
    util::Rng r(3);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < n; ++i) {
      auto p = systems[r.Below(systems.size())];
      const auto suffix = Tokens(1 + static_cast<int>(r.Below(10)), 500 + static_cast<uint64_t>(i));
      p.insert(p.end(), suffix.begin(), suffix.end());
      prompts.push_back(std::move(p));
    }
    return prompts;
  }
  testing::TinyModel tiny_;
  testing::FakeClock clock_;
  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
};

TEST_F(L2TierTest, EveryPolicyUnderEvictionPressureMatchesTheUncachedRunTokenForToken) {
  const auto prompts = SharedPrefixPrompts(48);
  auto plain_engine = Make(64, std::nullopt);
  const Run plain = RunAll(*plain_engine, prompts, false, 3);
  for (PolicyKind kind : {PolicyKind::kLru, PolicyKind::kDualFactor, PolicyKind::kWTinyLfu}) {
    SCOPED_TRACE(std::string(cache::PolicyKindName(kind)));
    // 40 blocks of 4 tokens: three running requests and a few cached prefixes
    // at most, so cached blocks are reclaimed all the time.
    auto e = Make(40, kind);
    const Run warm = RunAll(*e, prompts, true, 3);
    EXPECT_GT(warm.cached_tokens, 200) << "the prefix cache was not used";
    EXPECT_GT(e->prefix_stats().evictions, 20) << "no eviction pressure";
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(warm.tokens[i], plain.tokens[i]) << "prompt " << i;
  }
}

// The value of one sample line `name{labels} value` of a rendered registry.
double Sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

// Registers the per-tier families as the gateway does; returns the hits one.
obs::Family<obs::CounterValue>& RegisterTierFamilies(obs::MetricsRegistry& reg) {
  auto& hits = reg.Counter("strata_cache_hits_total", "h", {"tier"});
  reg.Counter("strata_cache_misses_total", "m", {"tier"});
  reg.Counter("strata_cache_evictions_total", "e", {"tier"});
  reg.Gauge("strata_cache_bytes", "b", {"tier"});
  reg.Gauge("strata_cache_entries", "n", {"tier"});
  return hits;
}

TEST_F(L2TierTest, MetricsCountBlocksAndTokensServedFromThePrefixCache) {
  obs::MetricsRegistry reg;
  RegisterTierFamilies(reg).With({"l1"}).Inc(3);  // with an L1 child
  auto e = Make(64, PolicyKind::kLru);
  auto sched = std::move(engine::Scheduler::Start(*e, {.max_running = 2}, *log_)).value();
  ExportPrefixCacheMetrics(reg, *sched);

  // Three requests with the same 20-token prefix, one after the other.
  const auto prefix = Tokens(20, 40);
  int64_t prompt_tokens = 0, cached = 0;
  for (int i = 0; i < 3; ++i) {
    auto p = prefix;
    const auto tail = Tokens(3, 41 + static_cast<uint64_t>(i));
    p.insert(p.end(), tail.begin(), tail.end());
    prompt_tokens += static_cast<int64_t>(p.size());
    sampling::SamplingParams greedy;
    greedy.temperature = 0;
    auto sink = std::make_shared<Sink>(greedy);
    ASSERT_TRUE(sched->Submit(testing::RecordedRequest(p, 2, sink, 5)).ok());
    sink->Wait();
    cached += sink->usage_.cached_tokens;
  }
  EXPECT_EQ(cached, 2 * 20);  // five blocks of 4, twice
  const std::string text = reg.Render();
  EXPECT_EQ(Sample(text, "strata_cache_hits_total{tier=\"l1\"}"), 3);
  EXPECT_EQ(Sample(text, "strata_cache_hits_total{tier=\"l2\"}"), 10);
  // An admission looks up to its first miss: the first request misses its
  // first block; the others find all five blocks they may adopt.
  EXPECT_EQ(Sample(text, "strata_cache_misses_total{tier=\"l2\"}"), 1);
  EXPECT_EQ(Sample(text, "strata_cache_evictions_total{tier=\"l2\"}"), 0);
  // Published: the 5 shared blocks, each request's own sixth block (positions
  // 20..23) and whatever full blocks its answer completed.
  const double entries = Sample(text, "strata_cache_entries{tier=\"l2\"}");
  EXPECT_GE(entries, 5 + 3);
  EXPECT_EQ(Sample(text, "strata_cache_bytes{tier=\"l2\"}"),
            entries * static_cast<double>(e->kv_pool().bytes_per_block()));
  EXPECT_EQ(Sample(text, "strata_l2_prompt_tokens_total"), static_cast<double>(prompt_tokens));
  EXPECT_EQ(Sample(text, "strata_l2_cached_tokens_total"), 40);
  EXPECT_EQ(Sample(text, "strata_kv_blocks_shared"), 0);  // nothing runs now
}

TEST_F(L2TierTest, PositionsCopiedFromAPartlyMatchingBlockCountAsCachedTokens) {
  obs::MetricsRegistry reg;
  RegisterTierFamilies(reg);
  auto e = Make(64, PolicyKind::kLru);
  auto sched = std::move(engine::Scheduler::Start(*e, {.max_running = 2}, *log_)).value();
  ExportPrefixCacheMetrics(reg, *sched);
  // A 22-token "system prompt" (five blocks of 4, then 2 positions of the
  // sixth), then a question of each request's own.
  const auto system = Tokens(22, 60);
  std::vector<int32_t> cached;
  for (int i = 0; i < 3; ++i) {
    auto p = system;
    const auto question = Tokens(5, 61 + static_cast<uint64_t>(i));
    p.insert(p.end(), question.begin(), question.end());
    sampling::SamplingParams greedy;
    greedy.temperature = 0;
    auto sink = std::make_shared<Sink>(greedy);
    ASSERT_TRUE(sched->Submit(testing::RecordedRequest(p, 2, sink, 5)).ok());
    sink->Wait();
    cached.push_back(sink->usage_.cached_tokens);
  }
  // The first computes everything; the others adopt 5 blocks and copy the 2
  // positions (plus any a question happens to share at its start).
  EXPECT_EQ(cached[0], 0);
  EXPECT_GE(cached[1], 22);
  EXPECT_GE(cached[2], 22);
  EXPECT_LT(cached[1], 24);
  const std::string text = reg.Render();
  EXPECT_EQ(Sample(text, "strata_l2_partial_blocks_total"), 2);
  EXPECT_EQ(Sample(text, "strata_l2_cached_tokens_total"), cached[1] + cached[2]);
}

TEST_F(L2TierTest, SharedBlocksAreCountedWhileTwoSequencesHoldThem) {
  auto e = Make(64, PolicyKind::kLru);
  const auto prompt = Tokens(17, 50);
  const engine::SeqId a = e->NewSequence(1);
  engine::Engine::Work w{a, prompt, true};
  ASSERT_TRUE(e->Step(std::span(&w, 1)).ok());
  const engine::SeqId b = e->NewSequence(1);
  EXPECT_EQ(e->AttachCachedPrefix(b, prompt), 16);
  EXPECT_EQ(e->kv_pool().n_shared(), 4);
  e->FreeSequence(a);
  EXPECT_EQ(e->kv_pool().n_shared(), 0);
  e->FreeSequence(b);
}

}  // namespace
}  // namespace strata::gateway
