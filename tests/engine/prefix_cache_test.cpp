// The shared-prefix KV cache (L2): exactness, sharing, eviction, isolation.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "engine/kv_pool.h"
#include "engine/scheduler.h"
#include "sampling/sampler.h"
#include "testing/recording_sink.h"
#include "testing/tiny_model.h"
#include "util/log.h"
#include "util/random.h"

namespace strata::engine {
namespace {

model::ModelConfig SmallConfig() {
  model::ModelConfig c;
  c.n_layers = 1;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  return c;
}

TEST(KvBlockPoolCache, PublishedBlocksOutliveTheirReferencesUntilEvicted) {
  KvBlockPool pool(SmallConfig(), 3, 4);
  const int32_t a = *pool.Allocate(), b = *pool.Allocate();
  EXPECT_EQ(pool.Publish(a, 111), a);
  EXPECT_EQ(pool.Publish(b, 222), b);
  pool.Unref(a);
  pool.Unref(b);
  EXPECT_EQ(pool.n_cached(), 2);
  EXPECT_EQ(pool.n_free(), 3);  // cached blocks count as available
  EXPECT_EQ(*pool.Lookup(222), b);
  EXPECT_FALSE(pool.Lookup(333).has_value());
  // The never-used block goes first, then the least recently used cached one (a).
  const int32_t c = *pool.Allocate();
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  const int32_t d = *pool.Allocate();
  EXPECT_EQ(d, a);
  EXPECT_FALSE(pool.Lookup(111).has_value());  // its content is forgotten
  EXPECT_EQ(pool.prefix_stats().evictions, 1);
}

TEST(KvBlockPoolCache, ReferencedBlocksAreNeverEvicted) {
  KvBlockPool pool(SmallConfig(), 2, 4);
  const int32_t a = *pool.Allocate();
  pool.Publish(a, 5);
  pool.Unref(a);
  pool.Ref(*pool.Lookup(5));  // adopted by a new sequence
  const int32_t b = *pool.Allocate();
  EXPECT_NE(b, a);
  EXPECT_FALSE(pool.Allocate().has_value());  // everything referenced: nothing to evict
  EXPECT_EQ(*pool.Lookup(5), a);
}

TEST(KvBlockPoolCache, EqualContentIsDeduplicated) {
  KvBlockPool pool(SmallConfig(), 3, 4);
  const int32_t a = *pool.Allocate(), b = *pool.Allocate();
  EXPECT_EQ(pool.Publish(a, 9), a);
  EXPECT_EQ(pool.Publish(b, 9), a);  // b's owner should switch to a
  EXPECT_EQ(pool.ref_count(a), 2);
  EXPECT_EQ(pool.prefix_stats().deduplicated, 1);
}

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = testing::MakeTinyModel();
    ASSERT_NE(tiny_.model, nullptr);
  }
  std::unique_ptr<Engine> Make(int32_t n_blocks = 256) {
    EngineOptions o;
    o.n_threads = 2;
    o.n_ctx = 256;
    o.n_kv_blocks = n_blocks;
    o.block_size = 4;
    return std::move(Engine::Create(*tiny_.model, o, *log_)).value();
  }
  std::vector<float> Logits(Engine& e, SeqId s, std::span<const int32_t> tokens) {
    Engine::Work w{s, tokens, true};
    auto l = e.Step(std::span(&w, 1));
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return std::vector<float>(l->begin(), l->end());
  }
  std::vector<int32_t> Tokens(int n, uint64_t seed) {
    util::Rng r(seed);
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(3 + static_cast<int32_t>(r.Below(250)));
    return t;
  }
  testing::TinyModel tiny_;
  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
};

