// tune/internal/json_lines.h — reading a JSON-lines file, for the tune
// module's readers of prompt files (tune/prompt_text.h, tune/live.h).
//
// Promise: calls `fn` with each line that is not blank (after dropping the
// trailing CR, spaces and tabs), parsed without exceptions (a line that is
// not JSON comes as a discarded value, for the caller to name), and its
// 1-based line number; stops at the first error `fn` returns.
//
// Threading: a pure function.
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace strata::tune::internal {

template <typename Fn>
util::Status ForEachJsonLine(std::string_view text, Fn&& fn) {
  int64_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.remove_suffix(1);
    }
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    STRATA_RETURN_IF_ERROR(
        fn(nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false), line_no));
  }
  return util::OkStatus();
}

}  // namespace strata::tune::internal
