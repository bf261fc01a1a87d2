#include "util/clock.h"

namespace strata::util {
namespace {

class RealClockImpl final : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::now();
  }
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::now();
  }
};

}  // namespace

const Clock& RealClock() {
  static const RealClockImpl kClock;  // immutable, stateless
  return kClock;
}

}  // namespace strata::util
