// Several local models under one memory budget (backend/residency.h): real
// tiny models, each with its engine, scheduler and LocalBackend built by the
// loader as `strata serve` builds them.
#include "backend/residency.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "backend/local.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "testing/tiny_model.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::backend {
namespace {

using std::chrono::milliseconds;

// One loaded tiny model: model, engine, scheduler and backend, torn down in
// reverse.
class TinyLoaded final : public LoadedModel {
 public:
  static util::StatusOr<std::unique_ptr<LoadedModel>> Load(const std::string& name, uint64_t seed,
                                                           uint64_t bytes,
                                                           obs::MetricsRegistry& metrics,
                                                           util::Logger& log) {
    auto l = std::make_unique<TinyLoaded>();
    l->tiny_ = testing::MakeTinyModel(kernels::TensorType::kF32, seed);
    if (l->tiny_.model == nullptr) return util::InternalError("the tiny model did not build");
    engine::EngineOptions eo;
    eo.n_ctx = 128;
    eo.n_seq_max = 4;
    STRATA_ASSIGN_OR_RETURN(l->engine_, engine::Engine::Create(*l->tiny_.model, eo, log));
    STRATA_ASSIGN_OR_RETURN(l->sched_, engine::Scheduler::Start(*l->engine_, {}, log));
    LocalOptions lo;
    lo.name = name;
    lo.max_tokens_cap = 64;
    lo.export_metrics = false;
    STRATA_ASSIGN_OR_RETURN(l->backend_, LocalBackend::Create(*l->tiny_.model, *l->sched_, lo,
                                                              metrics, util::RealClock(), log));
    l->bytes_ = bytes;
    return std::unique_ptr<LoadedModel>(std::move(l));
  }
  Backend& backend() override { return *backend_; }
  uint64_t resident_bytes() const override { return bytes_; }
  engine::SchedulerStats stats() const override { return sched_->Stats(); }
  bool Drain(std::chrono::steady_clock::time_point deadline) override {
    return sched_->Drain(std::chrono::duration_cast<milliseconds>(std::max(
        std::chrono::steady_clock::duration::zero(), deadline - std::chrono::steady_clock::now())));
  }

 private:
  testing::TinyModel tiny_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::Scheduler> sched_;
  std::unique_ptr<LocalBackend> backend_;
  uint64_t bytes_ = 0;
};

// Collects a run's text and waits for its finishes.
class CollectingSink final : public Sink {
 public:
  explicit CollectingSink(int32_t choices) : left_(choices) {}
  void Push(Event&& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.kind == Event::Kind::kDelta) {
      text_ += e.text;
      for (const TokenLogprob& lp : e.logprobs) text_ += "[" + std::to_string(lp.logprob) + "]";
      return;
    }
    for (int32_t id : e.token_ids) text_ += "<" + std::to_string(id) + ">";
    status_ = e.status;
    if (--left_ == 0) cv_.notify_all();
  }
  void OnFirstToken(std::chrono::nanoseconds) override {}
  void DoNotStore() override {}
  // The text with each token's logprob, then each choice's token ids, once
  // every choice finished (within 30 s).
  std::string Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(30), [this] { return left_ == 0; }));
    EXPECT_TRUE(status_.ok()) << status_.ToString();
    return text_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;     // guarded by mu_
  int32_t left_;         // guarded by mu_
  util::Status status_;  // guarded by mu_: the last finish's
};

Request Greedy(const std::string& prompt, int32_t max_tokens = 8) {
  Request r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.top_logprobs = 0;  // the chosen tokens' logprobs tell two models apart
  return r;
}

// Prepare + Start + wait: the text, or the first error.
util::StatusOr<std::string> Generate(Backend& b, const Request& r) {
  STRATA_ASSIGN_OR_RETURN(auto prepared, b.Prepare(r));
  auto sink = std::make_shared<CollectingSink>(r.n);
  STRATA_ASSIGN_OR_RETURN(auto run, b.Start(r, prepared, sink, nullptr));
  return sink->Wait();
}

