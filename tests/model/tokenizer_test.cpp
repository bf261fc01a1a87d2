#include "model/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "model/gguf_writer.h"
#include "testing/shared_data.h"
#include "testing/tiny_model.h"
#include "util/file_system.h"

namespace strata::model {
namespace {

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// The reference vectors: .inp holds texts separated by "\n__ggml_vocab_test__\n",
// .out one line of space-separated ids per text.
std::vector<VocabCase> ReadVectors(const std::string& name) {
  std::ifstream inp(testing::SharedPath("golden/tokenizer/" + name + ".inp"), std::ios::binary);
  std::ifstream out(testing::SharedPath("golden/tokenizer/" + name + ".out"));
  std::stringstream ss;
  ss << inp.rdbuf();
  const std::string raw = ss.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(raw.substr(pos));
      break;
    }
    texts.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<VocabCase> cases;
  std::string line;
  size_t i = 0;
  while (std::getline(out, line)) {
    VocabCase c;
    c.text = i < texts.size() ? texts[i] : "";
    std::istringstream ids(line);
    int32_t id;
    while (ids >> id) c.ids.push_back(id);
    cases.push_back(std::move(c));
    ++i;
  }
  EXPECT_EQ(cases.size(), texts.size()) << name;
  return cases;
}

std::unique_ptr<Tokenizer> LoadVocab(const std::string& name, std::unique_ptr<GgufFile>& keep) {
  auto fs = util::NewPosixFileSystem();
  auto g = GgufFile::Open(*fs, testing::SharedPath("models/vocab/" + name));
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  keep = std::move(g).value();
  auto t = Tokenizer::FromGguf(*keep);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

std::string Ids(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

void ExpectReferenceTokenization(const std::string& vocab, bool check_round_trip) {
  std::unique_ptr<GgufFile> g;
  auto tok = LoadVocab(vocab, g);
  ASSERT_NE(tok, nullptr);
  const auto cases = ReadVectors(vocab);
  ASSERT_GT(cases.size(), 20u);
  for (const auto& c : cases) {
    const auto ids = tok->Encode(c.text, {.add_special = false, .parse_special = false});
    EXPECT_EQ(Ids(ids), Ids(c.ids)) << "text: '" << c.text << "'";
    if (check_round_trip) {
      EXPECT_EQ(tok->Decode(ids), c.text);
    }
  }
}

TEST(Tokenizer, ReproducesLlamaSentencePieceExactly) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  ExpectReferenceTokenization("ggml-vocab-llama-spm.gguf", /*check_round_trip=*/true);
}

TEST(Tokenizer, ReproducesPhi3Exactly) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-phi-3.gguf");
  ExpectReferenceTokenization("ggml-vocab-phi-3.gguf", /*check_round_trip=*/true);
}

TEST(Tokenizer, AddsBosAndKnowsEndOfGeneration) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  std::unique_ptr<GgufFile> g;
  auto tok = LoadVocab("ggml-vocab-llama-spm.gguf", g);
  const auto ids = tok->Encode("Hello world", {.add_special = true});
  EXPECT_EQ(Ids(ids), "1 15043 3186 ");
  EXPECT_TRUE(tok->IsEog(2));
  EXPECT_FALSE(tok->IsEog(15043));
  EXPECT_EQ(tok->Decode(ids), "Hello world");
}

TEST(Tokenizer, ControlTokensInUserTextStayText) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  std::unique_ptr<GgufFile> g;
  auto tok = LoadVocab("ggml-vocab-llama-spm.gguf", g);
  const auto plain = tok->Encode("a</s>b", {.add_special = false, .parse_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  const auto parsed = tok->Encode("a</s>b", {.add_special = false, .parse_special = true});
  EXPECT_EQ(std::count(parsed.begin(), parsed.end(), 2), 1);
}

TEST(Tokenizer, BuiltInVocabularyRoundTripsAnyText) {
  auto tiny = testing::MakeTinyModel();
  ASSERT_NE(tiny.model, nullptr);
  const Tokenizer& tok = tiny.model->tokenizer();
  for (std::string s : {std::string("once upon a time the little dog"), std::string("Zürich 東京 🙂"),
                        std::string("\x01\x7f control bytes\ttab\nnewline"), std::string("  two  spaces "),
                        std::string()}) {
    const auto ids = tok.Encode(s);
    EXPECT_EQ(tok.Decode(ids), s);
  }
  // Whole words merge into single tokens.
  const auto ids = tok.Encode("the little", {.add_special = false});
  EXPECT_EQ(ids.size(), 2u);
}

TEST(Detokenizer, HoldsBackIncompleteCharacters) {
  auto tiny = testing::MakeTinyModel();
  const Tokenizer& tok = tiny.model->tokenizer();
  // "é" is two byte tokens in the built-in vocabulary.
  const auto ids = tok.Encode("é", {.add_special = false});
  ASSERT_EQ(ids.size(), 3u);  // "▁", <0xC3>, <0xA9>
  Detokenizer d(tok, /*strip_leading_space=*/true);
  EXPECT_EQ(d.Push(ids[0]), "");
  EXPECT_EQ(d.Push(ids[1]), "") << "emitted half a character";
  EXPECT_EQ(d.Push(ids[2]), "é");
  EXPECT_EQ(d.Finish(), "");
  // A lone continuation byte becomes U+FFFD, never raw invalid UTF-8.
  Detokenizer bad(tok);
  std::string s = bad.Push(*tok.Find("<0xBF>"));
  s += bad.Finish();
  EXPECT_EQ(s, "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace strata::model
