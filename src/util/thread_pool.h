// util/thread_pool.h — the engine's fork-join thread pool.
//
// Promise: RunOnAll(fn) calls fn(i) once on each of size() threads (the caller
// is thread 0) and returns when every call has returned. ParallelFor splits a
// range into contiguous chunks whose boundaries depend only on the range and the
// pool size, so which thread computes what is deterministic. Dispatch is built
// for many small steps per second (a decode step issues hundreds): idle workers
// spin briefly before sleeping on a futex, so a dispatch costs about a
// microsecond while the pool is busy and no CPU while it is idle.
//
// Threading: one owner thread calls RunOnAll/ParallelFor at a time (not
// reentrant: fn must not call back into the same pool). fn must not throw.
//
// Usage:
//   util::ThreadPool pool(2);
//   pool.ParallelFor(n_rows, [&](int64_t begin, int64_t end) { ... });
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <thread>
#include <type_traits>
#include <vector>

#include "util/status.h"

namespace strata::util {

// Binds the calling thread to `cpus` (the kernel's CPU numbers; empty: every
// CPU the process may use, as its main thread's mask says). InvalidArgument naming a CPU outside
// [0, 1024) or one the process may not run on.
Status PinCurrentThread(std::span<const int32_t> cpus);
// The CPUs this process may run on (its main thread's affinity mask), ascending.
std::vector<int32_t> AllowedCpus();

class ThreadPool {
 public:
  // n_threads >= 1 (clamped); spawns n_threads - 1 workers.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Binds every worker (not the caller, thread 0) to `cpus`
  // (PinCurrentThread); the first error, with the workers that could not be
  // bound left as they were.
  Status PinWorkers(std::span<const int32_t> cpus);

  template <typename F>
  void RunOnAll(F&& fn) {
    using Fn = std::remove_reference_t<F>;
    Dispatch([](void* ctx, int i) { (*static_cast<Fn*>(ctx))(i); },
             const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // fn(begin, end) over contiguous chunks of [0, n); at most size() chunks.
  template <typename F>
  void ParallelFor(int64_t n, F&& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1) {
      fn(int64_t{0}, n);
      return;
    }
    const int64_t parts = n < n_threads_ ? n : n_threads_;
    RunOnAll([&](int i) {
      if (i >= parts) return;
      const auto [begin, end] = Chunk(n, parts, i);
      fn(begin, end);
    });
  }

  // The i-th of `parts` near-equal contiguous chunks of [0, n).
  static std::pair<int64_t, int64_t> Chunk(int64_t n, int64_t parts, int64_t i) {
    const int64_t base = n / parts, extra = n % parts;
    const int64_t begin = i * base + (i < extra ? i : extra);
    return {begin, begin + base + (i < extra ? 1 : 0)};
  }

 private:
  using Trampoline = void (*)(void*, int);
  void Dispatch(Trampoline fn, void* ctx);
  void WorkerLoop(int index);

  const int n_threads_;
  std::vector<std::thread> workers_;
  // The job of the current generation; written by the owner before it bumps
  // generation_ (release) and read by workers after they observe it (acquire).
  Trampoline job_fn_ = nullptr;
  void* job_ctx_ = nullptr;
  std::atomic<uint32_t> generation_{0};  // 32-bit: futex-backed wait()
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<int> sleepers_{0};         // workers blocked in generation_.wait()
  std::atomic<bool> stop_{false};
  bool running_ = false;  // owner-thread only: reentrancy guard
};

}  // namespace strata::util
