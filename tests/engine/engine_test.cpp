#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cstring>

#include "engine/step_loop.h"
#include "testing/greedy_run.h"
#include "testing/tiny_model.h"
#include "util/log.h"

namespace strata::engine {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = testing::MakeTinyModel();
    ASSERT_NE(tiny_.model, nullptr);
  }
  std::unique_ptr<Engine> Make(int32_t n_ctx, int32_t n_blocks, int32_t block_size = 4) {
    EngineOptions o;
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    o.n_kv_blocks = n_blocks;
    o.block_size = block_size;
    auto e = Engine::Create(*tiny_.model, o, *log_);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  }
  std::vector<int32_t> Prompt(int n) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(3 + (i * 7) % 200);
    return p;
  }
  testing::TinyModel tiny_;
  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
};

TEST_F(EngineTest, StepThatDoesNotFitChangesNothing) {
  auto e = Make(64, 3);
  const SeqId a = e->NewSequence(), b = e->NewSequence();
  const auto pa = Prompt(8), pb = Prompt(8);  // 2 blocks each, 3 in the pool
  Engine::Work w[] = {{a, pa, true}, {b, pb, true}};
  auto r = e->Step(w);
  EXPECT_EQ(r.status().code(), util::StatusCode::kResourceExhausted);
  EXPECT_EQ(e->SequenceLength(a), 0);
  EXPECT_EQ(e->SequenceLength(b), 0);
  EXPECT_EQ(e->kv_pool().n_free(), 3);
  // Alone, each fits.
  ASSERT_TRUE(e->Step(std::span(w, 1)).ok());
  EXPECT_EQ(e->SequenceLength(a), 8);
  e->FreeSequence(a);
  EXPECT_EQ(e->kv_pool().n_free(), 3);
}

TEST_F(EngineTest, ContextLengthIsEnforced) {
  auto e = Make(10, 16);
  const SeqId s = e->NewSequence();
  const auto p = Prompt(11);
  Engine::Work w{s, p, true};
  auto r = e->Step(std::span(&w, 1));
  EXPECT_EQ(r.status().code(), util::StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("context length exceeded"), std::string::npos);
}

TEST_F(EngineTest, InvalidWorkIsRejectedWithoutSideEffects) {
  auto e = Make(64, 16);
  const SeqId s = e->NewSequence();
  const std::vector<int32_t> bad = {1, 99999};
  Engine::Work w{s, bad, true};
  EXPECT_EQ(e->Step(std::span(&w, 1)).status().code(), util::StatusCode::kInvalidArgument);
  Engine::Work unknown{12345, Prompt(2), true};
  EXPECT_EQ(e->Step(std::span(&unknown, 1)).status().code(), util::StatusCode::kNotFound);
  const auto p = Prompt(2);
  Engine::Work twice[] = {{s, p, true}, {s, p, true}};
  EXPECT_EQ(e->Step(twice).status().code(), util::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->SequenceLength(s), 0);
  EXPECT_EQ(e->kv_pool().n_free(), 16);
}

TEST_F(EngineTest, PrefillInChunksEqualsPrefillAtOnce) {
  auto e = Make(64, 32);
  const auto p = Prompt(23);
  const SeqId a = e->NewSequence(), b = e->NewSequence();
  Engine::Work whole{a, p, true};
  auto la = e->Step(std::span(&whole, 1));
  ASSERT_TRUE(la.ok());
  const std::vector<float> logits_a(la->begin(), la->end());
  for (size_t i = 0; i < p.size(); i += 5) {
    const size_t n = std::min<size_t>(5, p.size() - i);
    Engine::Work part{b, std::span(p).subspan(i, n), i + n == p.size()};
    auto lb = e->Step(std::span(&part, 1));
    ASSERT_TRUE(lb.ok());
    if (i + n == p.size()) {
      ASSERT_EQ(lb->size(), logits_a.size());
      EXPECT_EQ(0, std::memcmp(lb->data(), logits_a.data(), logits_a.size() * sizeof(float)));
    }
  }
}

