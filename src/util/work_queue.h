// util/work_queue.h — a fixed set of threads that run submitted tasks in
// order of arrival, with a bounded backlog.
//
// Promise: Submit never blocks: it queues the task, or returns false when
// `max_queued` tasks already wait (the caller refuses the work instead of
// piling it up). Tasks run on one of the queue's threads, each exactly once,
// unless the queue is destroyed first: the destructor finishes the running
// tasks, drops the waiting ones (destroying them unrun) and joins.
// For work that blocks for a while (parsing and tokenizing a large request,
// a cache lookup over the network) and must stay off I/O threads; the
// engine's fork-join work uses util/thread_pool.h instead.
//
// Threading: Submit is thread-safe; tasks must not throw.
//
// Usage:
//   util::WorkQueue workers(4, 1024);
//   if (!workers.Submit([=] { Handle(request); })) Refuse(request);
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::util {

class WorkQueue {
 public:
  // n_threads >= 1, max_queued >= 1 (clamped).
  WorkQueue(int n_threads, size_t max_queued);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  bool Submit(std::function<void()> task);
  size_t queued() const;

 private:
  void Run();

  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;               // a task arrived, or stop
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::vector<std::thread> threads_;         // last: started after the rest
};

}  // namespace strata::util
