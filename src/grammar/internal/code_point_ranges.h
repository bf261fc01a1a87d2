// grammar/internal/code_point_ranges.h — sets of code points as [lo, hi]
// ranges, shared by the GBNF parser and the schema compiler's regex reader.
//
// Threading: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace strata::grammar::internal {

using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

// `r` sorted, with overlapping and adjacent ranges merged.
inline CodePointRanges NormalizeRanges(CodePointRanges r) {
  std::sort(r.begin(), r.end());
  CodePointRanges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

}  // namespace strata::grammar::internal