TEST_F(EngineTest, TruncateThenRecomputeGivesTheSameLogits) {
  auto e = Make(64, 32);
  const auto p = Prompt(13);
  const SeqId s = e->NewSequence();
  Engine::Work w{s, p, true};
  auto l1 = e->Step(std::span(&w, 1));
  ASSERT_TRUE(l1.ok());
  const std::vector<float> first(l1->begin(), l1->end());
  ASSERT_TRUE(e->TruncateSequence(s, 6).ok());
  EXPECT_EQ(e->SequenceLength(s), 6);
  Engine::Work rest{s, std::span(p).subspan(6), true};
  auto l2 = e->Step(std::span(&rest, 1));
  ASSERT_TRUE(l2.ok());
  EXPECT_EQ(0, std::memcmp(l2->data(), first.data(), first.size() * sizeof(float)));
}

TEST_F(EngineTest, GenerateStopsAtMaxTokensAndOnCallback) {
  auto e = Make(128, 64);
  std::vector<testing::GreedyRequest> reqs = {{Prompt(5), 7, false}, {Prompt(9), 20, false}};
  auto res = testing::RunGreedy(
      *e, reqs, {.on_token = [](size_t i, int32_t) { return i != 1; }});  // stop request 1 at once
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ((*res)[0].tokens.size(), 7u);
  EXPECT_EQ((*res)[0].finish, FinishReason::kLength);
  EXPECT_EQ((*res)[1].tokens.size(), 1u);
  EXPECT_EQ((*res)[1].finish, FinishReason::kCancelled);
  EXPECT_EQ(e->n_sequences(), 0);  // everything freed
  EXPECT_EQ(e->kv_pool().n_free(), 64);
}

TEST_F(EngineTest, GenerateRejectsRequestsThatCannotFit) {
  auto e = Make(16, 64);
  // A generation prompt must leave room for one token; what it asks beyond
  // the context is cut at the context (kLength).
  std::vector<testing::GreedyRequest> reqs = {{Prompt(16), 10, false}};
  auto res = testing::RunGreedy(*e, reqs);
  EXPECT_EQ(res.status().code(), util::StatusCode::kOutOfRange);
  std::vector<testing::GreedyRequest> empty = {{{}, 1, false}};
  EXPECT_EQ(testing::RunGreedy(*e, empty).status().code(), util::StatusCode::kInvalidArgument);
  std::vector<testing::GreedyRequest> long_ask = {{Prompt(10), 10, false}};
  auto cut = testing::RunGreedy(*e, long_ask);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_EQ((*cut)[0].tokens.size(), 6u);
  EXPECT_EQ((*cut)[0].finish, FinishReason::kLength);
}

TEST_F(EngineTest, AStepLoopNeedsRoomForOneContextAndABatchInRange) {
  auto log = util::NewNullLogger();
  auto small = Make(64, 8);  // 16 blocks of 4 make a context; 8 do not
  EXPECT_EQ(StepLoop::Create(*small, {}, *log).status().code(), util::StatusCode::kInvalidArgument);
  auto e = Make(64, 16);
  EXPECT_EQ(StepLoop::Create(*e, {.max_batch_tokens = 0}, *log).status().code(),
            util::StatusCode::kInvalidArgument);
  EXPECT_TRUE(StepLoop::Create(*e, {}, *log).ok());
}

TEST_F(EngineTest, BadOptionsAreRejected) {
  EngineOptions o;
  o.n_threads = 0;
  EXPECT_FALSE(Engine::Create(*tiny_.model, o, *log_).ok());
  o.n_threads = 1;
  o.block_size = 0;
  EXPECT_FALSE(Engine::Create(*tiny_.model, o, *log_).ok());
}

}  // namespace
}  // namespace strata::engine
