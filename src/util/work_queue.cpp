#include "util/work_queue.h"

#include <algorithm>

namespace strata::util {

WorkQueue::WorkQueue(int n_threads, size_t max_queued)
    : max_queued_(std::max<size_t>(1, max_queued)) {
  const int n = std::max(1, n_threads);
  threads_.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Run(); });
}

WorkQueue::~WorkQueue() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    dropped.swap(tasks_);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  // `dropped` is destroyed here, outside the lock: the tasks never run.
}

bool WorkQueue::Submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || tasks_.size() >= max_queued_) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

size_t WorkQueue::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tasks_.size();
}

void WorkQueue::Run() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace strata::util
