#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>

#include "testing/greedy_run.h"
#include "testing/scheduler_gate.h"
#include "testing/tiny_model.h"
#include "util/log.h"
#include "util/thread_pool.h"

namespace strata::engine {
namespace {

// Greedy sink that records what it is told and lets a test wait for the end.
class RecordingSink : public RequestSink {
 public:
  explicit RecordingSink(int stop_after = -1) : stop_after_(stop_after) {}
  util::StatusOr<int32_t> Choose(std::span<const float> logits) override {
    return GreedyToken(logits);
  }
  bool OnToken(int32_t token) override {
    std::lock_guard<std::mutex> lock(mu_);
    tokens_.push_back(token);
    return stop_after_ < 0 || static_cast<int>(tokens_.size()) < stop_after_;
  }
  void OnFinish(FinishReason reason, const util::Status& status, const Usage& usage) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++finishes_;
    reason_ = reason;
    status_ = status;
    usage_ = usage;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return finishes_ > 0; });
  }
  std::vector<int32_t> tokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_;
  }
  FinishReason reason() {
    std::lock_guard<std::mutex> l(mu_);
    return reason_;
  }
  Usage usage() {
    std::lock_guard<std::mutex> l(mu_);
    return usage_;
  }
  int finishes() {
    std::lock_guard<std::mutex> l(mu_);
    return finishes_;
  }

 private:
  const int stop_after_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> tokens_;
  int finishes_ = 0;
  FinishReason reason_ = FinishReason::kLength;
  util::Status status_;
  Usage usage_;
};

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = testing::MakeTinyModel();
    ASSERT_NE(tiny_.model, nullptr);
  }
  std::unique_ptr<Engine> MakeEngine(int32_t n_ctx, int32_t n_blocks) {
    EngineOptions o;
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    o.n_kv_blocks = n_blocks;
    o.block_size = 4;
    auto e = Engine::Create(*tiny_.model, o, *log_);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  }
  std::vector<int32_t> Prompt(int n, int salt) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(3 + (i * 7 + salt * 13) % 200);
    return p;
  }
  // The reference: each request alone, on the calling thread.
  std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, int max_tokens) {
    auto e = MakeEngine(256, 256);
    testing::GreedyRequest r{prompt, max_tokens, true};
    auto res = testing::RunGreedy(*e, std::span(&r, 1));
    EXPECT_TRUE(res.ok());
    return (*res)[0].tokens;
  }
  testing::TinyModel tiny_;
  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
};

TEST_F(SchedulerTest, ConcurrentRequestsGetTheTokensTheyWouldGetAlone) {
  auto engine = MakeEngine(256, 256);
  auto sched = Scheduler::Start(*engine, {.max_running = 4, .max_batch_tokens = 16}, *log_);
  ASSERT_TRUE(sched.ok());
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 10; ++i) {
    prompts.push_back(Prompt(3 + 5 * i, i));
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE((*sched)->Submit({prompts.back(), 12, false, sinks.back()}).ok());
  }
  for (size_t i = 0; i < sinks.size(); ++i) {
    sinks[i]->Wait();
    EXPECT_EQ(sinks[i]->tokens(), Alone(prompts[i], 12)) << "request " << i;
    EXPECT_EQ(sinks[i]->reason(), FinishReason::kLength);
    EXPECT_EQ(sinks[i]->usage().completion_tokens, 12);
  }
  EXPECT_EQ((*sched)->Stats().kv_blocks_used, 0);
}

// A scheduler and engine bound to one CPU (a NUMA placement) compute the
// same tokens; a CPU the process may not use fails the start.
TEST_F(SchedulerTest, BoundToCpusItComputesTheSameAndRefusesCpusItMayNotUse) {
  const std::vector<int32_t> one = {util::AllowedCpus().back()};
  EngineOptions o;
  o.n_threads = 2;
  o.n_ctx = 256;
  o.n_kv_blocks = 256;
  o.block_size = 4;
  o.cpus = one;
  auto engine = Engine::Create(*tiny_.model, o, *log_);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto sched = Scheduler::Start(**engine, {.cpus = one}, *log_);
  ASSERT_TRUE(sched.ok()) << sched.status().ToString();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE((*sched)->Submit({Prompt(9, 1), 8, false, sink}).ok());
  sink->Wait();
  EXPECT_EQ(sink->tokens(), Alone(Prompt(9, 1), 8));

  auto other = MakeEngine(256, 256);
  auto refused = Scheduler::Start(*other, {.cpus = {-1}}, *log_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), util::StatusCode::kInvalidArgument);
  o.cpus = {-1};
  EXPECT_FALSE(Engine::Create(*tiny_.model, o, *log_).ok());
}