TEST_F(PrefixCacheTest, AdoptedPrefixGivesTheSameLogitsBitForBit) {
  auto e = Make();
  const auto prompt = Tokens(23, 1);
  const SeqId a = e->NewSequence(77);
  const auto cold = Logits(*e, a, prompt);
  const SeqId b = e->NewSequence(77);
  const int32_t cached = e->AttachCachedPrefix(b, prompt);
  EXPECT_EQ(cached, 20);  // five full blocks of 4; the last token is always computed
  const auto warm = Logits(*e, b, std::span(prompt).subspan(static_cast<size_t>(cached)));
  ASSERT_EQ(cold.size(), warm.size());
  EXPECT_EQ(0, std::memcmp(cold.data(), warm.data(), cold.size() * sizeof(float)));
  EXPECT_EQ(e->prefix_stats().hits, 5);
  // Another namespace (another tenant) sees nothing.
  const SeqId c = e->NewSequence(78);
  EXPECT_EQ(e->AttachCachedPrefix(c, prompt), 0);
  // A prompt that is all full blocks still leaves its last token to compute:
  // four blocks, then three positions of the fifth copied.
  const SeqId d = e->NewSequence(77);
  EXPECT_EQ(e->AttachCachedPrefix(d, std::span(prompt).subspan(0, 20)), 19);
}

TEST(KvBlockPoolCache, PartialMatchesFindTheLongestSharedStartUntilEvicted) {
  KvBlockPool pool(SmallConfig(), 4, 4);
  const int32_t a = *pool.Allocate(), b = *pool.Allocate(), c = *pool.Allocate();
  const std::vector<int32_t> ta = {1, 2, 3, 4}, tb = {1, 2, 9, 9}, tc = {1, 2, 3, 8};
  pool.Publish(a, 11, 500, ta);
  pool.Publish(b, 12, 500, tb);
  pool.Publish(c, 13, 600, tc);  // another parent
  const std::vector<int32_t> want = {1, 2, 3, 7};
  auto m = pool.LongestPartialMatch(500, want);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->block, a);
  EXPECT_EQ(m->n_tokens, 3);
  // Shorter than a block: at most the tokens asked for.
  m = pool.LongestPartialMatch(500, std::span(want).subspan(0, 2));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->n_tokens, 2);
  EXPECT_FALSE(pool.LongestPartialMatch(500, std::vector<int32_t>{5, 2}).has_value());
  EXPECT_FALSE(pool.LongestPartialMatch(700, want).has_value());
  // Once a's content is forgotten, b is the best left after 500.
  pool.Unref(a);
  const int32_t d = *pool.Allocate();  // the never-used block
  EXPECT_NE(d, a);
  EXPECT_EQ(*pool.Allocate(), a);  // now a is reclaimed
  m = pool.LongestPartialMatch(500, want);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->block, b);
  EXPECT_EQ(m->n_tokens, 2);
  pool.Unref(b);
  pool.Unref(c);
  pool.Unref(d);
  pool.Allocate();  // d was never published: free, taken first
  pool.Allocate();  // b, the least recently used cached block
  EXPECT_FALSE(pool.LongestPartialMatch(500, want).has_value());
  ASSERT_TRUE(pool.LongestPartialMatch(600, want).has_value());
}

TEST(KvBlockPoolCache, CopyPositionsCopiesTheFirstRowsOfEveryLayer) {
  model::ModelConfig config = SmallConfig();
  config.n_layers = 2;
  KvBlockPool pool(config, 2, 4);
  const int32_t a = *pool.Allocate(), b = *pool.Allocate();
  const size_t per_block = pool.bytes_per_block() / sizeof(float);
  float* data = static_cast<float*>(pool.buffer().data);
  for (size_t i = 0; i < 2 * per_block; ++i) data[i] = static_cast<float>(i);
  pool.CopyPositions(a, b, 3);
  // [layer][K|V][position][kv_dim = 4]: 4 groups of 4 positions of 4 floats.
  const float* from = data + static_cast<size_t>(a) * per_block;
  const float* to = data + static_cast<size_t>(b) * per_block;
  for (size_t g = 0; g < 4; ++g) {
    for (size_t f = 0; f < 16; ++f) {
      const size_t i = g * 16 + f;
      if (f < 12) {
        EXPECT_EQ(to[i], from[i]) << "group " << g << " float " << f;
      } else {
        EXPECT_NE(to[i], from[i]) << "group " << g << " float " << f << " (past the rows copied)";
      }
    }
  }
}

