// The engine against the reference engine's outputs in ../shared/golden/, and
// batch invariance: a request gives the same tokens alone or in any batch.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "engine/engine.h"
#include "model/transformer.h"
#include "testing/greedy_run.h"
#include "testing/shared_data.h"
#include "testing/tiny_model.h"
#include "util/file_system.h"
#include "util/log.h"

namespace strata {
namespace {

using nlohmann::json;

json ReadJson(const std::string& rel) {
  std::ifstream in(testing::SharedPath(rel));
  return json::parse(in);
}

std::unique_ptr<model::Model> LoadShared(const std::string& rel) {
  auto fs = util::NewPosixFileSystem();
  auto log = util::NewNullLogger();
  auto m = model::Model::Load(*fs, testing::SharedPath(rel), {}, *log);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<double> LogSoftmax(std::span<const float> logits) {
  double mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, static_cast<double>(l));
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - lse;
  return out;
}

std::unique_ptr<engine::Engine> MakeEngine(const model::Model& m, int threads, int n_seq = 16) {
  auto log = util::NewNullLogger();
  engine::EngineOptions o;
  o.n_threads = threads;
  o.n_ctx = 256;
  o.n_seq_max = n_seq;
  auto e = engine::Engine::Create(m, o, *log);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

// Steps greedily through one golden case, comparing every step.
void CheckGreedyCase(engine::Engine& eng, const json& c, int n_steps, double tol,
                     bool check_tokens) {
  const text::Tokenizer& tok = eng.model().tokenizer();
  const std::string prompt = c["prompt"];
  const auto ids = tok.Encode(prompt, {.add_special = true});
  ASSERT_EQ(ids, c["prompt_tokens"].get<std::vector<int32_t>>()) << prompt;
  const engine::SeqId seq = eng.NewSequence();
  std::vector<int32_t> feed = ids;
  for (int step = 0; step < n_steps; ++step) {
    engine::Engine::Work w{seq, feed, true};
    auto logits = eng.Step(std::span(&w, 1));
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    const auto lp = LogSoftmax(*logits);
    const json& ref = c["steps"][static_cast<size_t>(step)];
    for (const json& top : ref["top"]) {
      const int id = top["id"];
      EXPECT_NEAR(lp[static_cast<size_t>(id)], top["logprob"].get<double>(), tol)
          << "prompt '" << prompt << "' step " << step << " token " << id;
    }
    const int32_t best = static_cast<int32_t>(std::max_element(lp.begin(), lp.end()) - lp.begin());
    if (check_tokens) {
      ASSERT_EQ(best, ref["id"].get<int32_t>()) << "prompt '" << prompt << "' step " << step;
    }
    feed = {check_tokens ? best : ref["id"].get<int32_t>()};
  }
  eng.FreeSequence(seq);
}

TEST(Golden, Stories260KGreedyTokensAndLogprobsMatchTheReference) {
  STRATA_REQUIRE_SHARED("golden/stories260K/greedy.json");
  auto m = LoadShared("models/stories260K.gguf");
  ASSERT_NE(m, nullptr);
  auto eng = MakeEngine(*m, 2);
  const json g = ReadJson("golden/stories260K/greedy.json");
  for (const json& c : g["cases"]) {
    CheckGreedyCase(*eng, c, static_cast<int>(c["steps"].size()), 1e-3, true);
    if (HasFatalFailure()) return;
  }
}

TEST(Golden, Llama2TinyRandomF16FirstStepMatchesTheReference) {
  STRATA_REQUIRE_SHARED("golden/llama-2-tiny-random/greedy.json");
  auto m = LoadShared("models/llama-2-tiny-random.gguf");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->config().n_vocab, 32000);
  auto eng = MakeEngine(*m, 2);
  const json g = ReadJson("golden/llama-2-tiny-random/greedy.json");
  for (const json& c : g["cases"]) CheckGreedyCase(*eng, c, 1, 2e-2, false);
}

TEST(Golden, LegacyQ8FileWithStraddlingRowsLoadsAndTracksTheF32Model) {
  STRATA_REQUIRE_SHARED("models/legacy/tinyllamas-stories-260k-q8_0.gguf");
  auto q8 = LoadShared("models/legacy/tinyllamas-stories-260k-q8_0.gguf");
  auto f32 = LoadShared("models/stories260K.gguf");
  ASSERT_NE(q8, nullptr);
  ASSERT_NE(f32, nullptr);
  auto e8 = MakeEngine(*q8, 2), e32 = MakeEngine(*f32, 2);
  const auto ids = f32->tokenizer().Encode("Once upon a time", {.add_special = true});
  engine::SeqId s8 = e8->NewSequence(), s32 = e32->NewSequence();
  engine::Engine::Work w8{s8, ids, true}, w32{s32, ids, true};
  auto l8 = e8->Step(std::span(&w8, 1));
  ASSERT_TRUE(l8.ok());
  const auto lp8 = LogSoftmax(*l8);
  auto l32 = e32->Step(std::span(&w32, 1));
  ASSERT_TRUE(l32.ok());
  const auto lp32 = LogSoftmax(*l32);
  // 8-bit weights move log-probabilities a little, not the ranking of the top token.
  const auto top8 = std::max_element(lp8.begin(), lp8.end()) - lp8.begin();
  const auto top32 = std::max_element(lp32.begin(), lp32.end()) - lp32.begin();
  EXPECT_EQ(top8, top32);
  EXPECT_NEAR(lp8[static_cast<size_t>(top32)], lp32[static_cast<size_t>(top32)], 0.05);
}

// Runs each request alone and all together; tokens must be identical.
void ExpectBatchInvariance(const model::Model& m, const std::vector<std::vector<int32_t>>& prompts,
                           int n_predict) {
  std::vector<testing::GreedyRequest> reqs;
  for (const auto& p : prompts) reqs.push_back({p, n_predict, false});

  std::vector<std::vector<int32_t>> alone;
  {
    auto eng = MakeEngine(m, 1);
    for (const auto& r : reqs) {
      auto res = testing::RunGreedy(*eng, std::span(&r, 1));
      ASSERT_TRUE(res.ok()) << res.status().ToString();
      alone.push_back((*res)[0].tokens);
    }
  }
  for (int threads : {1, 2, 3}) {
    for (int32_t chunk : {512, 7}) {
      auto eng = MakeEngine(m, threads);
      auto res = testing::RunGreedy(*eng, reqs, {.max_batch_tokens = chunk});
      ASSERT_TRUE(res.ok()) << res.status().ToString();
      for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ((*res)[i].tokens, alone[i]) << "request " << i << " differs in a batch (threads "
                                              << threads << ", chunk " << chunk << ")";
      }
    }
  }
}

TEST(BatchInvariance, GoldenPromptsGiveTheSameTokensAloneAndTogether) {
  STRATA_REQUIRE_SHARED("golden/stories260K/greedy.json");
  auto m = LoadShared("models/stories260K.gguf");
  ASSERT_NE(m, nullptr);
  const json g = ReadJson("golden/stories260K/greedy.json");
  std::vector<std::vector<int32_t>> prompts;
  for (const json& c : g["cases"])
    prompts.push_back(c["prompt_tokens"].get<std::vector<int32_t>>());
  ExpectBatchInvariance(*m, prompts, 64);
  // And they are the reference tokens.
  std::vector<testing::GreedyRequest> reqs;
  for (const auto& p : prompts) reqs.push_back({p, 64, false});
  auto eng = MakeEngine(*m, 2);
  auto res = testing::RunGreedy(*eng, reqs);
  ASSERT_TRUE(res.ok());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ((*res)[i].tokens, g["cases"][i]["tokens"].get<std::vector<int32_t>>());
  }
}

