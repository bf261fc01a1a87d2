#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
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

}  // namespace
}  // namespace strata::util
