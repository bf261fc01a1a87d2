// testing/scheduler_gate.h — a scheduler request that holds the scheduler
// thread inside OnToken until opened: while it waits no other request
// advances, so tests can line up concurrent requests deterministically.
//
// Threading: OnToken runs on the scheduler thread; WaitHolding and Open on
// the test thread. Everything is guarded by mu_.
#pragma once

#include <condition_variable>
#include <mutex>
#include <span>

#include "engine/scheduler.h"

namespace strata::testing {

class SchedulerGate final : public engine::RequestSink {
 public:
  util::StatusOr<int32_t> Choose(std::span<const float>) override { return 5; }
  bool OnToken(int32_t) override {
    std::unique_lock<std::mutex> lock(mu_);
    holding_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
    return true;
  }
  void OnFinish(engine::FinishReason, const util::Status&, const engine::Usage&) override {}
  // Returns once the scheduler thread is held in OnToken.
  void WaitHolding() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return holding_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool holding_ = false;  // guarded by mu_
  bool open_ = false;     // guarded by mu_
};

}  // namespace strata::testing