TEST(BatchInvariance, HoldsForEveryWeightTypeOnARandomModel) {
  for (kernels::TensorType t :
       {kernels::TensorType::kF32, kernels::TensorType::kF16, kernels::TensorType::kBF16,
        kernels::TensorType::kQ8_0, kernels::TensorType::kQ4_0, kernels::TensorType::kQ4_1,
        kernels::TensorType::kQ5_0, kernels::TensorType::kQ5_1, kernels::TensorType::kQ4_K,
        kernels::TensorType::kQ5_K, kernels::TensorType::kQ6_K}) {
    SCOPED_TRACE(std::string(kernels::TypeName(t)));
    auto tiny = testing::MakeTinyModel(t, 3, testing::TinyShapeFor(t));
    ASSERT_NE(tiny.model, nullptr);
    // The matrices really are of type t (rows that are whole blocks, no fallback).
    const format::GgufTensorInfo* ffn_down = tiny.model->gguf().FindTensor("blk.0.ffn_down.weight");
    ASSERT_NE(ffn_down, nullptr);
    EXPECT_EQ(ffn_down->type, t);
    const auto& tok = tiny.model->tokenizer();
    std::vector<std::vector<int32_t>> prompts = {
        tok.Encode("once upon a time"), tok.Encode("the dog"),
        tok.Encode("hello world, this is a longer prompt that spans blocks of the cache ok"),
        tok.Encode("a")};
    ExpectBatchInvariance(*tiny.model, prompts, 20);
  }
}

}  // namespace
}  // namespace strata
