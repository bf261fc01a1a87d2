#include "util/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <latch>

namespace strata::util {
namespace {

TEST(WorkQueue, RunsEveryTaskOnce) {
  std::atomic<int> sum{0};
  {
    WorkQueue q(3, 1000);
    std::latch all(100);
    for (int i = 1; i <= 100; ++i) {
      ASSERT_TRUE(q.Submit([&sum, &all, i] {
        sum.fetch_add(i);
        all.count_down();
      }));
    }
    all.wait();
  }
  EXPECT_EQ(sum.load(), 5050);
}

TEST(WorkQueue, RefusesBeyondItsBacklogInsteadOfBlocking) {
  WorkQueue q(1, 2);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::promise<void> started;
  ASSERT_TRUE(q.Submit([gate, &started] {
    started.set_value();
    gate.wait();
  }));
  started.get_future().wait();  // the one thread is busy
  EXPECT_TRUE(q.Submit([] {}));
  EXPECT_TRUE(q.Submit([] {}));
  EXPECT_FALSE(q.Submit([] {}));
  EXPECT_EQ(q.queued(), 2u);
  release.set_value();
}

TEST(WorkQueue, DestructionDropsWaitingTasksUnrun) {
  std::atomic<int> ran{0};
  auto witness = std::make_shared<int>(0);
  std::weak_ptr<int> watch = witness;
  {
    WorkQueue q(1, 10);
    std::promise<void> release;
    std::shared_future<void> gate = release.get_future().share();
    std::promise<void> started;
    ASSERT_TRUE(q.Submit([gate, &started] {
      started.set_value();
      gate.wait();
    }));
    started.get_future().wait();
    ASSERT_TRUE(q.Submit([&ran, w = std::move(witness)] { ran.fetch_add(1); }));
    release.set_value();
    // The waiting task may or may not have started before destruction; if
    // it did not, it is destroyed without running.
  }
  EXPECT_TRUE(watch.expired());
  EXPECT_LE(ran.load(), 1);
}

}  // namespace
}  // namespace strata::util
