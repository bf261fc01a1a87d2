#include "model/encoder.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

#include "format/gguf_writer.h"
#include "model/synthetic.h"
#include "testing/mem_file_system.h"
#include "testing/shared_data.h"
#include "util/log.h"

namespace strata::model {
namespace {

double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0.0, na = 0.0, nb = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  return dot / std::sqrt(na * nb);
}

struct Loaded {
  std::unique_ptr<testing::MemFileSystem> fs = std::make_unique<testing::MemFileSystem>();
  std::unique_ptr<format::GgufFile> vocab;
  std::unique_ptr<Encoder> encoder;
};

// Writes a synthetic encoder (as `strata mkmodel` does) and loads it.
Loaded MakeEncoder(const SyntheticShape& shape, kernels::TensorType type, uint64_t seed,
                   const std::string& vocab_path = "") {
  Loaded l;
  auto log = util::NewNullLogger();
  SyntheticOptions o;
  o.shape = shape;
  o.type = type;
  o.seed = seed;
  if (!vocab_path.empty()) {
    auto fs = util::NewPosixFileSystem();
    auto v = format::GgufFile::Open(*fs, vocab_path);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    l.vocab = std::move(v).value();
    o.vocab = l.vocab.get();
  }
  util::Status st = WriteSyntheticModel(*l.fs, "enc.gguf", o, *log);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto e = Encoder::Load(*l.fs, "enc.gguf", *log);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (e.ok()) l.encoder = std::move(e).value();
  return l;
}

SyntheticShape SmallBert() {
  SyntheticShape s;
  s.architecture = "bert";
  s.n_embd = 64;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 4;
  s.n_ff = 128;
  s.n_ctx = 16;
  return s;
}

TEST(Encoder, VectorsAreUnitLengthDeterministicAndTellTextsApart) {
  Loaded l = MakeEncoder(SmallBert(), kernels::TensorType::kF32, 7);
  ASSERT_NE(l.encoder, nullptr);
  EXPECT_EQ(l.encoder->config().n_embd, 64);
  EXPECT_EQ(l.encoder->config().pooling, Pooling::kMean);
  util::ThreadPool one(1), two(2);
  auto a = l.encoder->Embed("the cat saw the dog", one);
  auto a2 = l.encoder->Embed("the cat saw the dog", two);
  auto b = l.encoder->Embed("what is a model", one);
  ASSERT_TRUE(a.ok() && a2.ok() && b.ok());
  EXPECT_EQ(a->n_tokens, 7);  // [CLS] five words [SEP]
  double norm = 0.0;
  for (float x : a->vector) norm += static_cast<double>(x) * x;
  EXPECT_NEAR(norm, 1.0, 1e-5);
  // The same text gives bitwise the same vector whatever the thread count.
  EXPECT_EQ(a->vector, a2->vector);
  EXPECT_LT(Cosine(a->vector, b->vector), 0.99);
}

TEST(Encoder, LongTextsAreCutToTheContextAndSaySo) {
  Loaded l = MakeEncoder(SmallBert(), kernels::TensorType::kF32, 7);
  ASSERT_NE(l.encoder, nullptr);
  util::ThreadPool pool(1);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "fun ";
  auto e = l.encoder->Embed(text, pool);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e->truncated);
  EXPECT_EQ(e->n_tokens, 16);
  auto empty = l.encoder->Embed("", pool);  // [CLS] [SEP]
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->n_tokens, 2);

  EXPECT_FALSE(l.encoder->EmbedTokens({}, pool).ok());
  const std::vector<int32_t> outside = {2, 100000, 3};
  EXPECT_FALSE(l.encoder->EmbedTokens(outside, pool).ok());
  const std::vector<int32_t> too_long(17, 2);
  EXPECT_FALSE(l.encoder->EmbedTokens(too_long, pool).ok());
}

