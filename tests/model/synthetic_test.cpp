#include "model/synthetic.h"

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "model/transformer.h"
#include "testing/greedy_run.h"
#include "testing/mem_file_system.h"
#include "util/log.h"

namespace strata::model {
namespace {

TEST(Synthetic, NamedShapesHaveTheirReferenceDimensions) {
  auto b1 = NamedShape("llama-1b");
  ASSERT_TRUE(b1.has_value());
  EXPECT_EQ(b1->n_embd, 2048);
  EXPECT_EQ(b1->n_layers, 22);
  EXPECT_EQ(b1->n_kv_heads, 4);
  auto q = NamedShape("qwen2-0.5b");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->architecture, "qwen2");
  EXPECT_TRUE(q->tied_embeddings);
  EXPECT_FALSE(NamedShape("gpt-7").has_value());
}

TEST(Synthetic, TypeSpecsParse) {
  EXPECT_EQ(ParseTypeSpec("q4_k_m")->second, QuantMix::kQ4_K_M);
  EXPECT_EQ(ParseTypeSpec("Q8_0")->first, kernels::TensorType::kQ8_0);
  EXPECT_FALSE(ParseTypeSpec("q9").has_value());
}

TEST(Synthetic, Q4KMMixFollowsTheQuantizerRules) {
  const int L = 22;
  auto type = [&](const std::string& name, int layer, int64_t row, bool tied = false) {
    return TypeForTensor(kernels::TensorType::kQ4_K, QuantMix::kQ4_K_M, name, layer, L, row, tied);
  };
  EXPECT_EQ(type("output.weight", -1, 2048), kernels::TensorType::kQ6_K);
  EXPECT_EQ(type("token_embd.weight", -1, 2048), kernels::TensorType::kQ4_K);
  EXPECT_EQ(type("token_embd.weight", -1, 2048, /*tied=*/true), kernels::TensorType::kQ6_K);
  EXPECT_EQ(type("token_embd.weight", -1, 896, /*tied=*/true), kernels::TensorType::kQ8_0);
  // Layers 0..1 (< L/8) and the last ones (>= 7L/8) keep more bits in attn_v and ffn_down.
  EXPECT_EQ(type("blk.0.attn_v.weight", 0, 2048), kernels::TensorType::kQ6_K);
  EXPECT_EQ(type("blk.21.ffn_down.weight", 21, 5632), kernels::TensorType::kQ6_K);
  EXPECT_EQ(type("blk.3.attn_v.weight", 3, 2048), kernels::TensorType::kQ4_K);
  EXPECT_EQ(type("blk.4.ffn_down.weight", 4, 5632),
            kernels::TensorType::kQ6_K);  // (4 - 2) % 3 == 2
  EXPECT_EQ(type("blk.5.attn_q.weight", 5, 2048), kernels::TensorType::kQ4_K);
  EXPECT_EQ(type("blk.5.attn_q.weight", 5, 896), kernels::TensorType::kQ5_0);
  // Rows that are not whole 256-blocks fall back.
  EXPECT_EQ(type("blk.0.attn_v.weight", 0, 896), kernels::TensorType::kQ8_0);
  EXPECT_EQ(TypeForTensor(kernels::TensorType::kQ8_0, QuantMix::kUniform, "x", 0, L, 48, false),
            kernels::TensorType::kF16);
}

TEST(Synthetic, SameOptionsSameBytesWhateverTheThreads) {
  SyntheticOptions o;
  o.shape.n_embd = 64;
  o.shape.n_layers = 1;
  o.shape.n_heads = 4;
  o.shape.n_kv_heads = 2;
  o.shape.n_ff = 96;
  o.type = kernels::TensorType::kQ8_0;
  auto log = util::NewNullLogger();
  testing::MemFileSystem fs;
  ASSERT_TRUE(WriteSyntheticModel(fs, "a.gguf", o, *log).ok());
  util::ThreadPool pool(3);
  o.pool = &pool;
  ASSERT_TRUE(WriteSyntheticModel(fs, "b.gguf", o, *log).ok());
  EXPECT_EQ(*fs.ReadFile("a.gguf"), *fs.ReadFile("b.gguf"));
}

TEST(Synthetic, ByteTokensAsTextDecodeToTheirLiteralText) {
  SyntheticOptions o;
  o.shape.n_embd = 32;
  o.shape.n_layers = 1;
  o.shape.n_heads = 2;
  o.shape.n_kv_heads = 2;
  o.shape.n_ff = 64;
  auto log = util::NewNullLogger();
  testing::MemFileSystem fs;
  ASSERT_TRUE(WriteSyntheticModel(fs, "vocab.gguf", o, *log).ok());  // built-in vocabulary
  auto vocab = format::GgufFile::Open(fs, "vocab.gguf");
  ASSERT_TRUE(vocab.ok());
  o.vocab = vocab->get();
  o.byte_tokens_as_text = true;
  ASSERT_TRUE(WriteSyntheticModel(fs, "text.gguf", o, *log).ok());
  auto plain = Model::Load(fs, "vocab.gguf", {}, *log);
  auto text = Model::Load(fs, "text.gguf", {}, *log);
  ASSERT_TRUE(plain.ok() && text.ok());
  const text::Tokenizer& before = (*plain)->tokenizer();
  const text::Tokenizer& after = (*text)->tokenizer();
  ASSERT_EQ(before.n_vocab(), after.n_vocab());
  int bytes = 0;
  for (int32_t id = 0; id < after.n_vocab(); ++id) {
    EXPECT_NE(after.Type(id), text::TokenType::kByte);
    if (before.Type(id) != text::TokenType::kByte) {
      EXPECT_EQ(after.Type(id), before.Type(id));
      continue;
    }
    ++bytes;
    EXPECT_EQ(after.Type(id), text::TokenType::kNormal);
    EXPECT_EQ(after.Piece(id), after.TokenText(id));  // "<0x80>", valid UTF-8 text
  }
  EXPECT_EQ(bytes, 256);
}

TEST(Synthetic, Qwen2ModelLoadsWithBiasesAndHalfRotation) {
  SyntheticOptions o;
  o.shape.architecture = "qwen2";
  o.shape.n_embd = 64;
  o.shape.n_layers = 2;
  o.shape.n_heads = 4;
  o.shape.n_kv_heads = 2;
  o.shape.n_ff = 128;
  o.shape.rope_freq_base = 1e6f;
  auto log = util::NewNullLogger();
  testing::MemFileSystem fs;
  ASSERT_TRUE(WriteSyntheticModel(fs, "q.gguf", o, *log).ok());
  auto m = Model::Load(fs, "q.gguf", {}, *log);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->config().architecture, "qwen2");
  EXPECT_EQ((*m)->config().rope_style, RopeStyle::kNeox);
  EXPECT_TRUE((*m)->config().tied_embeddings);
  EXPECT_NE((*m)->gguf().FindTensor("blk.1.attn_k.bias"), nullptr);
  // Generation runs, and a prompt fed in pieces gives the same tokens.
  engine::EngineOptions eo;
  eo.n_ctx = 128;
  auto eng = engine::Engine::Create(**m, eo, *log);
  ASSERT_TRUE(eng.ok());
  testing::GreedyRequest r{(*m)->tokenizer().Encode("the little dog went to the park"), 10, false};
  auto whole = testing::RunGreedy(**eng, std::span(&r, 1));
  auto chunked = testing::RunGreedy(**eng, std::span(&r, 1), {.max_batch_tokens = 3});
  ASSERT_TRUE(whole.ok() && chunked.ok());
  EXPECT_EQ((*whole)[0].tokens, (*chunked)[0].tokens);
  EXPECT_EQ((*whole)[0].tokens.size(), 10u);
}

}  // namespace
}  // namespace strata::model
