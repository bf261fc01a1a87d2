#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "util/random.h"

namespace strata::grammar {
namespace {

std::shared_ptr<const Grammar> Must(std::string_view text) {
  auto g = Grammar::Parse(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *g : nullptr;
}

// Whether `text` is a whole sentence of `g`.
bool Matches(const Grammar& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.FeedAll(text) && m.accepting();
}

bool IsPrefix(const Grammar& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.FeedAll(text);
}

std::string ErrorOf(std::string_view text) {
  auto g = Grammar::Parse(text);
  return g.ok() ? "" : std::string(g.status().message());
}

TEST(Grammar, ParsesRulesLiteralsClassesGroupsAndQuantifiers) {
  const auto g = Must(R"(
    # a comment
    root ::= greeting (", " name)* "!"?   # trailing comment
    greeting ::= "hi" | "hello"
    name ::= [A-Z] [a-z]{1,5}
  )");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(*g, "hi"));
  EXPECT_TRUE(Matches(*g, "hello, Ada, Bob!"));
  EXPECT_TRUE(Matches(*g, "hi, Abcdef"));
  EXPECT_FALSE(Matches(*g, "hi, Abcdefg"));
  EXPECT_FALSE(Matches(*g, "hi, A"));
  EXPECT_FALSE(Matches(*g, "hey"));
  EXPECT_TRUE(IsPrefix(*g, "hel"));
  EXPECT_FALSE(IsPrefix(*g, "hex"));
}

TEST(Grammar, EscapesAndNegatedClassesAndUnicode) {
  const auto g = Must(R"(root ::= "\"" [^"\\]* "\"" "\n" "\x41\u00e9" [α-ω]+ .)");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(*g, "\"a b\xc3\xa9\"\nA\xc3\xa9\xce\xb1\xce\xb2z"));
  EXPECT_FALSE(Matches(*g, "\"a\\\"\nA\xc3\xa9\xce\xb1z"));  // a backslash inside
  // Only valid UTF-8: a lone continuation byte, an overlong form, a surrogate.
  EXPECT_FALSE(IsPrefix(*g, "\"\x80"));
  EXPECT_FALSE(IsPrefix(*g, "\"\xc0\xaf"));
  EXPECT_FALSE(IsPrefix(*g, "\"\xed\xa0\x80"));
  EXPECT_TRUE(IsPrefix(*g, "\"\xe2\x82"));  // half of U+20AC
  // A lead byte only where a class holds a code point it can start.
  for (const char* lead : {"\xc2", "\xe0", "\xf0", "\xe2"}) EXPECT_FALSE(IsPrefix(*g, lead));
  const auto ascii = Must(R"(root ::= "\"" [a-z]* "\"")");
  for (const char* lead : {"\"\xc2", "\"\xe0", "\"\xf0"}) EXPECT_FALSE(IsPrefix(*ascii, lead));
}

TEST(Grammar, RefusedBytesLeaveTheStateAsItWas) {
  const auto g = Must(R"(root ::= "ab" | "ac")");
  GrammarMatcher m(*g);
  ASSERT_TRUE(m.Feed('a'));
  const std::string key = m.key();
  EXPECT_FALSE(m.Feed('x'));
  EXPECT_EQ(m.key(), key);
  EXPECT_FALSE(m.FeedAll("bx"));
  EXPECT_EQ(m.key(), key);
  EXPECT_FALSE(m.accepting());
  EXPECT_TRUE(m.can_continue());
  ASSERT_TRUE(m.Feed('c'));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.can_continue());
  EXPECT_FALSE(m.bound_exceeded());
}

TEST(Grammar, AmbiguousAndRecursiveGrammarsWork) {
  // Two readings of every "a" run; nested parentheses through recursion.
  const auto g = Must(R"(
    root ::= x | y
    x ::= "a"* "b"
    y ::= "a"+ "c"?
    )");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Matches(*g, "aaab"));
  EXPECT_TRUE(Matches(*g, "aaa"));
  EXPECT_TRUE(Matches(*g, "aac"));
  GrammarMatcher m(*g);
  ASSERT_TRUE(m.FeedAll("aa"));
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.can_continue());
  const auto p = Must(R"g(root ::= "(" root* ")")g");
  ASSERT_TRUE(p);
  EXPECT_TRUE(Matches(*p, "(()(()))"));
  EXPECT_FALSE(Matches(*p, "(()"));
  EXPECT_FALSE(IsPrefix(*p, "())"));
}

