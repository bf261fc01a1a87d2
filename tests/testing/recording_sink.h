// testing/recording_sink.h — a scheduler request sink that samples with a
// seeded sampler (or greedily, at temperature 0), records the tokens it
// chose and the usage it finished with, and lets the test wait for the end.
// The finish must be successful (a failed one is a test failure).
//
// Threading: Choose, OnToken and OnFinish run on the scheduler thread;
// tokens_ and usage_ are read by the test thread after Wait().
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "sampling/sampler.h"

namespace strata::testing {

class RecordingSink final : public engine::RequestSink {
 public:
  explicit RecordingSink(const sampling::SamplingParams& p) : sampler_(p) {}
  util::StatusOr<int32_t> Choose(std::span<const float> logits) override {
    return sampler_.Sample(logits);
  }
  bool OnToken(int32_t t) override {
    tokens_.push_back(t);
    return true;
  }
  void OnFinish(engine::FinishReason, const util::Status& st, const engine::Usage& u) override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_TRUE(st.ok()) << st.ToString();
    usage_ = u;
    done_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
  }
  std::vector<int32_t> tokens_;  // written on the scheduler thread, read after Wait
  engine::Usage usage_;          // likewise

 private:
  sampling::Sampler sampler_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
};

// A request that generates exactly `max_tokens` tokens (no stop at the end
// of generation) into `sink`, using the prefix cache within namespace `ns`
// (0: without it).
inline engine::SchedulerRequest RecordedRequest(std::vector<int32_t> prompt, int32_t max_tokens,
                                                std::shared_ptr<RecordingSink> sink, uint64_t ns) {
  engine::SchedulerRequest req;
  req.prompt = std::move(prompt);
  req.max_tokens = max_tokens;
  req.stop_at_eog = false;
  req.sink = std::move(sink);
  req.cache_namespace = ns;
  return req;
}

}  // namespace strata::testing
