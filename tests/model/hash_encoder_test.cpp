#include "model/hash_encoder.h"

#include <gtest/gtest.h>

#include <cmath>

#include "format/gguf_writer.h"
#include "testing/mem_file_system.h"
#include "util/log.h"

namespace strata::model {
namespace {

double Cos(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += static_cast<double>(a[i]) * b[i];
  return d;
}

HashEncoderConfig Small() {
  HashEncoderConfig c;
  c.dim = 32;
  c.buckets = 1 << 10;
  return c;
}

TEST(HashFeatures, AreWordsBigramsAndCharTrigramsLowerCased) {
  HashEncoderConfig c = Small();
  const auto a = HashFeatures("Hi, Bob!", c);
  const auto b = HashFeatures("hi bob", c);
  EXPECT_EQ(a, b);
  // "hi": unigram + 2 trigrams (<hi, hi>); "bob": unigram + 3; one bigram.
  EXPECT_EQ(a.size(), 1u + 2 + 1 + 3 + 1);
  c.word_bigrams = false;
  c.char_trigrams = false;
  EXPECT_EQ(HashFeatures("hi bob", c).size(), 2u);
  EXPECT_TRUE(HashFeatures(" ,.!? ", c).empty());
  EXPECT_EQ(HashFeatures("a b c d e f", c, /*max_features=*/3).size(), 3u);
  for (uint32_t f : a) EXPECT_LT(f, static_cast<uint32_t>(Small().buckets));
}

// Paraphrase pairs of a toy domain: synonyms the features cannot know.
std::vector<TrainingPair> ToyPairs() {
  const std::vector<std::pair<std::string, std::string>> syn = {
      {"car", "automobile"}, {"buy", "purchase"}, {"big", "large"},  {"fast", "quick"},
      {"help", "assist"},    {"begin", "start"},  {"end", "finish"}, {"small", "tiny"}};
  const std::vector<std::string> frames = {"how do i {} it", "where can i {} one",
                                           "why does it {} now", "what makes a {} thing"};
  std::vector<TrainingPair> out;
  for (const auto& [x, y] : syn) {
    for (const std::string& f : frames) {
      const size_t at = f.find("{}");
      out.push_back(
          {f.substr(0, at) + x + f.substr(at + 2), f.substr(0, at) + y + f.substr(at + 2), 1});
    }
  }
  // Non-paraphrases that share the frame.
  for (size_t i = 0; i + 1 < syn.size(); ++i) {
    out.push_back({"how do i " + syn[i].first + " it", "how do i " + syn[i + 1].first + " it", 0});
  }
  return out;
}

TEST(HashEncoder, TrainingPullsParaphrasesTogetherAndIsDeterministic) {
  HashTrainOptions o;
  o.config = Small();
  o.epochs = 40;
  o.batch = 8;
  o.learning_rate = 0.05;
  auto untrained = HashEncoder::Create(
      o.config, std::vector<float>(static_cast<size_t>(o.config.dim) * o.config.buckets, 0.1f),
      "flat");
  ASSERT_TRUE(untrained.ok());
  auto a = TrainHashEncoder(ToyPairs(), o, nullptr);
  auto b = TrainHashEncoder(ToyPairs(), o, nullptr);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->fingerprint(), (*b)->fingerprint()) << "same data and seed, same table";
  const auto& e = **a;
  // The synonym pair is closer than two different words in the same frame.
  const double same = Cos(e.Embed("how do i purchase it"), e.Embed("how do i buy it"));
  const double other = Cos(e.Embed("how do i purchase it"), e.Embed("how do i help it"));
  EXPECT_GT(same, other + 0.1) << same << " vs " << other;
  EXPECT_NEAR(Cos(e.Embed("anything"), e.Embed("anything")), 1.0, 1e-5);
  EXPECT_EQ(Cos(e.Embed("!!"), e.Embed("!!")), 0.0) << "no features, the zero vector";

  HashTrainOptions bad = o;
  bad.batch = 1;
  EXPECT_FALSE(TrainHashEncoder(ToyPairs(), bad, nullptr).ok());
  EXPECT_FALSE(TrainHashEncoder({{"a", "b", 0}}, o, nullptr).ok()) << "no paraphrases";
}

TEST(HashEncoder, WritesAndLoadsItsGguf) {
  HashEncoderConfig c = Small();
  std::vector<float> table(static_cast<size_t>(c.dim) * c.buckets);
  for (size_t i = 0; i < table.size(); ++i) table[i] = std::sin(static_cast<float>(i));
  auto e = HashEncoder::Create(c, table, "t");
  ASSERT_TRUE(e.ok());
  testing::MemFileSystem fs;
  auto log = util::NewNullLogger();
  ASSERT_TRUE((*e)->Write(fs, "f32.gguf", kernels::TensorType::kF32).ok());
  ASSERT_TRUE((*e)->Write(fs, "q8.gguf", kernels::TensorType::kQ8_0).ok());
  EXPECT_FALSE((*e)->Write(fs, "q4.gguf", kernels::TensorType::kQ4_0).ok());
  auto f32 = HashEncoder::Load(fs, "f32.gguf", *log);
  auto q8 = HashEncoder::Load(fs, "q8.gguf", *log);
  ASSERT_TRUE(f32.ok() && q8.ok()) << f32.status().ToString();
  EXPECT_EQ((*f32)->fingerprint(), (*e)->fingerprint());
  EXPECT_EQ((*f32)->name(), "t");
  const std::string text = "the quick brown fox";
  EXPECT_EQ((*f32)->Embed(text), (*e)->Embed(text));
  EXPECT_GT(Cos((*q8)->Embed(text), (*e)->Embed(text)), 0.999);

  // Not a hash encoder, or a table of the wrong shape.
  format::GgufWriter w;
  w.SetString("general.architecture", "strata-hash");
  w.SetUint32("strata-hash.embedding_length", 32);
  w.SetUint32("strata-hash.buckets", 1000);  // not a power of two
  w.SetUint64("strata-hash.hash_seed", 1);
  ASSERT_TRUE(w.Write(fs, "bad.gguf").ok());
  EXPECT_FALSE(HashEncoder::Load(fs, "bad.gguf", *log).ok());
  EXPECT_FALSE(HashEncoder::Create(c, std::vector<float>(10), "x").ok());
}

}  // namespace
}  // namespace strata::model
