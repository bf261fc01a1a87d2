#include "model/transformer.h"

#include <gtest/gtest.h>

#include "format/gguf_writer.h"
#include "model/forward.h"
#include "testing/mem_file_system.h"
#include "testing/tiny_model.h"
#include "util/log.h"

namespace strata::model {
namespace {

// Rewrites the tiny model's file with one change and loads it.
util::StatusOr<std::unique_ptr<Model>> LoadModified(
    const std::function<void(format::GgufWriter&, const format::GgufFile&)>& change) {
  auto tiny = testing::MakeTinyModel();
  const format::GgufFile& src = tiny.model->gguf();
  format::GgufWriter w;
  for (const auto& [k, v] : src.metadata()) w.CopyValue(k, v);
  for (const auto& t : src.tensors()) {
    EXPECT_TRUE(w.AddTensorBytes(t.name, t.shape, t.type,
                                 std::vector<uint8_t>(t.data.begin(), t.data.end()))
                    .ok());
  }
  change(w, src);
  testing::MemFileSystem fs;
  EXPECT_TRUE(w.Write(fs, "m.gguf").ok());
  auto log = util::NewNullLogger();
  return Model::Load(fs, "m.gguf", {}, *log);
}

void ExpectLoadError(
    const std::function<void(format::GgufWriter&, const format::GgufFile&)>& change,
    const std::string& needle) {
  auto m = LoadModified(change);
  ASSERT_FALSE(m.ok()) << "loaded; wanted: " << needle;
  EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
}

TEST(ModelLoad, UnchangedCopyLoads) {
  auto m = LoadModified([](format::GgufWriter&, const format::GgufFile&) {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE((*m)->config().tied_embeddings);
  EXPECT_EQ((*m)->config().n_layers, 2);
}

TEST(ModelLoad, BadMetadataIsNamed) {
  ExpectLoadError([](format::GgufWriter& w,
                     const format::GgufFile&) { w.SetString("general.architecture", "gpt9"); },
                  "architecture 'gpt9' is not supported");
  ExpectLoadError(
      [](format::GgufWriter& w, const format::GgufFile&) { w.Remove("llama.block_count"); },
      "'llama.block_count' is missing");
  ExpectLoadError([](format::GgufWriter& w,
                     const format::GgufFile&) { w.SetUint32("llama.attention.head_count_kv", 3); },
                  "not a multiple of attention.head_count_kv");
  ExpectLoadError([](format::GgufWriter& w,
                     const format::GgufFile&) { w.SetString("llama.block_count", "two"); },
                  "'llama.block_count' is string");
  ExpectLoadError([](format::GgufWriter& w,
                     const format::GgufFile&) { w.SetUint32("llama.embedding_length", 0); },
                  "outside [1, 65536]");
  ExpectLoadError([](format::GgufWriter& w,
                     const format::GgufFile&) { w.SetString("tokenizer.ggml.model", "gpt9"); },
                  "tokenizer 'gpt9'");
  ExpectLoadError(
      [](format::GgufWriter& w, const format::GgufFile&) {
        w.SetUint32("tokenizer.ggml.bos_token_id", 1u << 30);
      },
      "outside the vocabulary");
}

TEST(ModelLoad, AnUnknownArchitectureIsRefusedWithTheTableOfKnownOnes) {
  ExpectLoadError([](format::GgufWriter& w,
                     const format::GgufFile&) { w.SetString("general.architecture", "gpt9"); },
                  "model architecture 'gpt9' is not supported (supported: llama, qwen2)");
}

TEST(ModelLoad, TheRopeStyleComesFromTheArchitecture) {
  auto llama = testing::MakeTinyModel();
  EXPECT_EQ(llama.model->config().architecture, "llama");
  EXPECT_EQ(llama.model->config().rope_style, RopeStyle::kNormal);
  SyntheticShape shape = testing::TinyShape();
  shape.architecture = "qwen2";
  auto qwen2 = testing::MakeTinyModel(kernels::TensorType::kF32, 1, shape);
  EXPECT_EQ(qwen2.model->config().architecture, "qwen2");
  EXPECT_EQ(qwen2.model->config().rope_style, RopeStyle::kNeox);
}

TEST(ModelLoad, BadTensorsAreNamed) {
  // The number of blocks grows: blk.2 tensors do not exist.
  ExpectLoadError(
      [](format::GgufWriter& w, const format::GgufFile&) { w.SetUint32("llama.block_count", 3); },
      "tensor 'blk.2.attn_norm.weight' is missing");
  // Wrong FFN width: the shapes no longer match.
  ExpectLoadError([](format::GgufWriter& w,
                     const format::GgufFile&) { w.SetUint32("llama.feed_forward_length", 64); },
                  "has shape [64, 128], expected [64, 64]");
}

TEST(ModelLoad, UnsupportedTensorTypeIsNamed) {
  // Replace the whole file with one whose attn_q is IQ4_NL (no kernel for it).
  auto tiny = testing::MakeTinyModel();
  const format::GgufFile& src = tiny.model->gguf();
  format::GgufWriter w;
  for (const auto& [k, v] : src.metadata()) w.CopyValue(k, v);
  for (const auto& t : src.tensors()) {
    if (t.name == "blk.0.attn_q.weight") {
      const uint64_t bytes = static_cast<uint64_t>(t.n_elements() / 32) * 18;
      ASSERT_TRUE(w.AddTensorBytes(t.name, t.shape, kernels::TensorType::kIQ4_NL,
                                   std::vector<uint8_t>(bytes))
                      .ok());
    } else {
      ASSERT_TRUE(w.AddTensorBytes(t.name, t.shape, t.type,
                                   std::vector<uint8_t>(t.data.begin(), t.data.end()))
                      .ok());
    }
  }
  testing::MemFileSystem fs;
  ASSERT_TRUE(w.Write(fs, "m.gguf").ok());
  auto log = util::NewNullLogger();
  auto m = Model::Load(fs, "m.gguf", {}, *log);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'blk.0.attn_q.weight' has type IQ4_NL"), std::string::npos)
      << m.status().message();
}

TEST(ModelLoad, FingerprintSeparatesWeights) {
  auto a = testing::MakeTinyModel(kernels::TensorType::kF32, 1);
  auto b = testing::MakeTinyModel(kernels::TensorType::kF32, 2);
  auto a2 = testing::MakeTinyModel(kernels::TensorType::kF32, 1);
  EXPECT_NE(a.model->fingerprint(), b.model->fingerprint());
  EXPECT_EQ(a.model->fingerprint(), a2.model->fingerprint());
}

TEST(Forward, RejectsInvalidBatches) {
  auto tiny = testing::MakeTinyModel();
  util::ThreadPool pool(1);
  Forward fwd(*tiny.model, pool);
  std::vector<float> kv(tiny.model->config().kv_layout(16).block_floats() * 2);
  KvBuffer buf{kv.data(), 2, 16, kernels::TensorType::kF32};
  std::vector<int32_t> table = {0};
  std::span<const int32_t> tables[] = {table};
  std::vector<float> logits(static_cast<size_t>(tiny.model->config().n_vocab));
  BatchEntry too_far{1, 16, 0, true};  // position 16 needs a second block
  EXPECT_FALSE(fwd.Run({std::span(&too_far, 1), tables}, buf, logits).ok());
  BatchEntry bad_token{-1, 0, 0, true};
  EXPECT_FALSE(fwd.Run({std::span(&bad_token, 1), tables}, buf, logits).ok());
  BatchEntry bad_seq{1, 0, 5, true};
  EXPECT_FALSE(fwd.Run({std::span(&bad_seq, 1), tables}, buf, logits).ok());
  std::vector<int32_t> bad_table = {7};
  std::span<const int32_t> bad_tables[] = {bad_table};
  BatchEntry ok{1, 0, 0, true};
  EXPECT_FALSE(fwd.Run({std::span(&ok, 1), bad_tables}, buf, logits).ok());
  std::vector<float> small(3);
  EXPECT_FALSE(fwd.Run({std::span(&ok, 1), tables}, buf, small).ok());
  EXPECT_TRUE(fwd.Run({std::span(&ok, 1), tables}, buf, logits).ok());
}

TEST(KvLayout, BlocksAreLayersOfKeysThenValuesOfSlots) {
  // [n_blocks][n_layers = 3][2][block_size = 4][kv_dim = 8]
  const KvLayout kv(3, 8, 4);
  EXPECT_EQ(kv.row_floats(), 8u);
  EXPECT_EQ(kv.part_floats(), 4u * 8);
  EXPECT_EQ(kv.layer_floats(), 2u * 4 * 8);
  EXPECT_EQ(kv.block_floats(), 3u * 2 * 4 * 8);
  EXPECT_EQ(kv.RowOffset(0, 0, KvPart::kKey, 0), 0u);
  EXPECT_EQ(kv.RowOffset(0, 0, KvPart::kKey, 1), 8u);
  EXPECT_EQ(kv.RowOffset(0, 0, KvPart::kValue, 0), 32u);
  EXPECT_EQ(kv.RowOffset(0, 1, KvPart::kKey, 0), 64u);
  EXPECT_EQ(kv.RowOffset(2, 1, KvPart::kValue, 3), 2u * 192 + 64 + 32 + 3 * 8);
  // What the attention kernel adds: a position's slot offset and a (layer, part) base.
  for (int32_t b = 0; b < 3; ++b) {
    for (int32_t l = 0; l < 3; ++l) {
      for (const KvPart part : {KvPart::kKey, KvPart::kValue}) {
        for (int32_t s = 0; s < 4; ++s) {
          EXPECT_EQ(kv.RowOffset(b, l, part, s), kv.SlotOffset(b, s) + kv.PartOffset(l, part));
        }
      }
    }
  }
  EXPECT_EQ(kv.BlockIndex(9), 2);
  EXPECT_EQ(kv.Slot(9), 1);
}

TEST(KvLayout, BytesFollowTheElementType) {
  // kv_dim 64: a Q8_0 row is two blocks of 34 bytes.
  const KvLayout f32(2, 64, 4), f16(2, 64, 4, kernels::TensorType::kF16),
      q8(2, 64, 4, kernels::TensorType::kQ8_0);
  EXPECT_EQ(f32.row_bytes(), 256u);
  EXPECT_EQ(f16.row_bytes(), 128u);
  EXPECT_EQ(q8.row_bytes(), 68u);
  EXPECT_EQ(f16.block_bytes(), f16.block_floats() * 2);
  EXPECT_EQ(q8.block_bytes(), f16.block_floats() / 32 * 34);
  // Offsets stay in elements and stay additive in bytes.
  for (const KvLayout* kv : {&f32, &f16, &q8}) {
    EXPECT_EQ(kv->Bytes(kv->RowOffset(3, 1, KvPart::kValue, 2)),
              kv->Bytes(kv->SlotOffset(3, 2)) + kv->Bytes(kv->PartOffset(1, KvPart::kValue)));
  }
}

TEST(KvLayout, ComesFromTheModelShape) {
  auto tiny = testing::MakeTinyModel();
  const ModelConfig& c = tiny.model->config();
  const KvLayout kv = c.kv_layout(16);
  EXPECT_EQ(kv.n_layers(), c.n_layers);
  EXPECT_EQ(kv.kv_dim(), c.n_kv_heads * c.head_dim);
  EXPECT_EQ(kv.block_size(), 16);
}

}  // namespace
}  // namespace strata::model