TEST_F(SchedulerTest, PreemptionUnderKvPressureKeepsOutputsExact) {
  // 40 blocks of 4 tokens: one full context (32 blocks) plus a little.
  // Memory-aware admission off: it would hold requests back instead.
  auto engine = MakeEngine(128, 40);
  auto sched = Scheduler::Start(
      *engine, {.max_running = 8, .max_batch_tokens = 64, .kv_pressure = 0}, *log_);
  ASSERT_TRUE(sched.ok());
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(Prompt(20, i));
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE((*sched)->Submit({prompts.back(), 40, false, sinks.back()}).ok());
  }
  for (size_t i = 0; i < sinks.size(); ++i) {
    sinks[i]->Wait();
    EXPECT_EQ(sinks[i]->tokens(), Alone(prompts[i], 40)) << "request " << i;
  }
  const SchedulerStats st = (*sched)->Stats();
  EXPECT_GT(st.preemptions, 0) << "the test did not exercise preemption";
  EXPECT_EQ(st.kv_blocks_used, 0);
}

TEST_F(SchedulerTest, CancelEndsTheRequestAndFreesItsBlocks) {
  auto engine = MakeEngine(256, 256);
  auto sched = Scheduler::Start(*engine, {}, *log_);
  ASSERT_TRUE(sched.ok());
  // A sink that cancels its own request from inside OnToken, as a server does
  // when it sees the client disconnect.
  struct CancellingSink : RecordingSink {
    Scheduler* s = nullptr;
    RequestId id = 0;
    bool OnToken(int32_t t) override {
      RecordingSink::OnToken(t);
      if (tokens().size() == 3) s->Cancel(id);
      return true;
    }
  };
  auto sink = std::make_shared<CancellingSink>();
  sink->s = sched->get();
  // Ids are handed out in order from 1, so the sink knows its id before the
  // scheduler can call it.
  sink->id = 1;
  auto id = (*sched)->Submit({Prompt(8, 1), 200, false, sink});
  ASSERT_TRUE(id.ok());
  ASSERT_EQ(*id, 1u);
  sink->Wait();
  EXPECT_EQ(sink->reason(), FinishReason::kCancelled);
  EXPECT_LT(sink->tokens().size(), 200u);
  EXPECT_EQ(sink->finishes(), 1);
  EXPECT_EQ((*sched)->Stats().kv_blocks_used, 0);
}

TEST_F(SchedulerTest, SinkCanStopTheRequest) {
  auto engine = MakeEngine(256, 256);
  auto sched = Scheduler::Start(*engine, {}, *log_);
  auto sink = std::make_shared<RecordingSink>(/*stop_after=*/5);
  ASSERT_TRUE((*sched)->Submit({Prompt(6, 2), 50, false, sink}).ok());
  sink->Wait();
  EXPECT_EQ(sink->tokens().size(), 5u);
  EXPECT_EQ(sink->reason(), FinishReason::kStopString);
}

TEST_F(SchedulerTest, BadRequestsAreRefusedAtSubmit) {
  auto engine = MakeEngine(32, 64);
  auto sched = Scheduler::Start(*engine, {.max_running = 1, .max_queue = 0}, *log_);
  auto sink = std::make_shared<RecordingSink>();
  EXPECT_EQ((*sched)->Submit({{}, 5, false, sink}).status().code(),
            util::StatusCode::kInvalidArgument);
  EXPECT_EQ((*sched)->Submit({Prompt(4, 0), 0, false, sink}).status().code(),
            util::StatusCode::kInvalidArgument);
  EXPECT_EQ((*sched)->Submit({Prompt(4, 0), 5, false, nullptr}).status().code(),
            util::StatusCode::kInvalidArgument);
  EXPECT_EQ((*sched)->Submit({{1, 1 << 30}, 5, false, sink}).status().code(),
            util::StatusCode::kInvalidArgument);
  EXPECT_EQ((*sched)->Submit({Prompt(32, 0), 5, false, sink}).status().code(),
            util::StatusCode::kOutOfRange);
}

