#include "util/utf8.h"

namespace strata::util {
namespace {

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
    size_t ascii = i;
    while (ascii < bytes.size() && static_cast<unsigned char>(bytes[ascii]) < 0x80) ++ascii;
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

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
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
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
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
