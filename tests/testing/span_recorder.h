// testing/span_recorder.h — a SpanExporter that keeps every span, for tests
// of what strata records (the real exporter's batching is tested on its own).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string_view>
#include <vector>

#include "obs/span.h"

namespace strata::testing {

class SpanRecorder final : public obs::SpanExporter {
 public:
  void Export(obs::SpanData span) override {
    std::lock_guard<std::mutex> lock(mu_);
    spans_.push_back(std::move(span));
    cv_.notify_all();
  }
  // Waits until `n` spans arrived (true), or `timeout` passed (false): for
  // spans that end on another thread.
  bool WaitFor(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return spans_.size() >= n; });
  }
  std::vector<obs::SpanData> spans() const {
    std::lock_guard<std::mutex> lock(mu_);
    return spans_;
  }
  // The spans named `name`, in the order they ended.
  std::vector<obs::SpanData> Named(std::string_view name) const {
    std::vector<obs::SpanData> out;
    for (obs::SpanData& s : spans()) {
      if (s.name == name) out.push_back(std::move(s));
    }
    return out;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    spans_.clear();
  }

 private:
  mutable std::mutex mu_;       // guards spans_
  std::condition_variable cv_;  // a span arrived
  std::vector<obs::SpanData> spans_;
};

// The value of attribute `key` of `span`, or nullptr.
inline const obs::AttributeValue* Attr(const obs::SpanData& span, std::string_view key) {
  for (const obs::Attribute& a : span.attributes) {
    if (a.key == key) return &a.value;
  }
  return nullptr;
}

}  // namespace strata::testing