TEST_F(SchedulerTest, FullQueueIsResourceExhausted) {
  auto engine = MakeEngine(256, 256);
  auto sched = Scheduler::Start(*engine, {.max_running = 1, .max_queue = 1}, *log_);
  // The first request holds the scheduler thread inside OnToken until released,
  // so nothing finishes while the queue fills.
  struct GateSink : RecordingSink {
    std::mutex m;
    std::condition_variable cv;
    bool entered = false, open = false;
    bool OnToken(int32_t t) override {
      std::unique_lock<std::mutex> lock(m);
      entered = true;
      cv.notify_all();
      cv.wait(lock, [this] { return open; });
      lock.unlock();
      return RecordingSink::OnToken(t);
    }
  };
  auto gate = std::make_shared<GateSink>();
  ASSERT_TRUE((*sched)->Submit({Prompt(8, 0), 3, false, gate}).ok());
  {
    std::unique_lock<std::mutex> lock(gate->m);
    gate->cv.wait(lock, [&] { return gate->entered; });
  }
  auto queued = std::make_shared<RecordingSink>();
  ASSERT_TRUE((*sched)->Submit({Prompt(8, 1), 3, false, queued}).ok());  // fills the queue
  auto refused = std::make_shared<RecordingSink>();
  auto r = (*sched)->Submit({Prompt(8, 2), 3, false, refused});
  EXPECT_EQ(r.status().code(), util::StatusCode::kResourceExhausted);
  {
    std::lock_guard<std::mutex> lock(gate->m);
    gate->open = true;
  }
  gate->cv.notify_all();
  gate->Wait();
  queued->Wait();
  EXPECT_EQ(queued->tokens().size(), 3u);
  EXPECT_EQ(refused->finishes(), 0);
}

TEST_F(SchedulerTest, DrainFinishesInFlightWorkThenRefuses) {
  auto engine = MakeEngine(256, 256);
  auto sched = Scheduler::Start(*engine, {}, *log_);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE((*sched)->Submit({Prompt(8, 3), 20, false, sink}).ok());
  EXPECT_TRUE((*sched)->Drain(std::chrono::minutes(1)));
  EXPECT_EQ(sink->tokens().size(), 20u);
  EXPECT_EQ((*sched)->Submit({Prompt(8, 3), 20, false, sink}).status().code(),
            util::StatusCode::kUnavailable);
}

TEST_F(SchedulerTest, DestroyingTheSchedulerCancelsWhatIsLeft) {
  auto engine = MakeEngine(256, 256);
  auto sink = std::make_shared<RecordingSink>();
  {
    auto sched = Scheduler::Start(*engine, {}, *log_);
    ASSERT_TRUE((*sched)->Submit({Prompt(8, 4), 250, false, sink}).ok());
  }
  EXPECT_EQ(sink->finishes(), 1);
}

}  // namespace
}  // namespace strata::engine

