#include "grammar/grammar_mask.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "testing/tiny_model.h"
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

}  // namespace
}  // namespace strata::grammar
