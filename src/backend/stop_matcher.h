// backend/stop_matcher.h — stop strings across token boundaries.
//
// Promise: Push(text) returns the text that can safely be sent to the client:
// never any part of a stop string, and never a prefix of one that the next
// token might complete (that part is held back). When a stop string appears,
// the text before it is returned and stopped() turns true; nothing after it
// is ever returned. Finish() releases what was held back (no stop matched).
//
// Threading: thread-compatible (one per generated choice).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata::backend {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  std::string Push(std::string_view text);
  std::string Finish();
  bool stopped() const { return stopped_; }
  // The stop string that matched (empty if none).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace strata::backend
