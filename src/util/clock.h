// util/clock.h — the injected source of time.
//
// Promise: nothing in strata reads the system clock directly; it asks a Clock.
// Tests pass a FakeClock (tests/testing/fake_clock.h) and advance it by hand,
// so no test sleeps or depends on wall time.
//
// Threading: implementations are thread-safe.
#pragma once

#include <chrono>

namespace strata::util {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time, for durations and deadlines.
  virtual std::chrono::steady_clock::time_point Now() const = 0;
  // Calendar time, for timestamps shown to people and written to logs/files.
  virtual std::chrono::system_clock::time_point WallNow() const = 0;
};

// The real clocks. The returned object is stateless and lives forever.
const Clock& RealClock();

// Seconds between two steady time points, as a double.
inline double SecondsBetween(std::chrono::steady_clock::time_point a,
                             std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace strata::util