namespace strata::engine {
namespace {

// Pools the hidden states it is handed: their mean, L2-normalised.
class EmbeddingSink final : public RequestSink {
 public:
  util::StatusOr<int32_t> Choose(std::span<const float>) override {
    return util::InternalError("an embedding request must not sample");
  }
  bool OnToken(int32_t) override { return false; }
  void OnHidden(std::span<const float> rows, int32_t n_rows) override {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t n_embd = rows.size() / static_cast<size_t>(n_rows);
    sum_.resize(n_embd, 0.0);
    for (size_t t = 0; t < static_cast<size_t>(n_rows); ++t)
      for (size_t d = 0; d < n_embd; ++d) sum_[d] += rows[t * n_embd + d];
    n_rows_ += n_rows;
  }
  void OnRestart() override {
    std::lock_guard<std::mutex> lock(mu_);
    sum_.clear();
    n_rows_ = 0;
    ++restarts_;
  }
  void OnFinish(FinishReason, const util::Status& status, const Usage&) override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    double norm = 0;
    for (double& v : sum_) {
      v /= n_rows_;
      norm += v * v;
    }
    norm = std::sqrt(norm);
    for (double v : sum_) embedding_.push_back(static_cast<float>(norm > 0 ? v / norm : 0.0));
    done_ = true;
    cv_.notify_all();
  }
  std::vector<float> Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    EXPECT_TRUE(status_.ok()) << status_.ToString();
    return embedding_;
  }
  int restarts() {
    std::lock_guard<std::mutex> lock(mu_);
    return restarts_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  util::Status status_;
  std::vector<double> sum_;  // Σ rows since the last restart
  int32_t n_rows_ = 0;
  int restarts_ = 0;
  std::vector<float> embedding_;
};

TEST_F(SchedulerTest, EmbeddingsAreUnitMeansOfHiddenStatesWhateverTheChunking) {
  auto engine = MakeEngine(256, 256);
  // The reference: one forward pass over the prompt, mean of the hidden states.
  const auto prompt = Prompt(21, 5);
  std::vector<double> mean(static_cast<size_t>(tiny_.model->config().n_embd), 0.0);
  {
    const SeqId s = engine->NewSequence();
    Engine::Work w{s, prompt, false, true};
    ASSERT_TRUE(engine->Step(std::span(&w, 1)).ok());
    const auto h = engine->hidden();
    for (size_t t = 0; t < prompt.size(); ++t)
      for (size_t d = 0; d < mean.size(); ++d) mean[d] += h[t * mean.size() + d] / prompt.size();
    engine->FreeSequence(s);
  }
  double norm = 0;
  for (double v : mean) norm += v * v;
  norm = std::sqrt(norm);
  // Also with the prefix cache: the second request finds the first one's
  // blocks cached, and must still evaluate every token for its hidden state.
  for (const auto& [chunk, ns] :
       {std::pair<int32_t, uint64_t>{512, 0}, {4, 0}, {512, 31}, {4, 31}}) {
    auto sched = Scheduler::Start(*engine, {.max_running = 2, .max_batch_tokens = chunk}, *log_);
    auto sink = std::make_shared<EmbeddingSink>();
    SchedulerRequest r;
    r.prompt = prompt;
    r.embed = true;
    r.sink = sink;
    r.cache_namespace = ns;
    ASSERT_TRUE((*sched)->Submit(std::move(r)).ok());
    const auto e = sink->Wait();
    ASSERT_EQ(e.size(), mean.size());
    double len = 0;
    for (size_t d = 0; d < e.size(); ++d) {
      EXPECT_NEAR(e[d], mean[d] / norm, 1e-5)
          << "chunk " << chunk << " namespace " << ns << " dim " << d;
      len += static_cast<double>(e[d]) * e[d];
    }
    EXPECT_NEAR(len, 1.0, 1e-5);
  }
}

TEST_F(SchedulerTest, APreemptedEmbeddingIsHandedItsHiddenStatesAgainFromTheStart) {
  // The reference: each prompt alone, with room to spare.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<float>> alone;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(Prompt(60, i));
    auto engine = MakeEngine(128, 256);
    auto sched = Scheduler::Start(*engine, {}, *log_);
    auto sink = std::make_shared<EmbeddingSink>();
    SchedulerRequest r;
    r.prompt = prompts.back();
    r.embed = true;
    r.sink = sink;
    ASSERT_TRUE((*sched)->Submit(std::move(r)).ok());
    alone.push_back(sink->Wait());
  }
  // 40 blocks of 4 tokens hold 2 of these prompts at once: admitting them
  // together forces preemptions, and a preempted request starts again.
  auto engine = MakeEngine(128, 40);
  auto sched = Scheduler::Start(*engine, {.max_running = 6, .max_batch_tokens = 512}, *log_);
  std::vector<std::shared_ptr<EmbeddingSink>> sinks;
  for (const auto& p : prompts) {
    sinks.push_back(std::make_shared<EmbeddingSink>());
    SchedulerRequest r;
    r.prompt = p;
    r.embed = true;
    r.sink = sinks.back();
    ASSERT_TRUE((*sched)->Submit(std::move(r)).ok());
  }
  int restarts = 0;
  for (size_t i = 0; i < sinks.size(); ++i) {
    // Bitwise: the same rows, summed in the same order.
    EXPECT_EQ(sinks[i]->Wait(), alone[i]) << "input " << i;
    restarts += sinks[i]->restarts();
  }
  EXPECT_GT((*sched)->Stats().preemptions, 0) << "the test did not exercise preemption";
  EXPECT_EQ(restarts, (*sched)->Stats().preemptions);
}

}  // namespace
}  // namespace strata::engine

