#include "text/internal/string_table.h"

#include <bit>
#include <cstdint>
#include <functional>

namespace strata::text::internal {

bool StringTable::Append(std::string_view s) {
  if (s.size() > UINT32_MAX - bytes_.size() || offsets_.size() > static_cast<size_t>(INT32_MAX)) {
    return false;
  }
  bytes_.append(s);
  offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  return true;
}

void StringTable::BuildIndex() {
  bytes_.shrink_to_fit();
  offsets_.shrink_to_fit();
  const size_t n = static_cast<size_t>(size());
  const size_t capacity = std::bit_ceil(n + n / 3 + 1);
  slots_.assign(capacity, -1);
  const size_t mask = capacity - 1;
  for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) {
    const std::string_view s = (*this)[id];
    for (size_t at = std::hash<std::string_view>{}(s)&mask;; at = (at + 1) & mask) {
      const int32_t other = slots_[at];
      if (other < 0) {
        slots_[at] = id;
        break;
      }
      if ((*this)[other] == s) break;  // a duplicate: the first one stays
    }
  }
}

int32_t StringTable::Find(std::string_view s) const {
  if (slots_.empty()) return -1;
  const size_t mask = slots_.size() - 1;
  for (size_t at = std::hash<std::string_view>{}(s)&mask;; at = (at + 1) & mask) {
    const int32_t id = slots_[at];
    if (id < 0) return -1;
    if ((*this)[id] == s) return id;
  }
}

}  // namespace strata::text::internal
