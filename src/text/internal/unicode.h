// text/internal/unicode.h — the Unicode facts the BPE pre-tokenizers need
// (private to text/).
//
// Promise: code points are read from UTF-8 exactly as the reference tokenizer
// (llama.cpp's unicode.cpp) reads them, including what it does with invalid
// bytes, and classified the way its regex classes \p{L}, \p{N} and \s see
// them: letters are general categories L*, numbers N*, whitespace is the
// Unicode White_Space property. Categories come from utf8proc; the one block
// Unicode 15.1 added (which utf8proc 2.8 lacks) is patched in, so every code
// point classifies as in the reference's Unicode 15.1 tables. Characters
// assigned by later Unicode versions read as kOther until utf8proc knows them.
//
// WordPiece (wordpiece.h) also needs the general category, the first code
// point of a canonical decomposition and the simple lowercase mapping, all
// as UnicodeData.txt states them (the reference's tables come from it).
//
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace strata::text::internal {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

// One character read from UTF-8.
struct Utf8Char {
  char32_t cp = 0;  // the code point; kReplacementChar when !valid
  size_t len = 1;   // bytes consumed, 1..4 (always 1 when !valid)
  bool valid = true;
};

// Reads the character that starts at text[offset] (offset < text.size()).
// Lenient like the reference: the lead byte's high bits give the length and the
// continuation bytes must be 10xxxxxx, but overlong forms and surrogates are
// accepted. A stray continuation byte, a lead byte 0xF8..0xFF, a sequence cut
// short by the end of the text or a value above U+10FFFF is invalid: one byte
// is consumed and it reads as U+FFFD.
Utf8Char DecodeUtf8Char(std::string_view text, size_t offset);

// All characters of text, as DecodeUtf8Char reads them one after the other.
std::vector<char32_t> DecodeUtf8(std::string_view text);

// Appends the UTF-8 encoding (1..4 bytes) of cp; precondition: cp <= kMaxCodePoint.
void AppendUtf8(char32_t cp, std::string& out);

enum class CharClass : unsigned char {
  kLetter,      // \p{L}: Lu, Ll, Lt, Lm, Lo
  kNumber,      // \p{N}: Nd, Nl, No
  kWhitespace,  // \s: White_Space (U+0009..U+000D, U+0020, U+0085, Zs, Zl, Zp)
  kOther,       // everything else, unassigned code points included
};

// The class of a code point; anything above kMaxCodePoint is kOther.
CharClass Classify(char32_t cp);

// General categories, grouped as the reference's flags group them.
enum class Category : unsigned char {
  kLetter,       // L*
  kMark,         // M*
  kNumber,       // N*
  kPunctuation,  // P*
  kSymbol,       // S*
  kSeparator,    // Z*
  kControl,      // Cc, Cf, Co, Cs
  kUnassigned,   // Cn, and anything above kMaxCodePoint
};
Category CategoryOf(char32_t cp);

// The first code point of cp's full canonical decomposition (NFD); cp itself
// when it has none.
char32_t FirstOfDecomposition(char32_t cp);

// The simple (one code point) lowercase mapping; cp itself when it has none.
char32_t SimpleLowercase(char32_t cp);

}  // namespace strata::text::internal
