#include "grammar/grammar_mask.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "grammar/json_schema.h"
#include "testing/shared_data.h"
#include "testing/tiny_model.h"
#include "util/file_system.h"
#include "util/random.h"

namespace strata::grammar {
namespace {

// Every token whose bytes the matcher takes: the mask's answer by brute force.
std::vector<int32_t> BruteForce(const text::Tokenizer& tok, const GrammarMatcher& m) {
  std::vector<int32_t> want;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (tok.IsEog(id) || tok.Piece(id).empty()) continue;
    GrammarMatcher copy = m;
    if (copy.FeedAll(tok.Piece(id))) want.push_back(id);
  }
  return want;
}

const char* const kGrammars[] = {
    // Ambiguous, recursive, with classes, counts and UTF-8.
    R"g(root ::= item ("," item)*
        item ::= [a-z]+ | [a-c]+ "!" | "(" root ")" | "é"{1,3} | [0-9]{2,4})g",
    R"g(root ::= "say " ("yes" | "no" | "maybe" [.]?) " " [^\n]{0,12} "\n")g",
};

// Random walks through each grammar; at every state the mask (direct and
// memoised) equals the brute force answer.
void CheckRandomWalks(const text::Tokenizer& tok, const std::shared_ptr<const Grammar>& g,
                      int walks, int steps) {
  auto vocab = std::make_shared<const VocabIndex>(tok);
  const GrammarTokenMask mask(g, vocab);
  util::Rng rng(3);
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(*g);
    for (int s = 0; s < steps; ++s) {
      const std::vector<int32_t> want = BruteForce(tok, m);
      ASSERT_EQ(mask.Allowed(m), want) << "walk " << w << " step " << s;
      ASSERT_EQ(*mask.AllowedCached(m), want);
      if (want.empty()) break;
      const int32_t id = want[rng.Below(want.size())];
      ASSERT_TRUE(m.FeedAll(tok.Piece(id)));
    }
  }
}

TEST(GrammarTokenMask, AllowsExactlyTheTokensTheMatcherAccepts) {
  const testing::TinyModel tiny = testing::MakeTinyModel();
  for (const char* text : kGrammars) {
    auto g = Grammar::Parse(text);
    ASSERT_TRUE(g.ok()) << g.status().message();
    CheckRandomWalks(tiny.model->tokenizer(), *g, 6, 30);
  }
}

TEST(GrammarTokenMask, AgreesWithBruteForceOnASchemaGrammar) {
  const testing::TinyModel tiny = testing::MakeTinyModel();
  auto text = CompileJsonSchema(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "tags": {"type": "array", "items": {"enum": ["a", "b c"]}},
      "n": {"type": "integer"}, "ok": {"type": ["boolean", "null"]}}, "required": ["name"]})");
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto g = Grammar::Parse(*text);
  ASSERT_TRUE(g.ok()) << g.status().message() << "\n" << *text;
  CheckRandomWalks(tiny.model->tokenizer(), *g, 4, 40);
}

// The same on real vocabularies (multi-byte pieces, pieces that cross a
// string's end), when ../shared has them.
TEST(GrammarTokenMask, AgreesWithBruteForceOnRealVocabularies) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-qwen2.gguf");
  auto fs = util::NewPosixFileSystem();
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-qwen2.gguf"}) {
    auto gguf = format::GgufFile::Open(*fs, testing::SharedPath("models/vocab/") + name);
    ASSERT_TRUE(gguf.ok());
    auto tok = text::Tokenizer::FromGguf(**gguf);
    ASSERT_TRUE(tok.ok());
    auto text = CompileJsonSchema(R"({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 8}, "bio": {"type": "string"},
        "age": {"type": "integer"}}, "required": ["name", "bio"]})");
    ASSERT_TRUE(text.ok());
    auto g = Grammar::Parse(*text);
    ASSERT_TRUE(g.ok());
    CheckRandomWalks(**tok, *g, 2, 12);
  }
}

}  // namespace
}  // namespace strata::grammar
