// cache/hit_rate_trigger.h — tells when a tier's hit rate has fallen below
// its floor, so the tier re-learns what it serves with (the semantic tier's
// threshold and nearest-neighbour lists), and what the rate was after.
//
// Promise: lookups are counted in windows of `window`. At the end of each
// full window its hit rate is the tier's current rate. A window whose rate
// is below `floor` fires kTriggered (with that rate as `before`); the tier
// re-learns, and the first full window measured after re-learning has
// finished fires kSettled with `before` and `after`. Lookups made while the
// tier is still learning (the caller says so) do not count: a window
// containing one starts over, so `after` measures the tier as it serves
// once it has re-learned. After kSettled, `cooldown` windows pass before the
// trigger can fire again, so a floor the traffic cannot reach costs one
// re-learning per cooldown, not one per window. floor 0 turns it off.
//
// Threading: thread-safe (one mutex; every call is short).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>

#include "util/status.h"

namespace strata::cache {

struct HitRateTriggerOptions {
  double floor = 0;     // [0, 1); 0 = off
  size_t window = 500;  // lookups per window, [10, 10^7]
  size_t cooldown = 4;  // windows after kSettled before it may fire again, [0, 10^6]
};

struct HitRateEvent {
  enum class Kind { kTriggered, kSettled };
  Kind kind = Kind::kTriggered;
  double before = 0;  // the window that fired
  double after = 0;   // kSettled: the first clean window after re-learning
};

class HitRateTrigger {
 public:
  // InvalidArgument naming the option out of range.
  static util::Status Validate(const HitRateTriggerOptions& options);
  explicit HitRateTrigger(const HitRateTriggerOptions& options);

  // One lookup: served from the tier (`hit`) or not; `learning`: the tier
  // was still re-learning when it answered (its window does not count).
  std::optional<HitRateEvent> Record(bool hit, bool learning);
  // The last full window's hit rate (nullopt before the first).
  std::optional<double> rate() const;
  uint64_t triggers() const;
  const HitRateTriggerOptions& options() const { return options_; }

 private:
  const HitRateTriggerOptions options_;
  mutable std::mutex mu_;          // guards everything below
  size_t lookups_ = 0, hits_ = 0;  // in the current window
  std::optional<double> rate_;
  bool relearning_ = false;  // fired; waiting for the first clean window
  double before_ = 0;
  size_t cooldown_left_ = 0;
  uint64_t triggers_ = 0;
};

}  // namespace strata::cache