namespace strata::engine {
namespace {

// A control with fixed limits that remembers what it was shown.
class FixedCapControl final : public SchedulerControl {
 public:
  explicit FixedCapControl(int32_t cap, int32_t max_waiting = -1)
      : cap_(cap), max_waiting_(max_waiting) {}
  AdmissionLimits BeforeAdmission(const SchedulerStats& stats) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    last_ = stats;
    return {.max_running = cap_, .max_waiting = max_waiting_};
  }
  std::chrono::milliseconds idle_tick() const override { return std::chrono::milliseconds(50); }
  int calls() {
    std::lock_guard<std::mutex> l(mu_);
    return calls_;
  }
  SchedulerStats last() {
    std::lock_guard<std::mutex> l(mu_);
    return last_;
  }

 private:
  const int32_t cap_;
  const int32_t max_waiting_;
  std::mutex mu_;
  int calls_ = 0;        // guarded by mu_
  SchedulerStats last_;  // guarded by mu_
};

// Counts how many of its requests hold a sequence at once; each admission
// returns `max_tokens_cap`. Callbacks run on the scheduler thread.
struct Concurrency {
  std::mutex mu;
  int now = 0, peak = 0, admissions = 0;  // guarded by mu
};
class AdmitSink final : public RequestSink {
 public:
  AdmitSink(std::shared_ptr<Concurrency> c, int32_t max_tokens_cap)
      : c_(std::move(c)), cap_(max_tokens_cap) {}
  int32_t OnAdmit() override {
    std::lock_guard<std::mutex> lock(c_->mu);
    ++c_->admissions;
    c_->peak = std::max(c_->peak, ++c_->now);
    return cap_;
  }
  util::StatusOr<int32_t> Choose(std::span<const float>) override { return 5; }
  bool OnToken(int32_t) override {
    ++tokens_;
    return true;
  }
  void OnFinish(FinishReason reason, const util::Status&, const Usage&) override {
    std::lock_guard<std::mutex> lock(c_->mu);
    --c_->now;
    reason_ = reason;
  }
  int tokens() const { return tokens_.load(); }
  FinishReason reason() {
    std::lock_guard<std::mutex> lock(c_->mu);
    return reason_;
  }

 private:
  std::shared_ptr<Concurrency> c_;
  const int32_t cap_;
  std::atomic<int> tokens_{0};
  FinishReason reason_ = FinishReason::kCancelled;  // guarded by c_->mu
};

TEST_F(SchedulerTest, TheControlCapsRunningSequencesAndOnAdmitCapsMaxTokens) {
  auto engine = MakeEngine(256, 256);
  FixedCapControl control(1);
  auto sched = Scheduler::Start(*engine, {.max_running = 4, .control = &control}, *log_);
  ASSERT_TRUE(sched.ok());
  auto c = std::make_shared<Concurrency>();
  std::vector<std::shared_ptr<AdmitSink>> sinks;
  for (int i = 0; i < 3; ++i) {
    sinks.push_back(std::make_shared<AdmitSink>(c, /*max_tokens_cap=*/3));
    ASSERT_TRUE((*sched)->Submit({Prompt(6, i), 10, false, sinks.back()}).ok());
  }
  EXPECT_TRUE((*sched)->Drain(std::chrono::minutes(1)));
  EXPECT_EQ(c->peak, 1) << "the control allowed one sequence at a time";
  EXPECT_EQ(c->admissions, 3);
  for (auto& s : sinks) {
    EXPECT_EQ(s->tokens(), 3) << "OnAdmit's cap replaced max_tokens 10";
    EXPECT_EQ(s->reason(), FinishReason::kLength);
  }
  EXPECT_GT(control.calls(), 0);
  EXPECT_EQ(control.last().kv_blocks_total, 256);
}

TEST_F(SchedulerTest, TheControlsWaitingLimitRefusesNewRequestsButKeepsAcceptedOnes) {
  auto engine = MakeEngine(256, 256);
  FixedCapControl control(/*cap=*/1, /*max_waiting=*/1);
  auto sched = Scheduler::Start(*engine, {.max_running = 4, .control = &control}, *log_);
  ASSERT_TRUE(sched.ok());
  // The gate runs (the one slot) and holds the scheduler thread.
  auto gate = std::make_shared<testing::SchedulerGate>();
  ASSERT_TRUE((*sched)->Submit({Prompt(6, 0), 1, false, gate}).ok());
  gate->WaitHolding();
  auto c = std::make_shared<Concurrency>();
  auto waiting = std::make_shared<AdmitSink>(c, 0);
  ASSERT_TRUE((*sched)->Submit({Prompt(6, 1), 4, false, waiting}).ok()) << "nobody waits yet";
  auto refused = (*sched)->Submit({Prompt(6, 2), 4, false, std::make_shared<AdmitSink>(c, 0)});
  EXPECT_EQ(refused.status().code(), util::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("shedding load"), std::string::npos);
  EXPECT_EQ((*sched)->Stats().refused, 1);
  gate->Open();
  EXPECT_TRUE((*sched)->Drain(std::chrono::minutes(1)));
  EXPECT_EQ(waiting->tokens(), 4) << "the accepted request ran";
  EXPECT_EQ(c->admissions, 1);
}

TEST_F(SchedulerTest, APreemptedRequestIsAdmittedOnlyOnce) {
  // As in PreemptionUnderKvPressureKeepsOutputsExact: preemptions happen, but
  // OnAdmit (the request's terms) is called once per request.
  auto engine = MakeEngine(128, 40);
  auto sched = Scheduler::Start(
      *engine, {.max_running = 8, .max_batch_tokens = 64, .kv_pressure = 0}, *log_);
  ASSERT_TRUE(sched.ok());
  auto c = std::make_shared<Concurrency>();
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(
        (*sched)->Submit({Prompt(20, i), 40, false, std::make_shared<AdmitSink>(c, 0)}).ok());
  }
  EXPECT_TRUE((*sched)->Drain(std::chrono::minutes(1)));
  EXPECT_GT((*sched)->Stats().preemptions, 0) << "the test did not exercise preemption";
  EXPECT_EQ(c->admissions, 6);
}

