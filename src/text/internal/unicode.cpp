#include "text/internal/unicode.h"

#include <utf8proc.h>

#include <array>

namespace strata::text::internal {
namespace {

constexpr bool IsContinuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// ASCII is by far the most common input: classify it without a table lookup in
// utf8proc. Built from the same rules Classify applies to the rest.
constexpr std::array<CharClass, 128> MakeAsciiClasses() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) {
      t[c] = CharClass::kLetter;
    } else if (c >= '0' && c <= '9') {
      t[c] = CharClass::kNumber;
    } else if ((c >= 0x09 && c <= 0x0D) || c == 0x20) {
      t[c] = CharClass::kWhitespace;
    } else {
      t[c] = CharClass::kOther;
    }
  }
  return t;
}
constexpr std::array<CharClass, 128> kAsciiClasses = MakeAsciiClasses();

}  // namespace

Utf8Char DecodeUtf8Char(std::string_view text, size_t offset) {
  constexpr Utf8Char kInvalid{kReplacementChar, 1, false};
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[offset + i]); };
  const unsigned char lead = byte(0);
  size_t len = 0;
  char32_t cp = 0;
  if (lead < 0x80) return Utf8Char{lead, 1, true};
  if ((lead & 0xE0) == 0xC0) {
    len = 2;
    cp = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    len = 3;
    cp = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    len = 4;
    cp = lead & 0x07;
  } else {
    return kInvalid;  // a continuation byte or 0xF8..0xFF
  }
  if (text.size() - offset < len) return kInvalid;
  for (size_t i = 1; i < len; ++i) {
    if (!IsContinuation(byte(i))) return kInvalid;
    cp = (cp << 6) | (byte(i) & 0x3F);
  }
  // The reference cannot re-encode these (it throws); treat them as invalid.
  if (cp > kMaxCodePoint) return kInvalid;
  return Utf8Char{cp, len, true};
}

std::vector<char32_t> DecodeUtf8(std::string_view text) {
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = DecodeUtf8Char(text, i);
    cps.push_back(c.cp);
    i += c.len;
  }
  return cps;
}

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

CharClass Classify(char32_t cp) {
  if (cp < 0x80) return kAsciiClasses[cp];
  if (cp > kMaxCodePoint) return CharClass::kOther;
  // White_Space outside ASCII: U+0085 (a Cc) and the separators Zs, Zl, Zp
  // (exactly U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F,
  // U+3000 since Unicode 6.3).
  if (cp == 0x85) return CharClass::kWhitespace;
  switch (CategoryOf(cp)) {
    case Category::kLetter:
      return CharClass::kLetter;
    case Category::kNumber:
      return CharClass::kNumber;
    case Category::kSeparator:
      return CharClass::kWhitespace;
    default:
      return CharClass::kOther;
  }
}

Category CategoryOf(char32_t cp) {
  if (cp > kMaxCodePoint) return Category::kUnassigned;
  // CJK Unified Ideographs Extension I (Lo since Unicode 15.1), which the
  // reference's tables have and utf8proc 2.8 (Unicode 15.0) does not.
  if (cp >= 0x2EBF0 && cp <= 0x2EE5D) return Category::kLetter;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return Category::kLetter;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
      return Category::kMark;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return Category::kNumber;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return Category::kPunctuation;
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
      return Category::kSymbol;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return Category::kSeparator;
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CS:
      return Category::kControl;
    default:
      return Category::kUnassigned;
  }
}

char32_t FirstOfDecomposition(char32_t cp) {
  if (cp < 0xC0 || cp > kMaxCodePoint) return cp;  // nothing below U+00C0 decomposes
  utf8proc_int32_t buf[8];
  int last_boundclass = 0;
  const utf8proc_ssize_t n =
      utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 8,
                              static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE), &last_boundclass);
  return n >= 1 ? static_cast<char32_t>(buf[0]) : cp;
}

char32_t SimpleLowercase(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + ('a' - 'A') : cp;
  if (cp > kMaxCodePoint) return cp;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}

}  // namespace strata::text::internal
