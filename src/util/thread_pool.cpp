#include "util/thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_CPU_RELAX() _mm_pause()
#else
#define STRATA_CPU_RELAX() std::this_thread::yield()
#endif

namespace strata::util {
namespace {
// Spin iterations before a worker sleeps (~100-300 us on current x86 cores):
// long enough to bridge the gap between the operations of one forward pass,
// short enough not to burn a core between requests.
constexpr int kSpinIterations = 4096;
}  // namespace

Status PinCurrentThread(std::span<const int32_t> cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (cpus.empty()) {
    if (sched_getaffinity(getpid(), sizeof(set), &set) != 0) {
      return InternalError("cannot read this process's CPU affinity");
    }
  }
  for (int32_t cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return InvalidArgumentError(fmt::format("CPU {} is outside [0, {})", cpu, CPU_SETSIZE));
    }
    CPU_SET(cpu, &set);
  }
  if (const int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); err != 0) {
    return InvalidArgumentError(fmt::format(
        "cannot bind a thread to CPUs {}: this process may not run on them", fmt::join(cpus, ",")));
  }
  return OkStatus();
}

std::vector<int32_t> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int32_t> out;
  if (sched_getaffinity(getpid(), sizeof(set), &set) != 0) return out;
  for (int32_t cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
  return out;
}

Status ThreadPool::PinWorkers(std::span<const int32_t> cpus) {
  std::mutex mu;
  Status first;  // guarded by mu
  RunOnAll([&](int i) {
    if (i == 0) return;
    Status st = PinCurrentThread(cpus);
    std::lock_guard<std::mutex> lock(mu);
    if (first.ok()) first = std::move(st);
  });
  return first;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Dispatch(Trampoline fn, void* ctx) {
  STRATA_CHECK_MSG(!running_, "ThreadPool is not reentrant");
  if (n_threads_ == 1) {
    fn(ctx, 0);
    return;
  }
  running_ = true;
  job_fn_ = fn;
  job_ctx_ = ctx;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
  fn(ctx, 0);
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    if (++spins < kSpinIterations) {
      STRATA_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  running_ = false;
}

void ThreadPool::WorkerLoop(int index) {
  // The generation at construction, not a fresh load: a worker that starts late
  // must still run the jobs dispatched before it first looked.
  uint32_t seen = 0;
  while (true) {
    uint32_t now = generation_.load(std::memory_order_acquire);
    for (int spins = 0; now == seen && spins < kSpinIterations; ++spins) {
      STRATA_CPU_RELAX();
      now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (generation_.load(std::memory_order_seq_cst) == seen) generation_.wait(seen);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      continue;
    }
    seen = now;
    if (stop_.load(std::memory_order_acquire)) return;
    job_fn_(job_ctx_, index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace strata::util