// Memory-aware admission on the workload that forces preemptions above:
// six requests of 20 + 40 tokens (15 blocks each at the end) in a pool of
// 40 blocks. Under pressure, requests wait for the blocks the running ones
// will need, or start with fewer tokens granted; nothing is preempted, and
// every answer is the start of the one it would get alone.
TEST_F(SchedulerTest, MemoryAwareAdmissionWaitsOrGrantsFewerTokensInsteadOfPreempting) {
  for (const int32_t min_grant : {64, 8}) {
    SCOPED_TRACE(min_grant);
    auto engine = MakeEngine(128, 40);
    auto sched = Scheduler::Start(
        *engine,
        {.max_running = 8, .max_batch_tokens = 64, .kv_pressure = 0.9, .kv_min_grant = min_grant},
        *log_);
    ASSERT_TRUE(sched.ok());
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 6; ++i) {
      prompts.push_back(Prompt(20, i));
      sinks.push_back(std::make_shared<RecordingSink>());
      ASSERT_TRUE((*sched)->Submit({prompts.back(), 40, false, sinks.back()}).ok());
    }
    int capped = 0;
    for (size_t i = 0; i < sinks.size(); ++i) {
      sinks[i]->Wait();
      const Usage u = sinks[i]->usage();
      EXPECT_EQ(u.preemptions, 0) << "request " << i;
      EXPECT_EQ(u.completion_tokens + u.max_tokens_cut, 40) << "request " << i;
      const std::vector<int32_t> alone = Alone(prompts[i], 40);
      const std::vector<int32_t> got = sinks[i]->tokens();
      ASSERT_EQ(got.size(), static_cast<size_t>(u.completion_tokens));
      ASSERT_LE(got.size(), alone.size());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), alone.begin())) << "request " << i;
      capped += u.max_tokens_cut > 0 ? 1 : 0;
    }
    const SchedulerStats st = (*sched)->Stats();
    EXPECT_EQ(st.preemptions, 0);
    EXPECT_EQ(st.kv_capped, capped);
    if (min_grant == 64) {
      // No request is granted fewer than its 40 tokens: they wait instead.
      EXPECT_EQ(capped, 0);
      EXPECT_GT(st.kv_waits, 0);
    } else {
      EXPECT_GT(capped, 0) << "the test did not exercise a smaller grant";
    }
    EXPECT_EQ(st.kv_blocks_used, 0);
  }
}

TEST_F(SchedulerTest, MemoryAwareAdmissionOptionsAreChecked) {
  auto engine = MakeEngine(128, 40);
  EXPECT_FALSE(Scheduler::Start(*engine, {.kv_pressure = 1.0}, *log_).ok());
  EXPECT_FALSE(Scheduler::Start(*engine, {.kv_pressure = -0.1}, *log_).ok());
  EXPECT_FALSE(Scheduler::Start(*engine, {.kv_pressure = 0.5, .kv_min_grant = 0}, *log_).ok());
}

}  // namespace
}  // namespace strata::engine