TEST(Encoder, RefusesWhatItCannotComputeAndNamesIt) {
  auto log = util::NewNullLogger();
  testing::MemFileSystem fs;
  SyntheticOptions o;
  o.shape = SmallBert();
  ASSERT_TRUE(WriteSyntheticModel(fs, "enc.gguf", o, *log).ok());
  // A decoder is not an encoder.
  SyntheticOptions d;
  d.shape.n_embd = 64;
  d.shape.n_layers = 1;
  d.shape.n_heads = 4;
  d.shape.n_kv_heads = 2;
  d.shape.n_ff = 128;
  ASSERT_TRUE(WriteSyntheticModel(fs, "dec.gguf", d, *log).ok());
  auto dec = Encoder::Load(fs, "dec.gguf", *log);
  ASSERT_FALSE(dec.ok());
  EXPECT_NE(dec.status().message().find("'llama' is not a supported encoder"), std::string::npos);

  // Rewrite the encoder's metadata with one key changed at a time.
  auto g = format::GgufFile::Open(fs, "enc.gguf");
  ASSERT_TRUE(g.ok());
  auto rewrite = [&](const std::string& key, auto set) {
    format::GgufWriter w;
    for (const auto& [k, v] : (*g)->metadata()) {
      if (k != key) w.CopyValue(k, v);
    }
    set(w);
    for (const auto& t : (*g)->tensors()) {
      if (key == t.name) continue;  // a tensor named as the key is dropped
      EXPECT_TRUE(w.AddTensorBytes(t.name, t.shape, t.type,
                                   std::vector<uint8_t>(t.data.begin(), t.data.end()))
                      .ok());
    }
    EXPECT_TRUE(w.Write(fs, "bad.gguf", nullptr, nullptr).ok());
    return Encoder::Load(fs, "bad.gguf", *log);
  };
  auto causal =
      rewrite("bert.attention.causal", [](auto& w) { w.SetBool("bert.attention.causal", true); });
  EXPECT_EQ(causal.status().code(), util::StatusCode::kUnimplemented);
  auto pooling = rewrite("bert.pooling_type", [](auto& w) { w.SetUint32("bert.pooling_type", 3); });
  EXPECT_NE(pooling.status().message().find("pooling_type = 3"), std::string::npos);
  auto missing = rewrite("blk.1.ffn_up.weight", [](auto&) {});
  EXPECT_NE(missing.status().message().find("'blk.1.ffn_up.weight' is missing"), std::string::npos);
  // Optional biases may be absent, as in the reference.
  auto no_bias = rewrite("blk.0.attn_q.bias", [](auto&) {});
  EXPECT_TRUE(no_bias.ok()) << no_bias.status().ToString();
}

// The reference vectors in testdata/encoder_reference.json were computed by
// llama.cpp's llama-embedding from the files these cases write (bench/
// encoder_reference.sh regenerates them). Cosine ≥ 0.9999 per text.
void ExpectMatchesReference(const std::string& case_name, const std::string& vocab_path) {
  std::ifstream in(STRATA_TESTDATA_DIR "/encoder_reference.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json ref = nlohmann::json::parse(in);
  const nlohmann::json* c = nullptr;
  for (const auto& x : ref["cases"]) {
    if (x["name"] == case_name) c = &x;
  }
  ASSERT_NE(c, nullptr) << case_name;
  SyntheticShape shape;
  if (c->contains("shape")) {
    shape = *NamedShape((*c)["shape"].get<std::string>());
  } else {
    const auto& d = (*c)["dims"];
    shape.architecture = d["arch"];
    shape.n_embd = d["n_embd"];
    shape.n_layers = d["n_layers"];
    shape.n_heads = shape.n_kv_heads = d["n_heads"];
    shape.n_ff = d["n_ff"];
    shape.n_ctx = d["n_ctx"];
    shape.pooling_type = 1;
    shape.tied_embeddings = false;
  }
  auto type = ParseTypeSpec((*c)["type"].get<std::string>());
  ASSERT_TRUE(type.has_value());
  Loaded l = MakeEncoder(shape, type->first, (*c)["seed"].get<uint64_t>(), vocab_path);
  ASSERT_NE(l.encoder, nullptr);
  util::ThreadPool pool(2);
  std::vector<std::vector<float>> ours;
  for (size_t i = 0; i < (*c)["texts"].size(); ++i) {
    const std::string text = (*c)["texts"][i];
    const std::vector<float> want = (*c)["vectors"][i];
    auto e = l.encoder->Embed(text, pool);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    ASSERT_EQ(e->vector.size(), want.size());
    EXPECT_GE(Cosine(e->vector, want), 0.9999) << case_name << ": '" << text << "'";
    ours.push_back(e->vector);
  }
  // The texts give distinct vectors, so agreeing with the reference means something.
  ASSERT_GE(ours.size(), 2u);
  EXPECT_LT(Cosine(ours[0], ours[1]), 0.999);
}

TEST(EncoderReference, MiniLmShapeMatchesLlamaCpp) { ExpectMatchesReference("minilm-l6-f32", ""); }

TEST(EncoderReference, QuantizedNomicBertMatchesLlamaCpp) {
  ExpectMatchesReference("nomic-bert-q8_0", "");
}

TEST(EncoderReference, BgeSmallWithItsVocabularyMatchesLlamaCpp) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-bert-bge.gguf");
  ExpectMatchesReference("bge-small-f16",
                         testing::SharedPath("models/vocab/ggml-vocab-bert-bge.gguf"));
}

}  // namespace
}  // namespace strata::model
