#include "config/internal/text_screen.h"

#include <algorithm>

#include "util/utf8.h"

namespace strata::config::internal {
namespace {

enum class State { kCode, kComment, kBasic, kMultiBasic, kLiteral, kMultiLiteral };

bool IsAscii(char c) { return static_cast<unsigned char>(c) < 0x80; }

// Walks the text once, tracking line and column, in the states TOML's
// lexical grammar has. Strings and comments may hold any character; the
// rest of the grammar is ASCII.
class Screen {
 public:
  explicit Screen(std::string_view text) : text_(text) {}

  std::optional<ScreenProblem> Run() {
    while (i_ < text_.size()) {
      const char c = text_[i_];
      switch (state_) {
        case State::kCode:
          if (!IsAscii(c)) {
            return Problem(
                "a non-ASCII character outside a string or a comment (TOML keys and values "
                "other than strings are ASCII)");
          }
          if (c == '#') {
            state_ = State::kComment;
          } else if (c == '"' || c == '\'') {
            state_ = OpenString(c);
            continue;
          }
          break;
        case State::kComment:
          if (c == '\n') state_ = State::kCode;
          break;
        case State::kBasic:
          if (c == '\\') {
            Advance();  // the escaped character: any one is skipped (toml++ rejects bad ones)
            if (i_ >= text_.size()) return std::nullopt;
            if (text_[i_] == '\n') state_ = State::kCode;  // toml++ stops there
          } else if (c == '"' || c == '\n') {
            state_ = State::kCode;
          }
          break;
        case State::kLiteral:
          if (c == '\'' || c == '\n') state_ = State::kCode;
          break;
        case State::kMultiBasic:
          if (c == '\\') {
            Advance();
            if (auto p = AfterMultiLineBackslash()) return p;
            continue;
          }
          if (c == '"') {
            if (CloseRun('"')) state_ = State::kCode;
            continue;  // CloseRun consumed the quotes
          }
          break;
        case State::kMultiLiteral:
          if (c == '\'') {
            if (CloseRun('\'')) state_ = State::kCode;
            continue;  // CloseRun consumed the quotes
          }
          break;
      }
      Advance();
    }
    return std::nullopt;
  }

 private:
  std::optional<ScreenProblem> Problem(std::string message) const {
    return ScreenProblem{.line = line_, .column = column_, .message = std::move(message)};
  }

  void Advance() {
    if (text_[i_] == '\n') {
      ++line_;
      column_ = 1;
    } else if ((static_cast<unsigned char>(text_[i_]) & 0xC0) != 0x80) {
      ++column_;  // continuation bytes belong to their character's column
    }
    ++i_;
  }

  // At a quote in code: consumes the opening delimiter and says what
  // follows: a multi-line string (three quotes), code again (two: an empty
  // string), or a single-line string.
  State OpenString(char q) {
    size_t n = 0;
    while (i_ + n < text_.size() && text_[i_ + n] == q && n < 3) ++n;
    for (size_t k = 0; k < n; ++k) Advance();
    if (n == 2) return State::kCode;
    if (q == '"') return n == 3 ? State::kMultiBasic : State::kBasic;
    return n == 3 ? State::kMultiLiteral : State::kLiteral;
  }

  // At a quote inside a multi-line string: a run of three to five closes
  // it (up to two quotes may end the content), fewer are content. Consumes
  // the run either way; says whether it closed the string.
  bool CloseRun(char q) {
    size_t n = 0;
    while (i_ + n < text_.size() && text_[i_ + n] == q) ++n;
    const size_t take = n >= 3 ? std::min<size_t>(n, 5) : n;
    for (size_t k = 0; k < take; ++k) Advance();
    return n >= 3;
  }

  // After a backslash in a multi-line basic string: toml++ asks whether the
  // next character is whitespace (a line-ending backslash), and, when it
  // was, asks the same of each following character until the first that is
  // not. Those characters must be ASCII.
  std::optional<ScreenProblem> AfterMultiLineBackslash() {
    if (i_ >= text_.size()) return std::nullopt;
    if (!IsAscii(text_[i_])) {
      return Problem("a non-ASCII character right after a backslash in a multi-line string");
    }
    const char c = text_[i_];
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
      Advance();  // an ordinary escape's character
      return std::nullopt;
    }
    while (i_ < text_.size() &&
           (text_[i_] == ' ' || text_[i_] == '\t' || text_[i_] == '\r' || text_[i_] == '\n')) {
      Advance();
    }
    if (i_ < text_.size() && !IsAscii(text_[i_])) {
      return Problem(
          "a line continued by a backslash in a multi-line string starts with a non-ASCII "
          "character, which this reader cannot take there; begin the continued line with an "
          "ASCII character or drop the backslash");
    }
    return std::nullopt;
  }

  std::string_view text_;
  size_t i_ = 0;
  int line_ = 1;
  int column_ = 1;
  State state_ = State::kCode;
};

}  // namespace

std::optional<ScreenProblem> ScreenText(std::string_view text) {
  int line = 1;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (!util::IsValidUtf8(text.substr(start, end - start))) {
      return ScreenProblem{.line = line, .column = 0, .message = "the file is not valid UTF-8"};
    }
    start = end + 1;
    ++line;
  }
  return Screen(text).Run();
}

}  // namespace strata::config::internal