TEST_F(PrefixCacheTest, TruncatingIntoASharedBlockCopiesIt) {
  auto e = Make();
  const auto prompt = Tokens(16, 2);
  const SeqId a = e->NewSequence(5);
  Logits(*e, a, prompt);
  const SeqId b = e->NewSequence(5);
  ASSERT_EQ(e->AttachCachedPrefix(b, prompt), 15);
  Logits(*e, b, std::span(prompt).subspan(15));
  // b rewinds into the middle of a shared block and continues differently...
  ASSERT_TRUE(e->TruncateSequence(b, 10).ok());
  const auto other = Tokens(6, 3);
  Logits(*e, b, other);
  // ...and a, still reading that block, is unaffected.
  const auto next = Tokens(1, 4);
  const auto after = Logits(*e, a, next);
  auto fresh = Make();
  const SeqId f = fresh->NewSequence();
  std::vector<int32_t> all = prompt;
  all.push_back(next[0]);
  const auto want = Logits(*fresh, f, all);
  EXPECT_EQ(0, std::memcmp(after.data(), want.data(), want.size() * sizeof(float)));
}

TEST_F(PrefixCacheTest, APartlyMatchingBlockIsCopiedAndGivesTheSameLogitsBitForBit) {
  auto e = Make();
  const auto prompt = Tokens(14, 5);  // blocks 0..2 full, 12..13 in the fourth
  const SeqId a = e->NewSequence(9);
  Logits(*e, a, prompt);
  const auto grow = Tokens(3, 6);
  Logits(*e, a, grow);  // 17 tokens: the fourth block is full and published
  // b shares a's first 14 tokens, then goes its own way.
  std::vector<int32_t> other = prompt;
  const auto tail = Tokens(5, 7);
  other.insert(other.end(), tail.begin(), tail.end());
  ASSERT_NE(other[14], grow[0]);
  const SeqId b = e->NewSequence(9);
  ASSERT_EQ(e->AttachCachedPrefix(b, other), 14);  // 3 blocks shared, 2 positions copied
  EXPECT_EQ(e->prefix_stats().partial_hits, 1);
  EXPECT_EQ(e->prefix_stats().partial_tokens, 2);
  const auto warm = Logits(*e, b, std::span(other).subspan(14));
  auto fresh = Make();
  const auto want = Logits(*fresh, fresh->NewSequence(), other);
  ASSERT_EQ(warm.size(), want.size());
  EXPECT_EQ(0, std::memcmp(warm.data(), want.data(), want.size() * sizeof(float)));
  // b wrote into its own copy: a still reads its block as it was.
  const auto next = Tokens(1, 8);
  const auto after = Logits(*e, a, next);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), grow.begin(), grow.end());
  all.push_back(next[0]);
  const auto want_a = Logits(*fresh, fresh->NewSequence(), all);
  EXPECT_EQ(0, std::memcmp(after.data(), want_a.data(), want_a.size() * sizeof(float)));
}