// Model i's weights.
uint64_t Seed(int i) { return 7919u * static_cast<uint64_t>(i + 1); }

class ResidencyTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kModelBytes = 100;

  // A residency of `budget` bytes with models "m0".."m{n-1}" (weights Seed(i))
  // of kModelBytes each.
  void Start(uint64_t budget, int n, milliseconds max_wait = milliseconds(10'000),
             cache::PolicyKind policy = cache::PolicyKind::kDualFactor) {
    residency_.reset();  // before the registry it reports into
    metrics_ = std::make_unique<obs::MetricsRegistry>();
    auto r =
        ModelResidency::Create({.budget_bytes = budget, .policy = policy, .max_wait = max_wait},
                               *metrics_, util::RealClock(), *log_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    residency_ = std::move(r).value();
    for (auto& l : loads_) l = 0;
    for (int i = 0; i < n; ++i) {
      const std::string name = "m" + std::to_string(i);
      auto added = residency_->Add(
          {.name = name,
           .path = name + ".gguf",
           .fingerprint = 100u + static_cast<uint64_t>(i),
           .n_ctx = 128,
           .bytes = kModelBytes},
          [this, name, i]() -> util::StatusOr<std::unique_ptr<LoadedModel>> {
            ++loads_[static_cast<size_t>(i)];
            if (fail_next_load_.exchange(false)) {
              std::this_thread::sleep_for(milliseconds(100));  // waiters pile up meanwhile
              return util::DataLossError("the file is truncated");
            }
            return TinyLoaded::Load(name, Seed(i), kModelBytes, *metrics_, *log_);
          });
      ASSERT_TRUE(added.ok()) << added.status().ToString();
      ASSERT_EQ(*added, i);
    }
  }
  Backend& B(int i) { return *residency_->backend(i); }
  // Waits (up to 10 s) until no request holds model `i`: a run lets go of
  // its model just after its last event reached the client.
  void WaitIdle(int i) {
    for (int k = 0; k < 1000 && S(i).leases > 0; ++k) std::this_thread::sleep_for(milliseconds(10));
    ASSERT_EQ(S(i).leases, 0);
  }
  ModelResidencyStats S(int i) { return residency_->Stats()[static_cast<size_t>(i)]; }

  std::unique_ptr<util::Logger> log_ = util::NewStderrLogger(util::LogLevel::kWarn);
  std::unique_ptr<obs::MetricsRegistry> metrics_ = std::make_unique<obs::MetricsRegistry>();
  std::unique_ptr<ModelResidency> residency_;
  std::array<std::atomic<int>, 4> loads_{};  // loader calls per model (on request threads)
  std::atomic<bool> fail_next_load_{false};
};

TEST_F(ResidencyTest, ModelsLoadOnFirstUseAndAnswerAsTheModelItself) {
  Start(10 * kModelBytes, 2);
  EXPECT_FALSE(S(0).resident);
  EXPECT_FALSE(S(1).resident);
  EXPECT_EQ(B(1).name(), "m1");
  EXPECT_EQ(B(1).fingerprint(), 101u);  // known before the model loads
  EXPECT_EQ(B(1).n_ctx(), 128);
  EXPECT_TRUE(B(1).may_block());

  auto got = Generate(B(1), Greedy("hello there"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(S(1).resident);
  EXPECT_FALSE(S(0).resident);
  EXPECT_FALSE(B(1).may_block());

  // The same model served directly gives the same tokens.
  auto direct = TinyLoaded::Load("m1", Seed(1), kModelBytes, *metrics_, *log_);
  ASSERT_TRUE(direct.ok());
  auto want = Generate((*direct)->backend(), Greedy("hello there"));
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(*got, *want);
  // Models of different weights answer differently (the test can fail).
  auto other = Generate(B(0), Greedy("hello there"));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *got);
  EXPECT_FALSE(B(0).may_block());  // both fit the budget: neither leaves again
  EXPECT_EQ(loads_[0], 1);
  EXPECT_EQ(loads_[1], 1);
  EXPECT_EQ(residency_->resident_bytes(), 2 * kModelBytes);
  // Tokenization goes through the loaded model too.
  auto ids = B(0).EncodeText("hello", false, false);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_FALSE(ids->empty());
}

// Budget for two of three: the third load unloads the idle model the
// dual-factor policy scores lowest. m0 was used five times, m1 once after it:
// LRU would unload m0 (used longest ago), dual-factor unloads m1 (used least).
TEST_F(ResidencyTest, TheDualFactorPolicyChoosesWhichIdleModelLeaves) {
  for (auto policy : {cache::PolicyKind::kDualFactor, cache::PolicyKind::kLru}) {
    Start(2 * kModelBytes, 3, milliseconds(10'000), policy);
    for (int k = 0; k < 5; ++k) ASSERT_TRUE(Generate(B(0), Greedy("a", 2)).ok());
    ASSERT_TRUE(Generate(B(1), Greedy("b", 2)).ok());
    WaitIdle(0);
    WaitIdle(1);
    ASSERT_TRUE(Generate(B(2), Greedy("c", 2)).ok());
    const int gone = policy == cache::PolicyKind::kDualFactor ? 1 : 0;
    const int kept = 1 - gone;
    EXPECT_FALSE(S(gone).resident) << cache::PolicyKindName(policy);
    EXPECT_EQ(S(gone).evictions, 1u);
    EXPECT_TRUE(S(kept).resident) << cache::PolicyKindName(policy);
    EXPECT_TRUE(S(2).resident);
    EXPECT_LE(residency_->resident_bytes(), 2 * kModelBytes);
    // The unloaded model comes back on its next request, answering as before.
    auto again = Generate(B(gone), Greedy("b", 2));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(loads_[static_cast<size_t>(gone)], 2);
  }
}

TEST_F(ResidencyTest, AModelInUseIsNeverUnloaded) {
  Start(kModelBytes, 2, milliseconds(300));
  ASSERT_TRUE(Generate(B(0), Greedy("x", 2)).ok());
  EXPECT_TRUE(B(0).may_block());  // resident, but a load of m1 may unload it
  // A prepared request holds m0 (its Prepared lives as long as the request).
  auto held = B(0).Prepare(Greedy("hold"));
  ASSERT_TRUE(held.ok());
  auto refused = B(1).Prepare(Greedy("x"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), util::StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().reason(), util::ErrorReason::kModelMemory);
  EXPECT_NE(refused.status().message().find("'m0'"), std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(S(0).resident);
  EXPECT_EQ(loads_[1], 0);
  // Released, it makes room.
  held = util::InternalError("released");
  ASSERT_TRUE(Generate(B(1), Greedy("x")).ok());
  EXPECT_FALSE(S(0).resident);
  EXPECT_TRUE(S(1).resident);
}

// A run holds its model until its last choice finished, though the client's
// Prepared is gone: the other model's load waits for it.
TEST_F(ResidencyTest, ARunHoldsItsModelUntilItsLastChoiceFinishes) {
  Start(kModelBytes, 2);
  Request r = Greedy("a long answer", 48);
  r.n = 2;
  auto prepared = B(0).Prepare(r);
  ASSERT_TRUE(prepared.ok());
  auto sink = std::make_shared<CollectingSink>(2);
  auto run = B(0).Start(r, *prepared, sink, nullptr);
  ASSERT_TRUE(run.ok());
  prepared = util::InternalError("dropped");
  auto other = std::async(std::launch::async, [&] { return Generate(B(1), Greedy("x", 2)); });
  const std::string text = sink->Wait();
  EXPECT_FALSE(text.empty());
  ASSERT_TRUE(other.get().ok());
  EXPECT_EQ(S(0).evictions, 1u);
  // Cancelling a run whose model is gone is a no-op, not a use after free.
  (*run)->Cancel();
}

TEST_F(ResidencyTest, WaitersOfAFailedLoadGetItsErrorAndTheNextRequestTriesAgain) {
  Start(4 * kModelBytes, 1);
  fail_next_load_ = true;
  std::vector<std::future<util::StatusOr<std::string>>> calls;
  for (int k = 0; k < 4; ++k) {
    calls.push_back(std::async(std::launch::async, [&] { return Generate(B(0), Greedy("x", 2)); }));
  }
  for (auto& c : calls) {
    auto got = c.get();
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), util::StatusCode::kDataLoss);
  }
  EXPECT_EQ(loads_[0], 1);  // one load, its failure shared
  EXPECT_EQ(S(0).load_failures, 1u);
  ASSERT_TRUE(Generate(B(0), Greedy("x", 2)).ok());
  EXPECT_EQ(loads_[0], 2);
}

TEST_F(ResidencyTest, ConcurrentRequestsForTwoModelsThatDoNotFitTogetherAllSucceed) {
  Start(kModelBytes, 2);
  std::vector<std::future<util::StatusOr<std::string>>> calls;
  for (int k = 0; k < 16; ++k) {
    calls.push_back(
        std::async(std::launch::async, [&, k] { return Generate(B(k % 2), Greedy("go", 4)); }));
  }
  std::string answers[2];
  for (int k = 0; k < 16; ++k) {
    auto got = calls[static_cast<size_t>(k)].get();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    if (answers[k % 2].empty()) answers[k % 2] = *got;
    EXPECT_EQ(*got, answers[k % 2]) << "model " << k % 2 << " answered differently";
  }
  EXPECT_LE(residency_->resident_bytes(), kModelBytes);
}

TEST_F(ResidencyTest, CountersSummedOverModelsNeverGoDown) {
  Start(kModelBytes, 2);
  ASSERT_TRUE(Generate(B(0), Greedy("x", 4)).ok());
  const int64_t before = residency_->scheduler_stats().steps;
  EXPECT_GT(before, 0);
  ASSERT_TRUE(Generate(B(1), Greedy("x", 4)).ok());  // unloads m0
  EXPECT_FALSE(S(0).resident);
  EXPECT_GT(residency_->scheduler_stats().steps, before);
}

TEST_F(ResidencyTest, BadSettingsAndModelsLargerThanTheBudgetAreRefused) {
  EXPECT_FALSE(
      ModelResidency::Create({.budget_bytes = 0}, *metrics_, util::RealClock(), *log_).ok());
  EXPECT_FALSE(ModelResidency::Create({.budget_bytes = 1, .max_wait = milliseconds(0)}, *metrics_,
                                      util::RealClock(), *log_)
                   .ok());
  Start(kModelBytes, 1);
  auto big = residency_->Add({.name = "big", .path = "big.gguf", .bytes = kModelBytes + 1},
                             [] { return util::StatusOr<std::unique_ptr<LoadedModel>>(nullptr); });
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().reason(), util::ErrorReason::kModelMemory);
  auto twin = residency_->Add({.name = "m0", .path = "other.gguf", .bytes = 1},
                              [] { return util::StatusOr<std::unique_ptr<LoadedModel>>(nullptr); });
  ASSERT_FALSE(twin.ok());
  EXPECT_EQ(twin.status().code(), util::StatusCode::kInvalidArgument);
}

TEST_F(ResidencyTest, DrainingRefusesLoads) {
  Start(4 * kModelBytes, 2);
  ASSERT_TRUE(Generate(B(0), Greedy("x", 2)).ok());
  EXPECT_TRUE(residency_->Drain(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  auto refused = B(1).Prepare(Greedy("x"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), util::ErrorReason::kShuttingDown);
}

}  // namespace
}  // namespace strata::backend
