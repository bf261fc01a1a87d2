#include "model/transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "format/gguf_writer.h"
#include "model/forward.h"
#include "model/synthetic.h"
#include "testing/mem_file_system.h"
#include "testing/shared_data.h"
#include "testing/tiny_model.h"
#include "util/file_system.h"
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

// The logits of `tokens` run as one prompt.
std::vector<float> PromptLogits(const Model& m, const std::vector<int32_t>& tokens) {
  util::ThreadPool pool(2);
  Forward fwd(m, pool);
  const KvLayout layout = m.config().kv_layout(16);
  std::vector<float> kv(layout.block_floats() * 4);
  KvBuffer buf{kv.data(), 4, 16, kernels::TensorType::kF32};
  std::vector<int32_t> table = {0, 1, 2, 3};
  std::span<const int32_t> tables[] = {table};
  std::vector<BatchEntry> entries;
  for (size_t i = 0; i < tokens.size(); ++i) {
    entries.push_back({tokens[i], static_cast<int32_t>(i), 0, i + 1 == tokens.size()});
  }
  std::vector<float> logits(static_cast<size_t>(m.config().n_vocab));
  EXPECT_TRUE(fwd.Run({entries, tables}, buf, logits).ok());
  return logits;
}

// Loads the model `o` describes plain and packed (on) and checks what was
// packed: every layer matrix (their rows are whole groups of 8) and the
// output head when its rows are whole groups; a head tied to the token
// embedding is packed as the embedding, whose lookups then unpack a group.
// The two give the same logits within rounding.
void ExpectPackedAsPlain(const model::SyntheticOptions& o) {
  auto log = util::NewNullLogger();
  testing::MemFileSystem fs;
  ASSERT_TRUE(model::WriteSyntheticModel(fs, "m.gguf", o, *log).ok());
  auto plain =
      Model::Load(fs, "m.gguf", {.prefetch = true, .pack = {.mode = PackMode::kOff}}, *log);
  auto packed =
      Model::Load(fs, "m.gguf", {.prefetch = true, .pack = {.mode = PackMode::kOn}}, *log);
  ASSERT_TRUE(plain.ok() && packed.ok());
  EXPECT_EQ((*plain)->packed_bytes(), 0u);
  const bool tied = (*packed)->config().tied_embeddings;
  uint64_t layer_bytes = 0, head_bytes = 0;
  for (const auto& t : (*packed)->gguf().tensors()) {
    if (t.name.rfind("blk.", 0) == 0 && t.shape.size() == 2) layer_bytes += t.n_bytes;
    const bool head = t.name == (tied ? "token_embd.weight" : "output.weight");
    if (head && t.shape[1] % kernels::kPackRows == 0) head_bytes = t.n_bytes;
  }
  ASSERT_GT(layer_bytes, 0u);
  EXPECT_EQ((*packed)->packed_bytes(), layer_bytes + head_bytes);
  // Same fingerprint: the same weights, whatever their layout.
  EXPECT_EQ((*plain)->fingerprint(), (*packed)->fingerprint());

  const std::vector<int32_t> prompt = (*packed)->tokenizer().Encode("once upon a time there");
  const std::vector<float> a = PromptLogits(**plain, prompt);
  const std::vector<float> b = PromptLogits(**packed, prompt);
  ASSERT_EQ(a.size(), b.size());
  float scale = 0, diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(a[i]));
    diff = std::max(diff, std::fabs(a[i] - b[i]));
  }
  // The layouts differ only in the order float products are summed.
  EXPECT_LE(diff, 1e-4f * scale + 1e-6f) << "largest |logit| " << scale;
  EXPECT_EQ(std::max_element(a.begin(), a.end()) - a.begin(),
            std::max_element(b.begin(), b.end()) - b.begin());
}

TEST(PackedWeights, PackedAndPlainModelsGiveTheSameLogitsWithinRounding) {
  model::SyntheticOptions o;
  o.shape = testing::TinyShape();
  o.type = kernels::TensorType::kQ8_0;
  o.seed = 5;
  ExpectPackedAsPlain(o);  // the built-in vocabulary: not whole groups, the head stays plain
  o.shape.tied_embeddings = false;
  ExpectPackedAsPlain(o);
}

TEST(PackedWeights, ATiedHeadIsPackedWithItsEmbedding) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  auto posix = util::NewPosixFileSystem();
  auto vocab =
      format::GgufFile::Open(*posix, testing::SharedPath("models/vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  model::SyntheticOptions o;
  o.shape = testing::TinyShape();
  o.shape.n_layers = 1;
  o.vocab = vocab->get();  // 32,000 tokens: whole groups
  o.seed = 6;
  for (kernels::TensorType t : {kernels::TensorType::kQ8_0, kernels::TensorType::kQ5_0}) {
    o.type = t;
    ExpectPackedAsPlain(o);
  }
}

TEST(PackedWeights, AutoFollowsTheKernelTableAndTheMemoryAvailable) {
  auto log = util::NewNullLogger();
  testing::MemFileSystem fs;
  model::SyntheticOptions o;
  o.shape = testing::TinyShape();
  o.type = kernels::TensorType::kQ8_0;
  ASSERT_TRUE(model::WriteSyntheticModel(fs, "m.gguf", o, *log).ok());
  // The scalar table prefers no packed kernel: auto keeps the file's layout.
  auto scalar = Model::Load(
      fs, "m.gguf",
      {.prefetch = true,
       .pack = {.mode = PackMode::kAuto, .kernels = kernels::GetKernels(kernels::Isa::kScalar)}},
      *log);
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ((*scalar)->packed_bytes(), 0u);
  // A table that prefers packed Q8_0 packs it, unless it would not fit.
  const kernels::KernelTable* preferring = nullptr;
  for (kernels::Isa isa : {kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    const kernels::KernelTable* k = kernels::GetKernels(isa);
    if (k != nullptr && k->prefers_packed(kernels::TensorType::kQ8_0)) preferring = k;
  }
  if (preferring == nullptr) GTEST_SKIP() << "no kernel table here prefers packed Q8_0";
  auto m = Model::Load(fs, "m.gguf", {.prefetch = true, .pack = {.kernels = preferring}}, *log);
  ASSERT_TRUE(m.ok());
  EXPECT_GT((*m)->packed_bytes(), 0u);
  fs.Put("/proc/meminfo", "MemTotal:  1000 kB\nMemFree:  1 kB\nMemAvailable:       1 kB\n");
  auto tight = Model::Load(fs, "m.gguf", {.prefetch = true, .pack = {.kernels = preferring}}, *log);
  ASSERT_TRUE(tight.ok());
  EXPECT_EQ((*tight)->packed_bytes(), 0u);
  // on packs whatever the memory says.
  auto forced =
      Model::Load(fs, "m.gguf",
                  {.prefetch = true, .pack = {.mode = PackMode::kOn, .kernels = preferring}}, *log);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ((*forced)->packed_bytes(), (*m)->packed_bytes());
}

TEST(PackedWeights, PackModesParseByName) {
  EXPECT_EQ(*ParsePackMode("auto"), PackMode::kAuto);
  EXPECT_EQ(*ParsePackMode("on"), PackMode::kOn);
  EXPECT_EQ(*ParsePackMode("off"), PackMode::kOff);
  EXPECT_FALSE(ParsePackMode("yes").ok());
  EXPECT_EQ(PackModeName(PackMode::kOn), "on");
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