// Adoption, a partial copy and a truncation into a shared block, with the
// KV cache in each type, on a model whose heads are one Q8_0 block (32 wide):
// the cached rows are the rows a fresh computation writes, so the logits are
// bitwise those of an uncached engine of the same type.
TEST(PrefixCacheKvTypes, EveryKvTypeReusesPrefixesBitForBit) {
  model::SyntheticShape shape = testing::TinyShape();
  shape.n_embd = 128;
  shape.n_heads = 4;
  shape.n_kv_heads = 2;
  auto tiny = testing::MakeTinyModel(kernels::TensorType::kF32, 3, shape);
  ASSERT_NE(tiny.model, nullptr);
  ASSERT_EQ(tiny.model->config().head_dim, 32);
  auto log = util::NewNullLogger();
  for (kernels::TensorType type :
       {kernels::TensorType::kF32, kernels::TensorType::kF16, kernels::TensorType::kQ8_0}) {
    SCOPED_TRACE(std::string(kernels::TypeName(type)));
    auto make = [&]() {
      EngineOptions o;
      o.n_threads = 2;
      o.n_ctx = 128;
      o.n_kv_blocks = 64;
      o.block_size = 4;
      o.kv_type = type;
      return std::move(Engine::Create(*tiny.model, o, *log)).value();
    };
    auto logits = [](Engine& e, SeqId s, std::span<const int32_t> tokens) {
      Engine::Work w{s, tokens, true};
      auto l = e.Step(std::span(&w, 1));
      EXPECT_TRUE(l.ok()) << l.status().ToString();
      return std::vector<float>(l->begin(), l->end());
    };
    auto e = make();
    EXPECT_EQ(e->kv_pool().kv_type(), type);
    util::Rng r(11);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 17; ++i) prompt.push_back(3 + static_cast<int32_t>(r.Below(250)));
    logits(*e, e->NewSequence(5), prompt);  // publishes four full blocks
    // Shares the first 14 tokens: three blocks adopted, two positions copied.
    std::vector<int32_t> other(prompt.begin(), prompt.begin() + 14);
    for (int i = 0; i < 6; ++i) other.push_back(3 + (prompt[14] - 3 + 1 + i) % 250);
    const SeqId b = e->NewSequence(5);
    ASSERT_EQ(e->AttachCachedPrefix(b, other), 14);
    const auto warm = logits(*e, b, std::span(other).subspan(14));
    auto fresh = make();
    const auto want = logits(*fresh, fresh->NewSequence(), other);
    ASSERT_EQ(warm.size(), want.size());
    EXPECT_EQ(0, std::memcmp(warm.data(), want.data(), want.size() * sizeof(float)));
  }
}

TEST(PrefixCacheKvTypes, Q8_0NeedsHeadsOfWholeBlocks) {
  auto tiny = testing::MakeTinyModel();  // head_dim 16
  auto log = util::NewNullLogger();
  EngineOptions o;
  o.kv_type = kernels::TensorType::kQ8_0;
  const auto e = Engine::Create(*tiny.model, o, *log);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("multiple of 32"), std::string::npos) << e.status().message();
  o.kv_type = kernels::TensorType::kQ4_K;
  EXPECT_FALSE(Engine::Create(*tiny.model, o, *log).ok());
  EXPECT_EQ(*ParseKvType("Q8_0"), kernels::TensorType::kQ8_0);
  EXPECT_EQ(*ParseKvType("f16"), kernels::TensorType::kF16);
  EXPECT_FALSE(ParseKvType("q4_k").ok());
  EXPECT_FALSE(ParseKvType("").ok());
}

TEST_F(PrefixCacheTest, APartialMatchIsSkippedWhenNoBlockIsLeftForTheCopy) {
  auto e = Make(/*n_blocks=*/2);
  const auto prompt = Tokens(8, 21);
  const SeqId a = e->NewSequence(3);
  Logits(*e, a, prompt);
  e->FreeSequence(a);  // both blocks cached, nothing free
  // b adopts the first block; its next two tokens match the second one, the
  // only block a copy could be made in. It is kept, not reclaimed for its own
  // copy, and b computes those positions instead.
  std::vector<int32_t> other(prompt.begin(), prompt.begin() + 6);
  other.push_back(prompt[6] == 3 ? 4 : 3);
  const SeqId b = e->NewSequence(3);
  EXPECT_EQ(e->AttachCachedPrefix(b, other), 4);
  EXPECT_EQ(e->prefix_stats().evictions, 0);
  EXPECT_EQ(e->prefix_stats().partial_hits, 0);
  EXPECT_EQ(e->kv_pool().n_cached(), 1);
  const auto warm = Logits(*e, b, std::span(other).subspan(4));
  auto fresh = Make();
  const auto want = Logits(*fresh, fresh->NewSequence(), other);
  EXPECT_EQ(0, std::memcmp(warm.data(), want.data(), want.size() * sizeof(float)));
}

