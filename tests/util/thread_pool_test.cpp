#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <numeric>
#include <thread>
#include <vector>

namespace strata::util {
namespace {

TEST(ThreadPool, RunOnAllCallsEveryThreadOnce) {
  for (int n : {1, 2, 3, 4}) {
    ThreadPool pool(n);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    for (int round = 0; round < 200; ++round) {
      pool.RunOnAll([&](int i) { hits[static_cast<size_t>(i)]++; });
    }
    for (auto& h : hits) EXPECT_EQ(h.load(), 200);
  }
}

TEST(ThreadPool, ParallelForCoversTheRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 3, 7, 100, 1001}) {
    std::vector<int> seen(static_cast<size_t>(n), 0);
    pool.ParallelFor(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
    });
    for (int v : seen) EXPECT_EQ(v, 1);
  }
}

TEST(ThreadPool, ChunksDependOnlyOnRangeAndParts) {
  EXPECT_EQ(ThreadPool::Chunk(10, 3, 0), std::make_pair(int64_t{0}, int64_t{4}));
  EXPECT_EQ(ThreadPool::Chunk(10, 3, 1), std::make_pair(int64_t{4}, int64_t{7}));
  EXPECT_EQ(ThreadPool::Chunk(10, 3, 2), std::make_pair(int64_t{7}, int64_t{10}));
}

TEST(ThreadPool, ManyQuickDispatchesComplete) {
  // Exercises the spin/sleep hand-over: a lost wake-up would hang here.
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int i = 0; i < 20000; ++i) {
    pool.ParallelFor(2, [&](int64_t b, int64_t e) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 40000);
}

TEST(ThreadPool, FreshPoolRunsItsFirstJobOnEveryThread) {
  // Workers that start after the first dispatch must still run it.
  for (int round = 0; round < 50; ++round) {
    ThreadPool pool(4);
    std::atomic<int> n{0};
    pool.RunOnAll([&](int) { n++; });
    EXPECT_EQ(n.load(), 4);
  }
}

// The CPUs the calling thread may run on.
std::vector<int32_t> ThreadCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int32_t> out;
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) return out;
  for (int32_t cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
  return out;
}

TEST(ThreadPool, WorkersAndThreadsAreBoundToTheCpusAsked) {
  const std::vector<int32_t> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  const std::vector<int32_t> last = {allowed.back()};
  ThreadPool pool(3);
  ASSERT_TRUE(pool.PinWorkers(last).ok());
  std::vector<std::vector<int32_t>> seen(3);
  pool.RunOnAll([&](int i) { seen[static_cast<size_t>(i)] = ThreadCpus(); });
  EXPECT_EQ(seen[0], allowed);  // the caller is left as it was
  EXPECT_EQ(seen[1], last);
  EXPECT_EQ(seen[2], last);

  std::thread t([&] {
    ASSERT_TRUE(PinCurrentThread(last).ok());
    EXPECT_EQ(ThreadCpus(), last);
    ASSERT_TRUE(PinCurrentThread({}).ok());  // back to every allowed CPU
    EXPECT_EQ(ThreadCpus(), allowed);
    const Status bad = PinCurrentThread(std::vector<int32_t>{-1});
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(PinCurrentThread(std::vector<int32_t>{CPU_SETSIZE - 1}).code(),
              allowed.back() == CPU_SETSIZE - 1 ? StatusCode::kOk : StatusCode::kInvalidArgument);
  });
  t.join();
}

}  // namespace
}  // namespace strata::util
