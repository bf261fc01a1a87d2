// backend/internal/json_scan.h — a forward reader of one JSON text, without
// a DOM: the few fields a hot path needs are read in place and everything
// else is checked and skipped (private to backend/).
//
// Promise: strict. Every read either consumes one well-formed JSON value
// (RFC 8259: no trailing commas, no leading zeros, control characters in
// strings refused, \u escapes paired into valid UTF-8, numbers within a
// double's range, as nlohmann reads them) or returns false,
// leaving the scanner in an unspecified state. A caller that gets false
// reads the text the slow way (nlohmann), which then decides what it is and
// names its fault: a false here never becomes an error by itself. Nesting
// deeper than kMaxDepth is refused. The text must be valid UTF-8 (checked by
// the caller: strings are copied byte for byte).
//
// Threading: thread-compatible; a scanner reads one text on one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::backend::upstream::internal {

class JsonScan {
 public:
  static constexpr int kMaxDepth = 48;

  explicit JsonScan(std::string_view text) : s_(text) {}

  // The next token, after white space, is `c` (consumed) / is `null`
  // (consumed).
  bool Consume(char c);
  bool ConsumeNull();
  // The next token, after white space, starts with `c` (not consumed).
  bool NextIs(char c);
  // Nothing but white space is left.
  bool AtEnd();
  // The offset of the next byte to read (before any white space).
  size_t pos() const { return i_; }
  // A string into `out` (escapes decoded).
  bool String(std::string* out);
  // A string as a view: into the text itself when it has no escape (the
  // common case: no copy), else into `scratch`, decoded. Valid until the
  // scanner or `scratch` changes.
  bool StringView(std::string* scratch, std::string_view* out);
  // An integer without fraction or exponent, in [0, 10^18).
  bool Count(int64_t* out);
  // Any value, checked and dropped.
  bool Skip() { return SkipValue(0); }

  // An object's members, after Consume('{'): each call reads the next key
  // and its ':' (then read or skip the value), or the closing '}' (consumed;
  // `*done` is then true). `*first` is the object's own state: true before
  // its first member. `*key` is valid until the next call (StringView's).
  bool NextKey(bool* first, std::string_view* key, bool* done);

 private:
  // Skips white space; most texts have none between tokens.
  void Ws() {
    if (i_ < s_.size() && static_cast<unsigned char>(s_[i_]) > ' ') return;
    SkipWs();
  }
  void SkipWs();
  bool SkipValue(int depth);
  bool SkipNumber();
  bool Literal(std::string_view word);
  bool Hex4(uint32_t* out);
  // After the opening quote: the run of plain bytes up to the next quote,
  // escape or control character (i_ at that byte).
  void PlainRun();
  // After an opening quote, the rest of a string, checked and dropped.
  bool SkipString();
  // After a backslash: one escape, appended to `out` decoded (or only
  // checked, when `out` is null).
  bool Escape(std::string* out);

  std::string_view s_;
  size_t i_ = 0;
  std::string key_;  // NextKey's, for a key with an escape
};

}  // namespace strata::backend::upstream::internal
