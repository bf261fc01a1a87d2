// config/internal/text_screen.h — checks a TOML text before toml++ reads it.
//
// Promise: ScreenText names the first line where the text is not UTF-8, or
// holds a non-ASCII character where TOML allows none (outside strings and
// comments: bare keys, values, whitespace), or right after a backslash in a
// multi-line basic string (an escape or a line-ending backslash's
// continuation). toml++ 3.3 reaches __builtin_unreachable on many non-ASCII
// characters in those places (its non-ASCII whitespace test has no answer
// for them, e.g. U+00E9 or U+0416), which is undefined behaviour on input a
// user can write; the screen keeps such text away from it and says why.
//
// Threading: a pure function.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace strata::config::internal {

struct ScreenProblem {
  int line = 0;    // 1-based
  int column = 0;  // 1-based, in bytes
  std::string message;
};

std::optional<ScreenProblem> ScreenText(std::string_view text);

}  // namespace strata::config::internal
