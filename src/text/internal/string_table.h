// text/internal/string_table.h — many short strings in one block of memory,
// with lookup by text.
//
// Promise: the strings live in one byte arena with one 4-byte offset each,
// and Find uses an open-addressing table of ids (load ≤ 0.75), so a
// 150k-entry vocabulary takes ~2.5 MB instead of the ~20 MB of std::string
// objects and hash-map nodes. The first of duplicate strings wins in Find.
//
// Threading: built once by one thread, then immutable and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::text::internal {

class StringTable {
 public:
  // Appends s as entry size(); false (and nothing appended) when the arena
  // would pass 4 GiB or the table 2^31 entries.
  bool Append(std::string_view s);
  // Makes Find work for everything appended so far; call once, after the last
  // Append. A table without an index still serves operator[].
  void BuildIndex();

  int32_t size() const { return static_cast<int32_t>(offsets_.size() - 1); }
  std::string_view operator[](int32_t i) const {
    const uint32_t begin = offsets_[static_cast<size_t>(i)];
    return std::string_view(bytes_).substr(begin, offsets_[static_cast<size_t>(i) + 1] - begin);
  }
  // The id of s, -1 when absent (or without an index).
  int32_t Find(std::string_view s) const;

 private:
  std::string bytes_;
  std::vector<uint32_t> offsets_{0};  // entry i is bytes_[offsets_[i], offsets_[i + 1])
  std::vector<int32_t> slots_;        // power-of-two size; -1 = empty
};

}  // namespace strata::text::internal
