#include "backend/internal/json_scan.h"

#include <cmath>
#include <cstdlib>

#include "util/utf8.h"

namespace strata::backend::upstream::internal {
namespace {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

void JsonScan::SkipWs() {
  while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) {
    ++i_;
  }
}

bool JsonScan::Consume(char c) {
  Ws();
  if (i_ >= s_.size() || s_[i_] != c) return false;
  ++i_;
  return true;
}

bool JsonScan::ConsumeNull() {
  Ws();
  if (s_.substr(i_, 4) != "null") return false;
  i_ += 4;
  return true;
}

bool JsonScan::NextIs(char c) {
  Ws();
  return i_ < s_.size() && s_[i_] == c;
}

bool JsonScan::AtEnd() {
  Ws();
  return i_ == s_.size();
}

bool JsonScan::Literal(std::string_view word) {
  if (s_.substr(i_, word.size()) != word) return false;
  i_ += word.size();
  return true;
}

bool JsonScan::Hex4(uint32_t* out) {
  if (i_ + 4 > s_.size()) return false;
  uint32_t v = 0;
  for (int k = 0; k < 4; ++k) {
    const char c = s_[i_++];
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      v |= static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      v |= static_cast<uint32_t>(c - 'A' + 10);
    } else {
      return false;
    }
  }
  *out = v;
  return true;
}

void JsonScan::PlainRun() { i_ = util::FindJsonSpecial(s_, i_); }

bool JsonScan::Escape(std::string* out) {
  if (i_ >= s_.size()) return false;
  char decoded = 0;
  switch (s_[i_++]) {
    case '"':
      decoded = '"';
      break;
    case '\\':
      decoded = '\\';
      break;
    case '/':
      decoded = '/';
      break;
    case 'b':
      decoded = '\b';
      break;
    case 'f':
      decoded = '\f';
      break;
    case 'n':
      decoded = '\n';
      break;
    case 'r':
      decoded = '\r';
      break;
    case 't':
      decoded = '\t';
      break;
    case 'u': {
      uint32_t cp = 0;
      if (!Hex4(&cp)) return false;
      if (cp >= 0xDC00 && cp <= 0xDFFF) return false;  // a lone low surrogate
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t low = 0;
        if (!Literal("\\u") || !Hex4(&low) || low < 0xDC00 || low > 0xDFFF) return false;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
      }
      if (out != nullptr) AppendUtf8(cp, out);
      return true;
    }
    default:
      return false;
  }
  if (out != nullptr) out->push_back(decoded);
  return true;
}

bool JsonScan::String(std::string* out) {
  Ws();
  if (i_ >= s_.size() || s_[i_] != '"') return false;
  ++i_;
  out->clear();
  while (true) {
    const size_t start = i_;
    PlainRun();
    out->append(s_.data() + start, i_ - start);
    if (i_ >= s_.size()) return false;
    const char c = s_[i_++];
    if (c == '"') return true;
    if (c != '\\' || !Escape(out)) return false;  // a raw control character, a bad escape
  }
}

bool JsonScan::StringView(std::string* scratch, std::string_view* out) {
  Ws();
  if (i_ >= s_.size() || s_[i_] != '"') return false;
  const size_t open = i_;
  ++i_;
  PlainRun();
  if (i_ < s_.size() && s_[i_] == '"') {
    *out = s_.substr(open + 1, i_ - open - 1);
    ++i_;
    return true;
  }
  i_ = open;  // an escape (or a fault): the decoding reader
  if (!String(scratch)) return false;
  *out = *scratch;
  return true;
}

bool JsonScan::SkipString() {
  while (true) {
    PlainRun();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_++];
    if (c == '"') return true;
    if (c != '\\' || !Escape(nullptr)) return false;
  }
}

bool JsonScan::Count(int64_t* out) {
  Ws();
  const size_t start = i_;
  int64_t v = 0;
  while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
    if (i_ - start >= 18) return false;
    v = v * 10 + (s_[i_] - '0');
    ++i_;
  }
  const size_t n = i_ - start;
  if (n == 0 || (n > 1 && s_[start] == '0')) return false;
  if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) return false;
  *out = v;
  return true;
}

bool JsonScan::SkipNumber() {
  const size_t start = i_;
  if (i_ < s_.size() && s_[i_] == '-') ++i_;
  const size_t int_start = i_;
  while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
  const size_t n = i_ - int_start;
  if (n == 0 || (n > 1 && s_[int_start] == '0')) return false;
  if (i_ < s_.size() && s_[i_] == '.') {
    ++i_;
    const size_t f = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    if (i_ == f) return false;
  }
  if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
    ++i_;
    if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
    const size_t e = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    if (i_ == e) return false;
  }
  // nlohmann refuses a number beyond a double's range ("17e999"): so does
  // this, for one that could be (a fraction, an exponent or many digits).
  if (i_ - start > 18 ||
      s_.substr(start, i_ - start).find_first_of(".eE") != std::string_view::npos) {
    const std::string number(s_.substr(start, i_ - start));
    if (!std::isfinite(std::strtod(number.c_str(), nullptr))) return false;
  }
  return true;
}

bool JsonScan::SkipValue(int depth) {
  Ws();
  if (i_ >= s_.size()) return false;
  const char c = s_[i_];
  if (c == '"') {
    ++i_;
    return SkipString();
  }
  if (c == '{' || c == '[') {
    if (depth + 1 > kMaxDepth) return false;
    const char close = c == '{' ? '}' : ']';
    ++i_;
    Ws();
    if (i_ < s_.size() && s_[i_] == close) {
      ++i_;
      return true;
    }
    while (true) {
      if (c == '{') {
        Ws();
        if (i_ >= s_.size() || s_[i_] != '"') return false;
        ++i_;
        if (!SkipString() || !Consume(':')) return false;
      }
      if (!SkipValue(depth + 1)) return false;
      Ws();
      if (i_ >= s_.size()) return false;
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] != close) return false;
      ++i_;
      return true;
    }
  }
  if (c == 't') return Literal("true");
  if (c == 'f') return Literal("false");
  if (c == 'n') return Literal("null");
  return SkipNumber();
}

bool JsonScan::NextKey(bool* first, std::string_view* key, bool* done) {
  Ws();
  if (i_ >= s_.size()) return false;
  if (s_[i_] == '}') {
    ++i_;
    *done = true;
    return true;
  }
  if (!*first) {
    if (s_[i_] != ',') return false;
    ++i_;
  }
  *first = false;
  *done = false;
  return StringView(&key_, key) && Consume(':');
}

}  // namespace strata::backend::upstream::internal
