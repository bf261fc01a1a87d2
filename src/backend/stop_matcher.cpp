#include "backend/stop_matcher.h"

#include <algorithm>

namespace strata::backend {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string StopMatcher::Push(std::string_view text) {
  if (stopped_) return "";
  held_.append(text);
  // The earliest complete stop string wins.
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Finish() {
  if (stopped_) return "";
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace strata::backend