TEST(Grammar, LongRepetitionsAreOneState) {
  const auto g = Must(R"(root ::= "[" ("x" ",")* "]")");
  ASSERT_TRUE(g);
  GrammarMatcher m(*g);
  ASSERT_TRUE(m.FeedAll("[x,"));
  const std::string key = m.key();
  ASSERT_TRUE(m.FeedAll("x,x,x,"));
  EXPECT_EQ(m.key(), key);
  // Right recursion does not grow the stacks either.
  const auto r = Must(R"(root ::= "a" root | "b")");
  GrammarMatcher n(*r);
  ASSERT_TRUE(n.Feed('a'));
  const std::string k2 = n.key();
  ASSERT_TRUE(n.FeedAll("aaaa"));
  EXPECT_EQ(n.key(), k2);
}

TEST(Grammar, DeepNestingIsABoundNotACrash) {
  const auto g = Must(R"g(root ::= "(" root? ")")g");
  ASSERT_TRUE(g);
  GrammarMatcher m(*g);
  bool refused = false;
  for (int i = 0; i < 5000 && !refused; ++i) refused = !m.Feed('(');
  EXPECT_TRUE(refused);
  EXPECT_TRUE(m.bound_exceeded());
}

TEST(Grammar, BadInputIsAnErrorWithLineAndColumn) {
  EXPECT_NE(ErrorOf("root ::= valu\nvalue ::= \"x\"")
                .find("line 1, column 10: rule 'valu' is "
                      "not defined"),
            std::string::npos)
      << ErrorOf("root ::= valu\nvalue ::= \"x\"");
  EXPECT_NE(ErrorOf("root ::= \"x\"\nroot ::= \"y\"")
                .find("line 2, column 1: rule 'root' is "
                      "defined twice"),
            std::string::npos);
  EXPECT_NE(ErrorOf("x ::= \"a\"").find("no rule 'root'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"abc").find("line 1, column 10"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= [abc").find("closing ']'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= (\"a\" | \"b\"").find("expected ')'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"{3,2}").find("below the minimum"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"{1000001}").find("repetition count above"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\" )").find("line 1, column 14: unexpected ')'"),
            std::string::npos)
      << ErrorOf("root ::= \"a\" )");
  EXPECT_NE(ErrorOf("root = \"a\"").find("expected '::='"), std::string::npos);
  EXPECT_NE(ErrorOf("").find("no rules"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= [^\\x00-\\U0010FFFF]").find("matches no character"),
            std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"\\uD800\"").find("not a code point UTF-8 can encode"),
            std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"\xff\"").find("invalid UTF-8"), std::string::npos);
}

TEST(Grammar, LeftRecursionAndEmptyRepetitionsAreRefusedByName) {
  const std::string lr = ErrorOf("root ::= expr\nexpr ::= term | expr \"+\" term\nterm ::= [0-9]");
  EXPECT_NE(lr.find("rule 'expr' is left-recursive (expr -> expr"), std::string::npos) << lr;
  const std::string indirect = ErrorOf("root ::= a\na ::= b? \"x\"\nb ::= c\nc ::= a \"y\"");
  EXPECT_NE(indirect.find("left-recursive"), std::string::npos) << indirect;
  EXPECT_NE(indirect.find("a -> b -> c -> a"), std::string::npos) << indirect;
  const std::string empty = ErrorOf("root ::= (\"a\"?)*");
  EXPECT_NE(empty.find("repeats a group that can match nothing"), std::string::npos) << empty;
}

TEST(Grammar, BoundsOnSize) {
  EXPECT_NE(ErrorOf(std::string(2 << 20, ' ')).find("at most"), std::string::npos);
  std::string deep = "root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')');
  EXPECT_NE(ErrorOf(deep).find("nest deeper than 64"), std::string::npos);
  auto small = Grammar::Parse("root ::= a a\na ::= \"x\" | \"y\"", {.max_rules = 1});
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("more than 1 rules"), std::string::npos);
}

// Arbitrary bytes as grammar text and as input: a Status or a matcher,
// never a crash.
TEST(Grammar, ArbitraryBytesNeverCrash) {
  util::Rng rng(7);
  const std::string alphabet = "ab()[]^-|*+?{}0123456789,:=\"\\ \n#.xyz_";
  for (int i = 0; i < 3000; ++i) {
    std::string text = "root ::= ";
    const int n = static_cast<int>(rng.Below(30));
    for (int k = 0; k < n; ++k) text += alphabet[rng.Below(alphabet.size())];
    auto g = Grammar::Parse(text);
    if (!g.ok()) continue;
    GrammarMatcher m(**g);
    for (int k = 0; k < 20; ++k) m.Feed(static_cast<uint8_t>(alphabet[rng.Below(alphabet.size())]));
  }
}

}  // namespace
}  // namespace strata::grammar
