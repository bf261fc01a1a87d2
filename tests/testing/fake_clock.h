// tests/testing/fake_clock.h — a Clock that moves only when told to.
#pragma once

#include <atomic>
#include <chrono>

#include "util/clock.h"

namespace strata::testing {

class FakeClock final : public util::Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns_.load()));
  }
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::time_point(std::chrono::nanoseconds(ns_.load())) +
           std::chrono::hours(24 * 365 * 50);
  }
  void Advance(std::chrono::nanoseconds d) { ns_ += d.count(); }

 private:
  std::atomic<int64_t> ns_{1'000'000'000};
};

}  // namespace strata::testing
