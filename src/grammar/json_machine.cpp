#include "grammar/json_machine.h"

namespace strata::grammar {
namespace {

bool IsWhitespace(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

JsonMachine::JsonMachine(Root root) : root_(root) {}

bool JsonMachine::Feed(uint8_t byte) {
  const JsonMachine before = *this;
  if (Step(byte)) return true;
  *this = before;
  return false;
}

bool JsonMachine::FeedAll(std::string_view bytes) {
  const JsonMachine before = *this;
  for (const char c : bytes) {
    if (!Step(static_cast<uint8_t>(c))) {
      *this = before;
      return false;
    }
  }
  return true;
}

JsonMachine::Key JsonMachine::key() const {
  const uint8_t literal = literal_ == nullptr ? 0 : static_cast<uint8_t>(literal_[0]);
  // Only the open containers' kinds count (bits past the depth are stale).
  const uint32_t kinds = depth_ >= 32 ? kinds_ : kinds_ & ((1u << depth_) - 1u);
  return {static_cast<uint8_t>(root_),
          static_cast<uint8_t>(want_),
          static_cast<uint8_t>(lex_),
          static_cast<uint8_t>(string_is_key_),
          depth_,
          whitespace_run_,
          hex_left_,
          utf8_left_,
          utf8_lo_,
          utf8_hi_,
          literal_at_,
          literal,
          static_cast<uint8_t>(kinds),
          static_cast<uint8_t>(kinds >> 8),
          static_cast<uint8_t>(kinds >> 16),
          static_cast<uint8_t>(kinds >> 24),
          digits_,
          static_cast<uint8_t>(escape_d_),
          static_cast<uint8_t>(escape_high_),
          static_cast<uint8_t>(need_low_)};
}

bool JsonMachine::complete() const {
  if (want_ == Want::kDone && lex_ == Lex::kNone) return true;
  // A number at the root ends only with the document.
  if (depth_ == 0 && want_ == Want::kValue) {
    return lex_ == Lex::kNumZero || lex_ == Lex::kNumInt || lex_ == Lex::kNumFrac ||
           lex_ == Lex::kNumExpDigits;
  }
  return false;
}

bool JsonMachine::Push(bool object) {
  if (depth_ >= kMaxDepth) return false;
  if (object) {
    kinds_ |= 1u << depth_;
  } else {
    kinds_ &= ~(1u << depth_);
  }
  ++depth_;
  want_ = object ? Want::kKeyOrClose : Want::kValueOrClose;
  return true;
}

bool JsonMachine::AfterValue() {
  want_ = depth_ == 0 ? Want::kDone : Want::kCommaOrClose;
  return true;
}

bool JsonMachine::StartValue(uint8_t c) {
  if (depth_ == 0 && root_ == Root::kObject && c != '{') return false;
  switch (c) {
    case '{':
      return Push(true);
    case '[':
      return Push(false);
    case '"':
      lex_ = Lex::kString;
      string_is_key_ = false;
      return true;
    case '-':
      lex_ = Lex::kNumSign;
      digits_ = 0;
      return true;
    case '0':
      lex_ = Lex::kNumZero;
      digits_ = 1;
      return true;
    case 't':
      literal_ = "true";
      break;
    case 'f':
      literal_ = "false";
      break;
    case 'n':
      literal_ = "null";
      break;
    default:
      if (c >= '1' && c <= '9') {
        lex_ = Lex::kNumInt;
        digits_ = 1;
        return true;
      }
      return false;
  }
  lex_ = Lex::kLiteral;
  literal_at_ = 1;
  return true;
}

// A byte outside any token: whitespace, or what the parser expects.
bool JsonMachine::Punctuation(uint8_t c) {
  if (IsWhitespace(c)) {
    if (want_ == Want::kDone) return false;  // nothing follows the document
    if (whitespace_run_ >= kMaxWhitespaceRun) return false;
    ++whitespace_run_;
    return true;
  }
  whitespace_run_ = 0;
  switch (want_) {
    case Want::kDone:
      return false;
    case Want::kValue:
      return StartValue(c);
    case Want::kValueOrClose:
      if (c == ']') {
        --depth_;
        return AfterValue();
      }
      want_ = Want::kValue;
      return StartValue(c);
    case Want::kKeyOrClose:
    case Want::kKey:
      if (c == '}' && want_ == Want::kKeyOrClose) {
        --depth_;
        return AfterValue();
      }
      if (c != '"') return false;
      lex_ = Lex::kString;
      string_is_key_ = true;
      return true;
    case Want::kColon:
      if (c != ':') return false;
      want_ = Want::kValue;
      return true;
    case Want::kCommaOrClose:
      if (c == ',') {
        want_ = top_is_object() ? Want::kKey : Want::kValue;
        return true;
      }
      if (c == (top_is_object() ? '}' : ']')) {
        --depth_;
        return AfterValue();
      }
      return false;
  }
  return false;
}

bool JsonMachine::EndNumber(uint8_t c) {
  lex_ = Lex::kNone;
  AfterValue();
  return Punctuation(c);
}

bool JsonMachine::Step(uint8_t c) {
  switch (lex_) {
    case Lex::kNone:
      return Punctuation(c);
    case Lex::kString:
      if (c == '"') {
        lex_ = Lex::kNone;
        if (string_is_key_) {
          want_ = Want::kColon;
          return true;
        }
        return AfterValue();
      }
      if (c == '\\') {
        lex_ = Lex::kEscape;
        return true;
      }
      if (c < 0x20) return false;  // raw control characters are not allowed
      if (c < 0x80) return true;
      // UTF-8: the lead byte fixes the length and the first continuation's
      // range (no overlong forms, no surrogates, nothing past U+10FFFF).
      utf8_lo_ = 0x80;
      utf8_hi_ = 0xBF;
      if (c >= 0xC2 && c <= 0xDF) {
        utf8_left_ = 1;
      } else if (c >= 0xE0 && c <= 0xEF) {
        utf8_left_ = 2;
        if (c == 0xE0) utf8_lo_ = 0xA0;
        if (c == 0xED) utf8_hi_ = 0x9F;
      } else if (c >= 0xF0 && c <= 0xF4) {
        utf8_left_ = 3;
        if (c == 0xF0) utf8_lo_ = 0x90;
        if (c == 0xF4) utf8_hi_ = 0x8F;
      } else {
        return false;
      }
      lex_ = Lex::kUtf8;
      return true;
    case Lex::kUtf8:
      if (c < utf8_lo_ || c > utf8_hi_) return false;
      utf8_lo_ = 0x80;
      utf8_hi_ = 0xBF;
      if (--utf8_left_ == 0) lex_ = Lex::kString;
      return true;
    case Lex::kEscape:
      if (c == 'u') {
        lex_ = Lex::kUnicode;
        hex_left_ = 4;
        escape_d_ = escape_high_ = need_low_ = false;
        return true;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
          c == 't') {
        lex_ = Lex::kString;
        return true;
      }
      return false;
    case Lex::kUnicode: {
      if (!IsHex(c)) return false;
      const int at = 4 - hex_left_;  // which of the four digits this is
      const bool d = c == 'd' || c == 'D';
      if (at == 0) {
        if (need_low_ && !d) return false;
        escape_d_ = d;
      } else if (at == 1 && escape_d_) {
        // U+D800-DBFF is a high half, U+DC00-DFFF a low one.
        const bool low = (c >= 'c' && c <= 'f') || (c >= 'C' && c <= 'F');
        if (low != need_low_) return false;  // a lone low half, or no low where one must be
        escape_high_ = (c >= '8' && c <= '9') || (c >= 'a' && c <= 'b') || (c >= 'A' && c <= 'B');
      } else if (at == 1 && need_low_) {
        return false;
      }
      if (--hex_left_ == 0) {
        lex_ = escape_high_ ? Lex::kLowBackslash : Lex::kString;
        need_low_ = false;
        escape_d_ = false;
      }
      return true;
    }
    case Lex::kLowBackslash:
      if (c != '\\') return false;
      lex_ = Lex::kLowU;
      return true;
    case Lex::kLowU:
      if (c != 'u') return false;
      lex_ = Lex::kUnicode;
      hex_left_ = 4;
      escape_d_ = escape_high_ = false;
      need_low_ = true;
      return true;
    case Lex::kNumSign:
      if (c == '0') {
        lex_ = Lex::kNumZero;
        digits_ = 1;
        return true;
      }
      if (c >= '1' && c <= '9') {
        lex_ = Lex::kNumInt;
        digits_ = 1;
        return true;
      }
      return false;
    case Lex::kNumZero:
    case Lex::kNumInt:
      if (IsDigit(c) && lex_ == Lex::kNumInt) return ++digits_ <= kMaxIntDigits;
      if (c == '.') {
        lex_ = Lex::kNumDot;
        digits_ = 0;
        return true;
      }
      if (c == 'e' || c == 'E') {
        lex_ = Lex::kNumExp;
        digits_ = 0;
        return true;
      }
      return EndNumber(c);
    case Lex::kNumDot:
      if (!IsDigit(c)) return false;
      lex_ = Lex::kNumFrac;
      digits_ = 1;
      return true;
    case Lex::kNumFrac:
      if (IsDigit(c)) return ++digits_ <= kMaxFracDigits;
      if (c == 'e' || c == 'E') {
        lex_ = Lex::kNumExp;
        digits_ = 0;
        return true;
      }
      return EndNumber(c);
    case Lex::kNumExp:
      if (c == '+' || c == '-') {
        lex_ = Lex::kNumExpSign;
        return true;
      }
      if (!IsDigit(c)) return false;
      lex_ = Lex::kNumExpDigits;
      digits_ = 1;
      return true;
    case Lex::kNumExpSign:
      if (!IsDigit(c)) return false;
      lex_ = Lex::kNumExpDigits;
      digits_ = 1;
      return true;
    case Lex::kNumExpDigits:
      if (IsDigit(c)) return ++digits_ <= kMaxExpDigits;
      return EndNumber(c);
    case Lex::kLiteral:
      if (static_cast<char>(c) != literal_[literal_at_]) return false;
      if (literal_[++literal_at_] == '\0') {
        lex_ = Lex::kNone;
        return AfterValue();
      }
      return true;
  }
  return false;
}

}  // namespace strata::grammar
