// A local backend's warm-up of cached prefixes (backend/local.h,
// WarmPrefixes): what a new instance prefills from a snapshot stops at its
// deadline, even when the caller has stopped waiting, so the scheduler
// thread is not kept from the first requests by the rest of the list.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "backend/local.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "obs/metrics.h"
#include "testing/tiny_model.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::backend {
namespace {

using std::chrono::milliseconds;

TEST(LocalPrefixesTest, AWarmUpPastItsDeadlineComputesNothingMore) {
  auto log = util::NewNullLogger();
  obs::MetricsRegistry metrics;
  testing::TinyModel tiny = testing::MakeTinyModel(kernels::TensorType::kF32, 3);
  ASSERT_NE(tiny.model, nullptr);
  engine::EngineOptions eo;
  eo.n_ctx = 128;
  eo.n_seq_max = 4;
  auto engine = engine::Engine::Create(*tiny.model, eo, *log);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto sched = engine::Scheduler::Start(**engine, {}, *log);
  ASSERT_TRUE(sched.ok()) << sched.status().ToString();
  LocalOptions lo;
  lo.name = "tiny";
  lo.max_tokens_cap = 64;
  lo.export_metrics = false;
  auto local = LocalBackend::Create(*tiny.model, **sched, lo, metrics, util::RealClock(), *log);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  // Four prompts after one 32-token system prompt: the system prompt's
  // blocks are a shared prefix once two of them are computed.
  std::vector<CachedPrefix> prefixes;
  for (int32_t p = 0; p < 4; ++p) {
    CachedPrefix c{.cache_namespace = 1, .tokens = {}};
    for (int32_t t = 0; t < 32; ++t) c.tokens.push_back(1 + (t * 3) % 50);
    for (int32_t t = 0; t < 16; ++t) c.tokens.push_back(1 + (p * 7 + t * 5) % 50);
    prefixes.push_back(std::move(c));
  }
  // No time at all: whether or not the call saw the task begin, the task
  // finds its deadline passed and computes nothing.
  auto late = (*local)->WarmPrefixes(prefixes, milliseconds(0));
  if (late.ok()) {
    EXPECT_EQ(*late, 0);
  } else {
    EXPECT_EQ(late.status().code(), util::StatusCode::kDeadlineExceeded);
  }
  // The scheduler runs its tasks in order: this one runs after the first.
  auto cached = (*local)->CachedPrefixes(100, milliseconds(10'000));
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  EXPECT_TRUE(cached->empty()) << cached->size() << " prefixes computed after the deadline";
  // With time, they are computed and listed.
  auto warm = (*local)->WarmPrefixes(prefixes, milliseconds(10'000));
  ASSERT_TRUE(warm.ok()) << warm.status().ToString();
  EXPECT_GT(*warm, 0);
  cached = (*local)->CachedPrefixes(100, milliseconds(10'000));
  ASSERT_TRUE(cached.ok());
  EXPECT_FALSE(cached->empty());
  local->reset();
  sched->reset();
}

}  // namespace
}  // namespace strata::backend
