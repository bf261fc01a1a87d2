#include "util/utf8.h"

#include <bit>
#include <cstdint>
#include <cstring>

namespace strata::util {
namespace {

constexpr uint64_t kOnes = 0x0101010101010101ULL;
constexpr uint64_t kHighs = 0x8080808080808080ULL;

uint64_t Load8(const char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

// A high bit in each byte of `w` that is zero. A borrow runs only upward
// from a zero byte, so a false flag (a 0x01 byte) lies above a true one: the
// lowest flag is exact.
uint64_t ZeroBytes(uint64_t w) { return (w - kOnes) & ~w & kHighs; }

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Length of the valid sequence at s[i], 0 if invalid, -1 if valid so far but cut
// off by the end of the input.
int ValidSequenceAt(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  int len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    if (i + static_cast<size_t>(k) >= s.size()) return -1;
    const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return 0;
  }
  return len;
}

}  // namespace

Utf8Split SplitCompleteUtf8(std::string_view bytes) {
  Utf8Split out;
  out.complete.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    // A run of ASCII (most text) goes in one append.
    const size_t ascii = FindNonAscii(bytes, i);
    if (ascii > i) {
      out.complete.append(bytes.substr(i, ascii - i));
      i = ascii;
      continue;
    }
    const int n = ValidSequenceAt(bytes, i);
    if (n > 0) {
      out.complete.append(bytes.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else if (n < 0) {
      out.tail.assign(bytes.substr(i));
      break;
    } else {
      out.complete.append(kReplacement);
      ++i;
    }
  }
  return out;
}

std::string SanitizeUtf8(std::string_view bytes) {
  Utf8Split split = SplitCompleteUtf8(bytes);
  if (!split.tail.empty()) split.complete.append(kReplacement);
  return std::move(split.complete);
}

// Words are read little-endian (byte k of a word at bits 8k..8k+7): the
// lowest flag is then the first byte in memory. Elsewhere the scans go
// byte by byte.
constexpr bool kWordScan = std::endian::native == std::endian::little;

// The index in its word of the first byte flagged in `mask`.
size_t FirstFlagged(uint64_t mask) { return static_cast<size_t>(std::countr_zero(mask)) / 8; }

size_t FindNonAscii(std::string_view s, size_t from) {
  size_t i = from;
  for (; kWordScan && i + 8 <= s.size(); i += 8) {
    const uint64_t mask = Load8(s.data() + i) & kHighs;
    if (mask != 0) return i + FirstFlagged(mask);
  }
  while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80) ++i;
  return i;
}

size_t FindJsonSpecial(std::string_view s, size_t from) {
  size_t i = from;
  for (; kWordScan && i + 8 <= s.size(); i += 8) {
    const uint64_t w = Load8(s.data() + i);
    // A byte below 0x20: (w - 0x20 per byte) & ~w flags it, as ZeroBytes
    // flags a zero byte (a false flag only ever lies above a true one).
    const uint64_t control = (w - 0x20 * kOnes) & ~w & kHighs;
    const uint64_t mask = control | ZeroBytes(w ^ ('"' * kOnes)) | ZeroBytes(w ^ ('\\' * kOnes));
    if (mask != 0) return i + FirstFlagged(mask);
  }
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\' || c < 0x20) break;
    ++i;
  }
  return i;
}

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  while (true) {
    i = FindNonAscii(bytes, i);
    if (i == bytes.size()) break;
    const int n = ValidSequenceAt(bytes, i);
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

bool AppendJsonString(std::string& out, std::string_view s) {
  if (!IsValidUtf8(s)) return false;
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  size_t plain = 0;  // start of the run not yet appended
  for (size_t i = FindJsonSpecial(s, 0); i < s.size(); i = FindJsonSpecial(s, i + 1)) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out.append(s.data() + plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += "\\u00";
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 15]);
        break;
    }
  }
  out.append(s.data() + plain, s.size() - plain);
  out.push_back('"');
  return true;
}

}  // namespace strata::util