using Sink = testing::RecordingSink;

TEST_F(PrefixCacheTest, HundredsOfSharedPrefixPromptsMatchTheUncachedRunsExactly) {
  // Prompts share a few "system prompts" of different lengths, then differ.
  std::vector<std::vector<int32_t>> systems = {Tokens(0, 10), Tokens(9, 11), Tokens(31, 12),
                                               Tokens(64, 13)};
  util::Rng r(99);
  struct Case {
    std::vector<int32_t> prompt;
    sampling::SamplingParams params;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 160; ++i) {
    Case c;
    c.prompt = systems[r.Below(systems.size())];
    const auto suffix = Tokens(1 + static_cast<int>(r.Below(12)), 1000 + static_cast<uint64_t>(i));
    c.prompt.insert(c.prompt.end(), suffix.begin(), suffix.end());
    if (i % 2 == 0) {
      c.params.temperature = 0.0f;  // greedy
    } else {
      c.params.temperature = 0.9f;  // seeded sampling
      c.params.seed = static_cast<uint64_t>(i);
    }
    cases.push_back(std::move(c));
  }
  int64_t partial_tokens = 0;
  auto run = [&](bool cache, bool reversed, int max_running) {
    auto e = Make(1024);
    auto sched =
        std::move(Scheduler::Start(*e, {.max_running = max_running, .max_batch_tokens = 24}, *log_))
            .value();
    std::vector<std::shared_ptr<Sink>> sinks(cases.size());
    for (size_t k = 0; k < cases.size(); ++k) {
      const size_t i = reversed ? cases.size() - 1 - k : k;
      sinks[i] = std::make_shared<Sink>(cases[i].params);
      EXPECT_TRUE(
          sched->Submit(testing::RecordedRequest(cases[i].prompt, 10, sinks[i], cache ? 4242 : 0))
              .ok());
    }
    int64_t cached = 0;
    std::vector<std::vector<int32_t>> out;
    for (auto& s : sinks) {
      s->Wait();
      cached += s->usage_.cached_tokens;
      out.push_back(s->tokens_);
    }
    sched.reset();  // joins the scheduler thread: the engine is this thread's again
    partial_tokens += e->prefix_stats().partial_tokens;
    return std::make_pair(out, cached);
  };
  const auto [plain, no_cache] = run(false, false, 8);
  EXPECT_EQ(no_cache, 0);
  const auto [warm, cached] = run(true, false, 8);
  const auto [warm_rev, cached_rev] = run(true, true, 3);
  EXPECT_GT(cached, 1000) << "the test did not exercise the prefix cache";
  EXPECT_GT(cached_rev, 1000);
  // Two of the system prompts end inside a block: those positions are copied.
  EXPECT_GT(partial_tokens, 100) << "the test did not exercise partial block matches";
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(warm[i], plain[i]) << "case " << i;
    EXPECT_EQ(warm_rev[i], plain[i]) << "case " << i << " (reversed order)";
  }
}

TEST_F(PrefixCacheTest, MultiTurnConversationsReuseEarlierTurns) {
  auto e = Make(1024);
  auto sched = std::move(Scheduler::Start(*e, {}, *log_)).value();
  sampling::SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<int32_t> history = Tokens(30, 20);
  for (int turn = 0; turn < 3; ++turn) {
    auto sink = std::make_shared<Sink>(greedy);
    ASSERT_TRUE(sched->Submit(testing::RecordedRequest(history, 12, sink, 7)).ok());
    sink->Wait();
    if (turn > 0) {
      // Everything before this turn's new user text was cached, answer included.
      EXPECT_GE(sink->usage_.cached_tokens, static_cast<int32_t>(history.size()) - 8 - 4)
          << "turn " << turn;
    }
    history.insert(history.end(), sink->tokens_.begin(), sink->tokens_.end());
    const auto user = Tokens(8, 30 + static_cast<uint64_t>(turn));
    history.insert(history.end(), user.begin(), user.end());
  }
}

}  // namespace
}  // namespace strata::engine

