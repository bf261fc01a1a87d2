#include "cache/text_normalize.h"

#include <gtest/gtest.h>

#include <string>

namespace strata::cache {
namespace {

std::string Norm(std::string_view s) {
  auto r = NormalizeText(s);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->Joined() : std::string("<error>");
}

TEST(NormalizeText, FoldsFullWidthLettersAndLigaturesToPlainLetters) {
  EXPECT_EQ(Norm("\xEF\xBC\xA8\xEF\xBD\x85\xEF\xBD\x8C\xEF\xBD\x8C\xEF\xBD\x8F"),
            "hello");                                             // Ｈｅｌｌｏ
  EXPECT_EQ(Norm("\xEF\xAC\x81le \xEF\xAC\x82ow"), "file flow");  // ﬁle ﬂow
  EXPECT_EQ(Norm("\xE2\x91\xA0 \xE2\x85\xAB"), "1 xii");          // ① Ⅻ
  EXPECT_EQ(Norm("x\xC2\xB2"), "x2");                             // x²
}

TEST(NormalizeText, FoldsCaseIncludingFullCaseFolding) {
  EXPECT_EQ(Norm("HeLLo WORLD"), "hello world");
  EXPECT_EQ(Norm("Stra\xC3\x9F"
                 "e"),
            "strasse");                                        // Straße
  EXPECT_EQ(Norm("\xC3\x89T\xC3\x89"), "\xC3\xA9t\xC3\xA9");   // ÉTÉ → été
  EXPECT_EQ(Norm("e\xCC\x81t\xC3\xA9"), "\xC3\xA9t\xC3\xA9");  // decomposed é composes
}

TEST(NormalizeText, CollapsesEveryKindOfWhitespace) {
  EXPECT_EQ(Norm("  a \t\n b\r\n\n  c  "), "a b c");
  EXPECT_EQ(Norm("a\xC2\xA0"
                 "b\xE2\x80\x83"
                 "c"),
            "a b c");                              // NBSP, EM SPACE
  EXPECT_EQ(Norm(std::string("a\0b", 3)), "a b");  // control characters separate
}

TEST(NormalizeText, DropsDefaultIgnorableCodePoints) {
  EXPECT_EQ(Norm("co\xC2\xADoperate"), "cooperate");  // soft hyphen
  EXPECT_EQ(Norm("zero\xE2\x80\x8Bwidth"), "zerowidth");
}

TEST(NormalizeText, PunctuationSeparatesButSymbolsAreTokens) {
  EXPECT_EQ(Norm("Hello, world!!! (test) \"quoted\" -- ok..."), "hello world test quoted ok");
  EXPECT_EQ(Norm("What is 2+3?"), "what is 2 + 3");
  EXPECT_EQ(Norm("What is 2 * 3?"), "what is 2 * 3");
  EXPECT_EQ(Norm("It costs $5 or 5\xE2\x82\xAC (50%)"), "it costs $ 5 or 5 \xE2\x82\xAC 50 %");
  EXPECT_EQ(Norm("state-of-the-art"), "state of the art");
  EXPECT_EQ(Norm("x = -5; 7-3"), "x = - 5 7 - 3");
  EXPECT_EQ(Norm("a 3-digit number, gpt-4"), "a 3 digit number gpt 4");
  EXPECT_EQ(Norm("snake_case_name"), "snake_case_name");
}

TEST(NormalizeText, NumbersKeepDecimalsAndDropThousandsSeparators) {
  EXPECT_EQ(Norm("pi is 3.14, not 3."), "pi is 3.14 not 3");
  EXPECT_EQ(Norm("$ 63,121 and 1,234,567.89 but 1,5 and 12,34"),
            "$ 63121 and 1234567.89 but 1,5 and 12,34");
  auto r = NormalizeText("x86 has 64 bits");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->tokens.size(), 4u);
  EXPECT_EQ(r->tokens[0].kind, TokenKind::kWord);
  EXPECT_TRUE(r->tokens[0].has_digit);
  EXPECT_EQ(r->tokens[2].kind, TokenKind::kNumber);
  EXPECT_FALSE(r->tokens[3].has_digit);
}

TEST(NormalizeText, ExpandsNegativeContractions) {
  EXPECT_EQ(Norm("isn't can't won't cannot don\xE2\x80\x99t"),
            "is not can not will not can not do not");
  EXPECT_EQ(Norm("John's car"), "john s car");
  EXPECT_EQ(Norm("'quoted'"), "quoted");
}

TEST(NormalizeText, CjkCharactersAreTokensOfTheirOwn) {
  auto r =
      NormalizeText("\xE6\x9D\xB1\xE4\xBA\xAC\xE3\x82\xBF\xE3\x83\xAF\xE3\x83\xBC");  // 東京タワー
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens.size(), 5u);
}

TEST(NormalizeText, MarksNamesButNotSentenceStartsOrFunctionWords) {
  auto r = NormalizeText("London is big. I think I live in London, USA and use an iPhone");
  ASSERT_TRUE(r.ok());
  std::string entities;
  for (const Token& t : r->tokens) {
    if (t.entity_like) entities += t.text + " ";
  }
  // "London" opens the text and "I" is a function word; the later London,
  // USA and iPhone are names.
  EXPECT_EQ(entities, "london usa iphone ");
}

TEST(NormalizeText, EmptyAndPunctuationOnlyTextsHaveNoTokens) {
  EXPECT_TRUE(NormalizeText("")->tokens.empty());
  EXPECT_TRUE(NormalizeText(" ?!... ")->tokens.empty());
}

TEST(NormalizeText, InvalidUtf8IsAnErrorThatNamesTheOffset) {
  for (const std::string& bad :
       {std::string("ab\xFF"), std::string("ab\xE2\x82"), std::string("ab\xC0\xAF"),
        std::string("ab\xED\xA0\x80"), std::string("ab\xF4\x90\x80\x80"), std::string("ab\x80")}) {
    auto r = NormalizeText(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), util::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("byte 2"), std::string::npos) << r.status().message();
  }
}

TEST(NormalizeText, InputOverTheLimitIsAnError) {
  NormalizeOptions o;
  o.max_input_bytes = 99;
  auto r = NormalizeText(std::string(100, 'a'), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), util::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cache
