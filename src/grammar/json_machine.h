// grammar/json_machine.h — a byte-at-a-time recognizer of one JSON value
// (RFC 8259), the state a JSON-constrained decoder keeps per choice.
//
// Promise: Feed accepts a byte exactly when the bytes fed so far, followed
// by it, are a prefix of some document the machine accepts: one JSON value
// (with Root::kObject, one object) with insignificant whitespace between
// tokens, strings of valid UTF-8 without raw control characters, escapes as
// the RFC lists them, numbers in its grammar. A refused byte leaves the
// machine as it was. complete() says a whole value was read; nothing but
// the end may follow it (no trailing whitespace, so a decoder ends there).
// Bounds keep a generated document finite in shape and its numbers within
// what every parser reads as a double (RFC 8259 §6 lets implementations
// limit range; an exponent of 3100 fails many): nesting at most kMaxDepth
// containers, at most kMaxWhitespaceRun whitespace bytes in a row, and per
// number at most kMaxIntDigits integer digits, kMaxFracDigits fraction
// digits and kMaxExpDigits exponent digits (so |x| < 1e120); past any of
// them the byte is refused (the document stays valid JSON). \u escapes of
// UTF-16 surrogates must come in high-low pairs, as in raw UTF-8 none may.
//
// The state is a small value type (no allocation): copying it to try a
// token's bytes is cheap.
//
// Threading: a value type; no shared state.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace strata::grammar {

class JsonMachine {
 public:
  enum class Root { kAnyValue, kObject };
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxWhitespaceRun = 16;
  static constexpr int kMaxIntDigits = 20;
  static constexpr int kMaxFracDigits = 20;
  static constexpr int kMaxExpDigits = 2;

  explicit JsonMachine(Root root = Root::kObject);

  // Accepts `byte` or refuses it (the state unchanged).
  bool Feed(uint8_t byte);
  // Feed without the undo: on a refusal the state is unspecified (for a
  // caller that drops the machine then, as a trie walk does its copies).
  bool FeedOrSpoil(uint8_t byte) { return Step(byte); }
  // Every byte, or none: on a refusal the state is as before the call.
  bool FeedAll(std::string_view bytes);
  // A whole value was read.
  bool complete() const;
  // Between two characters of a string: what may follow a quote, a
  // backslash or a control byte depends on the rest of the state, every
  // other byte sequence is taken or refused the same way in any such state.
  bool in_string_body() const { return lex_ == Lex::kString; }
  // The whole state as bytes: equal keys accept the same continuations.
  using Key = std::array<uint8_t, 20>;
  Key key() const;

 private:
  // What the parser expects next, outside any token.
  enum class Want : uint8_t {
    kValue,         // a value (the root, after ':' or ',' in an array)
    kValueOrClose,  // after '[': a value or ']'
    kKeyOrClose,    // after '{': a key or '}'
    kKey,           // after ',' in an object
    kColon,         // after a key
    kCommaOrClose,  // after a value inside a container
    kDone,          // the root value is complete
  };
  // The token being read.
  enum class Lex : uint8_t {
    kNone,
    kString,        // inside quotes
    kEscape,        // after a backslash
    kUnicode,       // \u and hex_left_ hex digits to go
    kLowBackslash,  // after a high surrogate's \uD8xx-\uDBxx: its low half's '\'
    kLowU,          // ... and its 'u'
    kUtf8,          // inside a multi-byte character: utf8_left_ bytes to go
    kNumSign,       // after '-'
    kNumZero,       // a leading 0
    kNumInt,        // integer digits
    kNumDot,        // after '.'
    kNumFrac,       // fraction digits
    kNumExp,        // after 'e' / 'E'
    kNumExpSign,    // after the exponent's sign
    kNumExpDigits,  // exponent digits
    kLiteral,       // true, false, null: literal_ at literal_at_
  };

  bool Step(uint8_t c);
  bool StartValue(uint8_t c);
  bool AfterValue();  // a value ended: what the container (or root) expects now
  bool Punctuation(uint8_t c);
  bool EndNumber(uint8_t c);  // c ends the number being read, then is read itself
  bool Push(bool object);
  bool top_is_object() const { return (kinds_ >> (depth_ - 1)) & 1u; }

  Root root_;
  Want want_ = Want::kValue;
  Lex lex_ = Lex::kNone;
  bool string_is_key_ = false;
  uint8_t depth_ = 0;
  uint8_t whitespace_run_ = 0;
  uint8_t hex_left_ = 0;
  // Surrogate escapes pair up (a lone half fails strict parsers): the
  // escape being read started with 'd' (0: no), is a high half (1), or must
  // be a low half (the one after a high).
  bool escape_d_ = false;
  bool escape_high_ = false;
  bool need_low_ = false;
  uint8_t utf8_left_ = 0;
  uint8_t utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // the next continuation byte's range
  uint8_t literal_at_ = 0;
  uint8_t digits_ = 0;             // digits so far in the number's current part
  const char* literal_ = nullptr;  // "true", "false" or "null" (static storage)
  uint32_t kinds_ = 0;             // bit d: the container at depth d + 1 is an object
};

}  // namespace strata::grammar
