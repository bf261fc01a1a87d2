// cache/text_normalize.h — request text → canonical words, for the L3 near-duplicate tier.
//
// Promise: NormalizeText maps any valid UTF-8 string to a sequence of tokens
// that is the same for texts differing only in Unicode form, letter case,
// whitespace or ordinary punctuation:
//  - Unicode NFKC (full-width letters, ligatures and compatibility forms fold
//    to their plain letters) with default-ignorable code points dropped, then
//    full case folding of every token (utf8proc);
//  - a token is a run of letters, marks, digits and '_'; each CJK ideograph
//    or kana is a token of its own (those scripts do not separate words);
//  - numbers keep internal '.' and ',' between digits; thousands separators
//    are dropped ("63,121" → "63121");
//  - English negative contractions become "not" ("isn't" → "is not",
//    "can't"/"cannot" → "can not", "won't" → "will not"); other apostrophes
//    split ("john's" → "john s");
//  - math, currency and other symbols (+ = < > $ € % * / ^ & | # @ \, emoji)
//    are tokens of their own, so is '-' before a digit unless a letter
//    precedes it (a sign or a minus: "-5", "7-3"; not "gpt-4" or "3-digit");
//    all other punctuation and all whitespace only separate tokens.
// Invalid UTF-8 (or input over max_input_bytes) is an InvalidArgument that
// names the byte offset; it never crashes and never reads out of bounds.
//
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace strata::cache {

enum class TokenKind : uint8_t {
  kWord,    // letters (and maybe digits: "x86", "gpt4" are words with digits)
  kNumber,  // digits only, with internal '.' or ','
  kSymbol,  // one symbol code point ("+", "$", "€", an emoji)
};

struct Token {
  std::string text;  // NFKC + case folded
  TokenKind kind = TokenKind::kWord;
  bool has_digit = false;    // contains a digit (every kNumber; words like "x86")
  bool entity_like = false;  // written with a capital that is not just the start of a
                             // sentence ("London" mid-sentence, "USA", "iPhone")
};

struct NormalizedText {
  std::vector<Token> tokens;
  // The tokens separated by single spaces ("what is 2 + 3").
  std::string Joined() const;
};

struct NormalizeOptions {
  size_t max_input_bytes = 1 << 20;  // longer input is InvalidArgument; [1, 2^30]
};

util::StatusOr<NormalizedText> NormalizeText(std::string_view utf8,
                                             const NormalizeOptions& options = {});

}  // namespace strata::cache
