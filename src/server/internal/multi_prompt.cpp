#include "server/internal/multi_prompt.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>

namespace strata::server {
namespace {

using Clock = std::chrono::steady_clock;

// What the parts' ready callbacks share with the reader: a flag set when
// any part may have something, and the reader's own callback, run once.
struct Wake {
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;            // guarded by mu
  std::function<void()> notify;  // guarded by mu: the reader's pending callback
  void Signal() {
    std::function<void()> run;
    {
      std::lock_guard<std::mutex> lock(mu);
      ready = true;
      run = std::move(notify);
      notify = nullptr;
    }
    cv.notify_all();
    if (run) run();
  }
};

class CombinedGeneration final : public gateway::Generation {
 public:
  CombinedGeneration(std::vector<std::unique_ptr<gateway::Generation>> parts, int32_t per_part)
      : parts_(std::move(parts)),
        per_part_(per_part),
        done_(parts_.size(), false),
        prompt_(parts_.size(), 0),
        cached_(parts_.size(), 0),
        wake_(std::make_shared<Wake>()) {}

  util::StatusOr<gateway::Event> Next(Clock::time_point deadline) override {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(wake_->mu);
        wake_->ready = false;
      }
      bool all_done = true;
      for (size_t step = 0; step < parts_.size(); ++step) {
        const size_t i = (next_ + step) % parts_.size();
        if (done_[i]) continue;
        auto e = parts_[i]->Next(Clock::time_point::min());
        if (e.ok()) {
          next_ = (i + 1) % parts_.size();  // the parts take turns
          return Renumber(i, std::move(e).value());
        }
        if (e.status().code() == util::StatusCode::kOutOfRange) {
          done_[i] = true;
          continue;
        }
        if (e.status().code() != util::StatusCode::kDeadlineExceeded) return e.status();
        all_done = false;
      }
      if (all_done) return util::OutOfRangeError("every choice has finished");
      if (Clock::now() >= deadline) {
        return util::DeadlineExceededError("no event before the deadline");
      }
      // Wait for any part to become readable (or the deadline).
      ArmParts();
      std::unique_lock<std::mutex> lock(wake_->mu);
      wake_->cv.wait_until(lock, deadline, [&] { return wake_->ready; });
    }
  }

  void NotifyWhenReady(std::function<void()> ready) override {
    {
      std::lock_guard<std::mutex> lock(wake_->mu);
      wake_->notify = std::move(ready);
    }
    if (std::all_of(done_.begin(), done_.end(), [](bool d) { return d; })) {
      wake_->Signal();  // Next would answer OutOfRange at once
      return;
    }
    ArmParts();
  }

  void Cancel() override {
    for (auto& p : parts_) p->Cancel();
  }

  int32_t prompt_tokens() const override {
    int32_t sum = 0;
    for (const auto& p : parts_) sum += p->prompt_tokens();
    return sum;
  }
  int32_t n_choices() const override { return per_part_ * static_cast<int32_t>(parts_.size()); }
  gateway::CacheOutcome cache_outcome() const override {
    // One outcome for the response: the parts', when they agree.
    const gateway::CacheOutcome first = parts_[0]->cache_outcome();
    for (const auto& p : parts_) {
      if (p->cache_outcome() != first) return gateway::CacheOutcome::kMiss;
    }
    return first;
  }
  bool defers_stream_head() const override {
    return std::any_of(parts_.begin(), parts_.end(),
                       [](const auto& p) { return p->defers_stream_head(); });
  }

 private:
  // Every unfinished part calls Signal when it becomes readable (at once if
  // it is now). A part replaces its pending callback, so arming again is safe.
  void ArmParts() {
    for (size_t i = 0; i < parts_.size(); ++i) {
      if (done_[i]) continue;
      parts_[i]->NotifyWhenReady([w = std::weak_ptr<Wake>(wake_)] {
        if (auto wake = w.lock()) wake->Signal();
      });
    }
  }

  gateway::Event Renumber(size_t part, gateway::Event e) {
    e.index += per_part_ * static_cast<int32_t>(part);
    if (e.kind == gateway::Event::Kind::kFinish) {
      prompt_[part] = std::max(prompt_[part], e.usage.prompt_tokens);
      cached_[part] = std::max(cached_[part], e.usage.cached_tokens);
      int32_t prompt = 0;
      int32_t cached = 0;
      for (size_t i = 0; i < parts_.size(); ++i) {
        prompt += prompt_[i];
        cached += cached_[i];
      }
      e.usage.prompt_tokens = prompt;
      e.usage.cached_tokens = cached;
    }
    return e;
  }

  const std::vector<std::unique_ptr<gateway::Generation>> parts_;
  const int32_t per_part_;
  std::vector<bool> done_;       // parts that answered OutOfRange
  std::vector<int32_t> prompt_;  // per part: the largest prompt count its finishes carried
  std::vector<int32_t> cached_;  // per part: the same for cached tokens
  size_t next_ = 0;              // the part polled first
  const std::shared_ptr<Wake> wake_;
};

}  // namespace

std::unique_ptr<gateway::Generation> CombinePromptGenerations(
    std::vector<std::unique_ptr<gateway::Generation>> parts, int32_t choices_per_part) {
  std::vector<gateway::Provenance> provenance;
  for (const auto& p : parts) {
    provenance.insert(provenance.end(), p->provenance().begin(), p->provenance().end());
  }
  auto combined = std::make_unique<CombinedGeneration>(std::move(parts), choices_per_part);
  combined->set_provenance(std::move(provenance));
  return combined;
}

}  // namespace strata::server