namespace strata::engine {
namespace {

// Invalidation: the chains ForgetChains selects are never adopted again;
// other namespaces and other chains keep theirs; a block a running
// sequence holds stays with it and is freed when released.
TEST_F(PrefixCacheTest, ForgottenChainsAreNotAdoptedAgain) {
  auto e = Make();
  const auto shared = Tokens(8, 2);  // two blocks every prompt below starts with
  auto prompt = [&](uint64_t seed) {
    std::vector<int32_t> p = shared;
    const auto tail = Tokens(9, seed);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  };
  const auto p1 = prompt(3), p2 = prompt(4);
  for (const auto& p : {p1, p2}) {
    const SeqId s = e->NewSequence(77);
    Logits(*e, s, p);
    e->FreeSequence(s);
  }
  const SeqId other = e->NewSequence(78);  // another tenant, the same prompt
  Logits(*e, other, p1);
  e->FreeSequence(other);
  const int32_t published = e->kv_pool().n_published();
  EXPECT_EQ(published, 4 + 4 + 4 - 2);  // p1 and p2 share their first two blocks

  // p1's blocks from its third on (what follows the shared prefix) go.
  const int32_t forgotten = e->ForgetCachedPrefixes(77, [&](std::span<const int32_t> chain) {
    if (!std::equal(chain.begin(), chain.end(), p1.begin(),
                    p1.begin() + static_cast<ptrdiff_t>(std::min(chain.size(), p1.size())))) {
      return ChainVisit::kSkip;
    }
    return chain.size() > shared.size() ? ChainVisit::kForget : ChainVisit::kDescend;
  });
  EXPECT_EQ(forgotten, 2);
  EXPECT_EQ(e->kv_pool().n_published(), published - 2);
  EXPECT_EQ(e->prefix_stats().forgotten, 2);
  const SeqId a = e->NewSequence(77);
  EXPECT_EQ(e->AttachCachedPrefix(a, p1), 8);  // only the shared blocks
  const SeqId b = e->NewSequence(77);
  EXPECT_EQ(e->AttachCachedPrefix(b, p2), 16);  // untouched
  const SeqId c = e->NewSequence(78);
  EXPECT_EQ(e->AttachCachedPrefix(c, p1), 16);  // the other namespace's copy
  e->FreeSequence(a);
  e->FreeSequence(c);

  // A whole namespace, while a sequence (b) holds two of its blocks: they
  // stay with it, unpublished, and are freed when it ends.
  const int32_t free_before = e->kv_pool().n_free();
  EXPECT_GT(e->ForgetCachedPrefixes(77, [](auto) { return ChainVisit::kForget; }), 0);
  const SeqId d = e->NewSequence(77);
  EXPECT_EQ(e->AttachCachedPrefix(d, p2), 0);
  e->FreeSequence(d);
  EXPECT_EQ(e->kv_pool().n_free(), free_before);  // b's blocks are still referenced
  e->FreeSequence(b);
  EXPECT_EQ(e->kv_pool().n_free(), e->kv_pool().n_blocks());
  // Every chain (no namespace): the other tenant's too.
  EXPECT_EQ(e->ForgetCachedPrefixes(std::nullopt, [](auto) { return ChainVisit::kForget; }), 4);
  EXPECT_EQ(e->kv_pool().n_published(), 0);
}

TEST_F(PrefixCacheTest, RunOnEngineRunsTheTaskOnTheSchedulerThread) {
  auto e = Make();
  auto sched = std::move(Scheduler::Start(*e, {}, *log_)).value();
  std::thread::id ran_on;
  ASSERT_TRUE(sched
                  ->RunOnEngine(
                      [&](Engine& engine) {
                        ran_on = std::this_thread::get_id();
                        EXPECT_EQ(&engine, e.get());
                      },
                      std::chrono::seconds(10))
                  .ok());
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_NE(ran_on, std::thread::id());
}

}  // namespace
}  // namespace strata::engine
