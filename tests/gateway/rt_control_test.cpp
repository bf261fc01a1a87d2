// The RT-Switcher wired to the scheduler and the gateway: EffectivePolicy,
// RtControl on a FakeClock, and the whole path (gateway -> scheduler ->
// sinks) through a latency breach. Every test moves time by hand; the
// concurrent ones line requests up with SchedulerGate, never with sleeps.
#include "gateway/rt_control.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/engine.h"
#include "gateway/gateway.h"
#include "testing/fake_clock.h"
#include "testing/scheduler_gate.h"
#include "testing/tiny_model.h"
#include "util/log.h"

namespace strata::gateway {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

gateway::Policy Level(int32_t level, double trace, sampling::SamplingTier tier, int32_t batch,
                      int32_t max_tokens) {
  return {.level = level,
          .trace_sample_rate = trace,
          .sampling_tier = tier,
          .max_batch_size = batch,
          .max_tokens_cap = max_tokens};
}

TEST(EffectivePolicy, WithoutPressureItIsTheLevelItself) {
  const auto levels = gateway::DefaultLevels();
  for (int32_t l = 0; l < 3; ++l) {
    const gateway::Policy p = EffectivePolicy(levels, l, /*kv_pressure=*/false);
    EXPECT_EQ(p.level, l);
    EXPECT_EQ(p.max_batch_size, levels[static_cast<size_t>(l)].max_batch_size);
    EXPECT_EQ(p.max_tokens_cap, levels[static_cast<size_t>(l)].max_tokens_cap);
  }
}

TEST(EffectivePolicy, PressureTightensOnlyTheCapsOfDegradedLevels) {
  const auto levels = gateway::DefaultLevels();  // caps: none, {32, 1024}, {8, 256}
  const gateway::Policy l0 = EffectivePolicy(levels, 0, true);
  EXPECT_EQ(l0.max_batch_size, 0) << "full quality is never tightened";
  EXPECT_EQ(l0.max_tokens_cap, 0);
  const gateway::Policy l1 = EffectivePolicy(levels, 1, true);
  EXPECT_EQ(l1.level, 1);
  EXPECT_EQ(l1.trace_sample_rate, 0.5) << "only the caps move";
  EXPECT_EQ(l1.sampling_tier, sampling::SamplingTier::kTopK);
  EXPECT_EQ(l1.max_batch_size, 8) << "the next level's caps";
  EXPECT_EQ(l1.max_tokens_cap, 256);
  const gateway::Policy l2 = EffectivePolicy(levels, 2, true);
  EXPECT_EQ(l2.max_batch_size, 4) << "halved at the bottom";
  EXPECT_EQ(l2.max_tokens_cap, 128);
}

TEST(EffectivePolicy, ACapOfNoneNeverWinsOverASetOne) {
  const std::vector<gateway::Policy> levels = {
      Level(0, 1, sampling::SamplingTier::kEntropyTargeted, 0, 0),
      Level(1, 1, sampling::SamplingTier::kTopK, 16, 0),
      Level(2, 1, sampling::SamplingTier::kTopK, 0, 100),
      Level(3, 1, sampling::SamplingTier::kTopK, 1, 0)};
  const gateway::Policy p1 = EffectivePolicy(levels, 1, true);
  EXPECT_EQ(p1.max_batch_size, 16);
  EXPECT_EQ(p1.max_tokens_cap, 100);
  const gateway::Policy p2 = EffectivePolicy(levels, 2, true);
  EXPECT_EQ(p2.max_batch_size, 1);
  EXPECT_EQ(p2.max_tokens_cap, 100);
  const gateway::Policy p3 = EffectivePolicy(levels, 3, true);
  EXPECT_EQ(p3.max_batch_size, 1) << "halving keeps at least one sequence";
  EXPECT_EQ(p3.max_tokens_cap, 0);
}

// Thresholds from the TTFT ceiling alone (the window never fills), one
// breaching interval to step down, three calm ones to step up, no dwell.
RtControlOptions CeilingOptions(std::vector<gateway::Policy> levels, double ceiling_s = 0.5) {
  RtControlOptions o;
  o.switcher.levels = std::move(levels);
  o.switcher.interval = seconds(1);
  o.switcher.min_interval_samples = 1;
  o.switcher.window_intervals = 1000;
  o.switcher.min_window_intervals = 1000;
  o.switcher.ttft.ceiling_s = ceiling_s;
  o.switcher.breach_intervals = 1;
  o.switcher.calm_intervals = 3;
  o.switcher.min_dwell = seconds(0);
  o.kv_pressure_free_fraction = 0.1;
  o.trace_seed = 42;
  return o;
}

engine::SchedulerStats Kv(int32_t used, int32_t total) {
  engine::SchedulerStats s;
  s.kv_blocks_used = used;
  s.kv_blocks_total = total;
  return s;
}

class RtControlTest : public ::testing::Test {
 protected:
  void Make(RtControlOptions o) {
    auto c = RtControl::Create(o, metrics_, clock_, log_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    rt_ = std::move(c).value();
  }
  // One interval with `n` TTFT samples of `ttft`, then the tick that closes it.
  // Returns the batch cap the scheduler is given.
  int32_t Interval(milliseconds ttft, int n = 3, engine::SchedulerStats kv = Kv(0, 100)) {
    for (int i = 0; i < n; ++i) rt_->ObserveTtft(ttft);
    clock_.Advance(seconds(1));
    return Batch(kv);
  }
  int32_t Batch(engine::SchedulerStats kv) { return rt_->BeforeAdmission(kv).max_running; }
  bool Rendered(const std::string& line) const {
    return metrics_.Render().find(line + "\n") != std::string::npos;
  }

  testing::FakeClock clock_;
  util::CapturingLogger log_;
  obs::MetricsRegistry metrics_;
  std::unique_ptr<RtControl> rt_;
};

TEST_F(RtControlTest, ABreachStepsDownWithAReasonAndCalmStepsBackUp) {
  Make(CeilingOptions(gateway::DefaultLevels()));
  EXPECT_TRUE(Rendered("strata_rt_level 0"));
  EXPECT_EQ(Interval(milliseconds(100)), 0) << "calm: level 0 has no batch cap";
  EXPECT_EQ(rt_->level(), 0);
  EXPECT_EQ(Interval(milliseconds(2000)), 32) << "breach: level 1's batch cap";
  EXPECT_EQ(rt_->level(), 1);
  EXPECT_TRUE(log_.Contains(
      "rt-switcher: step down 0 -> 1: breach for 1 intervals; ttft p95 2.0000 s > threshold "
      "0.5000 s"))
      << log_.Lines().back();
  EXPECT_TRUE(
      log_.Contains("new requests get level 1: trace 0.5, sampling topk, max batch 32, "
                    "max_tokens cap 1024"));
  EXPECT_TRUE(Rendered("strata_rt_level 1"));
  EXPECT_TRUE(Rendered("strata_rt_switch_total{direction=\"down\"} 1"));
  EXPECT_TRUE(Rendered("strata_rt_threshold_seconds{signal=\"ttft\"} 0.5"));
  EXPECT_TRUE(Rendered("strata_rt_p95_seconds{signal=\"ttft\"} 2"));
  EXPECT_TRUE(Rendered("strata_rt_max_tokens_cap 1024"));
  // Quiet intervals count as calm: three of them step back up.
  Interval(milliseconds(0), 0);
  Interval(milliseconds(0), 0);
  EXPECT_EQ(rt_->level(), 1);
  EXPECT_EQ(Interval(milliseconds(0), 0), 0);
  EXPECT_EQ(rt_->level(), 0);
  EXPECT_TRUE(log_.Contains("rt-switcher: step up 1 -> 0: calm for 3 intervals"));
  EXPECT_TRUE(Rendered("strata_rt_switch_total{direction=\"up\"} 1"));
}

TEST_F(RtControlTest, AnAdmissionKeepsItsPolicyWhateverHappensLater) {
  Make(CeilingOptions(gateway::DefaultLevels()));
  const RtControl::Admission before = rt_->Admit();
  Interval(milliseconds(2000));
  Interval(milliseconds(2000));
  ASSERT_EQ(rt_->level(), 2);
  EXPECT_EQ(before.policy->level, 0);
  EXPECT_EQ(before.policy->max_tokens_cap, 0);
  EXPECT_EQ(before.policy->sampling_tier, sampling::SamplingTier::kEntropyTargeted);
  const RtControl::Admission after = rt_->Admit();
  EXPECT_EQ(after.policy->level, 2);
  EXPECT_EQ(after.policy->max_tokens_cap, 256);
}

TEST_F(RtControlTest, TracingFollowsTheLevelsSampleRate) {
  Make(CeilingOptions({Level(0, 1.0, sampling::SamplingTier::kEntropyTargeted, 0, 0),
                       Level(1, 0.5, sampling::SamplingTier::kTopK, 0, 0),
                       Level(2, 0.0, sampling::SamplingTier::kTopK, 0, 0)}));
  auto traced = [&](int n) {
    int k = 0;
    for (int i = 0; i < n; ++i) k += rt_->Admit().traced ? 1 : 0;
    return k;
  };
  EXPECT_EQ(traced(1000), 1000);
  Interval(milliseconds(2000));
  ASSERT_EQ(rt_->level(), 1);
  const int half = traced(4000);
  EXPECT_GT(half, 1800);  // binomial(4000, 0.5): sigma ~32; a fixed seed makes it exact anyway
  EXPECT_LT(half, 2200);
  Interval(milliseconds(2000));
  ASSERT_EQ(rt_->level(), 2);
  EXPECT_EQ(traced(1000), 0);
}

TEST_F(RtControlTest, KvPressureTightensADegradedLevelWithHysteresis) {
  Make(CeilingOptions(gateway::DefaultLevels()));
  // Level 0: a nearly full pool changes nothing but the gauge.
  EXPECT_EQ(Batch(Kv(95, 100)), 0);
  EXPECT_TRUE(Rendered("strata_rt_kv_pressure 1"));
  EXPECT_EQ(rt_->Admit().policy->max_tokens_cap, 0);
  EXPECT_EQ(Batch(Kv(50, 100)), 0);
  EXPECT_TRUE(Rendered("strata_rt_kv_pressure 0"));
  // Level 1 with 5% free: level 2's caps.
  Interval(milliseconds(2000));
  ASSERT_EQ(rt_->level(), 1);
  EXPECT_EQ(Batch(Kv(95, 100)), 8);
  EXPECT_EQ(rt_->Admit().policy->max_tokens_cap, 256);
  EXPECT_TRUE(log_.Contains("rt-switcher: KV pressure on: 5 of 100 blocks free"));
  // 12% free is above the 10% that started it but below 15%: still on.
  EXPECT_EQ(Batch(Kv(88, 100)), 8);
  // 20% free: off, level 1's own caps again.
  EXPECT_EQ(Batch(Kv(80, 100)), 32);
  EXPECT_EQ(rt_->Admit().policy->max_tokens_cap, 1024);
  EXPECT_TRUE(log_.Contains("rt-switcher: KV pressure off: 20 of 100 blocks free"));
}

TEST_F(RtControlTest, ADegradedLevelBoundsTheQueueByTheAdmissionRate) {
  // Queue wait: none, 1 s, 0.5 s; a TTFT SLO of 4 s (half of it is above both).
  Make(CeilingOptions(gateway::DefaultLevels(), 4.0));
  // TTFT of 3 s: neither a breach nor calm (the band [2.8, 4] s).
  auto interval_with_admissions = [&](int n) {
    for (int i = 0; i < n; ++i) rt_->Admit();
    for (int i = 0; i < 3; ++i) rt_->ObserveTtft(milliseconds(3000));
    clock_.Advance(seconds(1));
    return rt_->BeforeAdmission(Kv(0, 100));
  };
  EXPECT_EQ(interval_with_admissions(20).max_waiting, -1) << "level 0: only --queue";
  EXPECT_TRUE(Rendered("strata_rt_max_waiting 0"));
  // A breach (with 20 admissions in it): level 1, 1 s of queue at 20/s.
  for (int i = 0; i < 20; ++i) rt_->Admit();
  EXPECT_EQ(Interval(milliseconds(5000)), 32);
  EXPECT_EQ(rt_->level(), 1);
  EXPECT_EQ(rt_->BeforeAdmission(Kv(0, 100)).max_waiting, 20);
  EXPECT_TRUE(Rendered("strata_rt_max_waiting 20"));
  // Level 2 (0.5 s); the rate is over the last 5 intervals: 20, 0, 10, 10, 10.
  Interval(milliseconds(5000));
  ASSERT_EQ(rt_->level(), 2);
  for (int k = 0; k < 3; ++k) interval_with_admissions(10);
  ASSERT_EQ(rt_->level(), 2);
  EXPECT_EQ(rt_->BeforeAdmission(Kv(0, 100)).max_waiting, 5) << "10/s x 0.5 s";
  // No admissions at all: still one may wait.
  for (int k = 0; k < 5; ++k) interval_with_admissions(0);
  EXPECT_EQ(rt_->BeforeAdmission(Kv(0, 100)).max_waiting, 1);
}

TEST_F(RtControlTest, TheQueueNeverHoldsMoreThanHalfTheTtftSlo) {
  Make(CeilingOptions(gateway::DefaultLevels(), 0.5));  // level 1 would allow 1 s
  for (int i = 0; i < 40; ++i) rt_->Admit();
  Interval(milliseconds(2000));
  ASSERT_EQ(rt_->level(), 1);
  EXPECT_EQ(rt_->BeforeAdmission(Kv(0, 100)).max_waiting, 10) << "40/s x 0.25 s";
}

TEST_F(RtControlTest, RefusedRequestsAreABreachAndBlockTheWayBackUp) {
  Make(CeilingOptions(gateway::DefaultLevels()));
  engine::SchedulerStats s = Kv(0, 100);
  rt_->BeforeAdmission(s);
  // Fast first tokens, but 4 requests refused for load: a breach.
  s.refused = 4;
  for (int i = 0; i < 3; ++i) rt_->ObserveTtft(milliseconds(10));
  rt_->BeforeAdmission(s);
  clock_.Advance(seconds(1));
  rt_->BeforeAdmission(s);
  EXPECT_EQ(rt_->level(), 1);
  EXPECT_TRUE(log_.Contains("breach for 1 intervals (4 requests refused for load)"));
  // Calm latency, but still refusing: level 1 -> 2, never back up.
  for (int k = 0; k < 6; ++k) {
    s.refused += 1;
    rt_->BeforeAdmission(s);
    Interval(milliseconds(10), 3, s);
  }
  EXPECT_EQ(rt_->level(), 2);
  EXPECT_FALSE(log_.Contains("rt-switcher: step up"));
}

// One interval of load: `submitted` requests arrive, `admitted` start, three
// first tokens after `ttft`; returns the level after the interval closes.
int32_t Load(RtControl& rt, testing::FakeClock& clock, engine::SchedulerStats& s, int submitted,
             int admitted, milliseconds ttft) {
  s.submitted += submitted;
  rt.BeforeAdmission(s);
  for (int i = 0; i < admitted; ++i) rt.Admit();
  for (int i = 0; i < 3; ++i) rt.ObserveTtft(ttft);
  clock.Advance(seconds(1));
  rt.BeforeAdmission(s);
  return rt.level();
}

TEST_F(RtControlTest, AStepUpWaitsWhileDemandExceedsWhatTheLevelAboveServed) {
  Make(CeilingOptions(gateway::DefaultLevels()));
  engine::SchedulerStats s = Kv(0, 100);
  rt_->BeforeAdmission(s);
  // Level 0 serves 10 of 16 requests a second and breaches: its capacity is 10/s.
  ASSERT_EQ(Load(*rt_, clock_, s, 16, 10, milliseconds(2000)), 1);
  // Level 1 keeps up with 16/s and is calm, but level 0 could not: held.
  for (int k = 0; k < 6; ++k) EXPECT_EQ(Load(*rt_, clock_, s, 16, 16, milliseconds(10)), 1);
  EXPECT_TRUE(
      log_.Contains("rt-switcher: holding level 1: 16.0 requests/s submitted, above 90% "
                    "of the 10.0/s level 0 served when it last breached"));
  EXPECT_FALSE(log_.Contains("step up 1 -> 0"));
  // Demand falls to 5/s: once the 5-interval mean is below 9/s, it steps up.
  int32_t level = 1;
  for (int k = 0; k < 6 && level == 1; ++k) level = Load(*rt_, clock_, s, 5, 5, milliseconds(10));
  EXPECT_EQ(level, 0);
  EXPECT_TRUE(log_.Contains("rt-switcher: level 1 may step up again"));
}

TEST_F(RtControlTest, ABreachWithoutExcessDemandHoldsNothingBack) {
  Make(CeilingOptions(gateway::DefaultLevels()));
  engine::SchedulerStats s = Kv(0, 100);
  rt_->BeforeAdmission(s);
  // Slow first tokens at 5 requests/s, all admitted: latency, not load.
  ASSERT_EQ(Load(*rt_, clock_, s, 5, 5, milliseconds(2000)), 1);
  int32_t level = 1;
  for (int k = 0; k < 3; ++k) level = Load(*rt_, clock_, s, 5, 5, milliseconds(10));
  EXPECT_EQ(level, 0) << "three calm intervals step up";
  EXPECT_FALSE(log_.Contains("holding level"));
}

TEST_F(RtControlTest, BadOptionsAreRefused) {
  RtControlOptions o = CeilingOptions(gateway::DefaultLevels());
  o.kv_pressure_free_fraction = 1.0;
  EXPECT_EQ(RtControl::Create(o, metrics_, clock_, log_).status().code(),
            util::StatusCode::kInvalidArgument);
  o = CeilingOptions(gateway::DefaultLevels());
  o.switcher.levels.clear();
  EXPECT_EQ(RtControl::Create(o, metrics_, clock_, log_).status().code(),
            util::StatusCode::kInvalidArgument);
}

// The gateway, the scheduler and the control together.
class RtServingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = testing::MakeTinyModel();
    ASSERT_NE(tiny_.model, nullptr);
    // Level 1 traces everything too, so both levels' trace lines can be read.
    auto rt = RtControl::Create(
        CeilingOptions({Level(0, 1.0, sampling::SamplingTier::kEntropyTargeted, 0, 0),
                        Level(1, 1.0, sampling::SamplingTier::kTopK, 2, 3)}),
        metrics_, clock_, log_);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    engine::EngineOptions eo;
    eo.n_ctx = 128;
    eo.n_seq_max = 8;
    engine_ = std::move(engine::Engine::Create(*tiny_.model, eo, log_)).value();
    sched_ = std::move(
                 engine::Scheduler::Start(*engine_, {.max_running = 4, .control = rt_.get()}, log_))
                 .value();
    GatewayOptions go;
    go.model_name = "tiny";
    go.max_tokens_cap = 64;
    go.l1.max_bytes = 1 << 20;
    go.rt_control = rt_.get();
    gw_ = std::move(Gateway::Create(*tiny_.model, *sched_, metrics_, go, clock_, log_)).value();
  }
  void TearDown() override {
    gw_.reset();
    sched_.reset();
  }
  // A gate holding the scheduler thread at its first token.
  std::shared_ptr<testing::SchedulerGate> Gate(int32_t max_tokens) {
    auto gate = std::make_shared<testing::SchedulerGate>();
    engine::SchedulerRequest r;
    r.prompt = {1, 5, 9, 13};
    r.max_tokens = max_tokens;
    r.stop_at_eog = false;
    r.sink = gate;
    EXPECT_TRUE(sched_->Submit(std::move(r)).ok());
    return gate;
  }
  CompletionRequest Request(const std::string& id, int32_t max_tokens) {
    CompletionRequest r;
    r.request_id = id;
    r.prompt = "once upon a time";
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0f;
    r.sampling.min_p = 0.0f;
    r.sampling.target_entropy = 2.0f;
    return r;
  }
  struct Done {
    int32_t completion_tokens = -1;
    FinishReason finish = FinishReason::kCancelled;
  };
  Done Finish(Generation& g) {
    Done d;
    const auto far = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (true) {
      auto e = g.Next(far);
      if (!e.ok()) break;
      if (e->kind == Event::Kind::kFinish) {
        EXPECT_TRUE(e->status.ok()) << e->status.ToString();
        d.completion_tokens = e->usage.completion_tokens;
        d.finish = e->finish;
      }
    }
    return d;
  }
  std::string TraceLine(const std::string& id) const {
    for (const std::string& l : log_.Lines()) {
      if (l.find("[" + id + "] trace ") != std::string::npos) return l;
    }
    return "";
  }
  bool Rendered(const std::string& line) const {
    return metrics_.Render().find(line + "\n") != std::string::npos;
  }

  testing::TinyModel tiny_;
  testing::FakeClock clock_;
  util::CapturingLogger log_;
  obs::MetricsRegistry metrics_;
  std::unique_ptr<RtControl> rt_;  // outlives the scheduler and the gateway
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::Scheduler> sched_;
  std::unique_ptr<Gateway> gw_;
};

TEST_F(RtServingTest, ABreachChangesNewRequestsTermsWhileInFlightOnesKeepTheirs) {
  // The scheduler is held while A (and a second gate behind it) queue for 2 s.
  auto g1 = Gate(2);
  g1->WaitHolding();
  auto a = gw_->Start(Request("req-a", 8));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto g2 = Gate(1);
  clock_.Advance(seconds(2));
  g1->Open();
  // A was admitted at level 0 and got its first token 2 s after submission;
  // the scheduler is held again, by g2, right after that token.
  g2->WaitHolding();
  EXPECT_EQ(rt_->level(), 0);
  clock_.Advance(milliseconds(1500));
  auto b = gw_->Start(Request("req-b", 8));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  g2->Open();
  // The next admission round closes the interval holding A's TTFT (2 s >
  // the 0.5 s ceiling): level 1, whose terms B gets. A keeps level 0's.
  const Done done_b = Finish(**b);
  const Done done_a = Finish(**a);
  EXPECT_EQ(rt_->level(), 1);
  EXPECT_EQ(done_a.completion_tokens, 8) << "in flight before the switch: no cap";
  EXPECT_EQ(done_a.finish, FinishReason::kLength);
  EXPECT_EQ(done_b.completion_tokens, 3) << "admitted after the switch: level 1's cap";
  EXPECT_EQ(done_b.finish, FinishReason::kLength);

  EXPECT_TRUE(log_.Contains(
      "rt-switcher: step down 0 -> 1: breach for 1 intervals; ttft p95 2.0000 s > threshold "
      "0.5000 s"));
  EXPECT_TRUE(Rendered("strata_rt_level 1"));
  EXPECT_TRUE(Rendered("strata_rt_switch_total{direction=\"down\"} 1"));
  EXPECT_TRUE(Rendered("strata_rt_max_batch_size 2"));
  EXPECT_TRUE(Rendered("strata_traced_choices_total 2"));
  const std::string ta = TraceLine("req-a"), tb = TraceLine("req-b");
  EXPECT_NE(ta.find("queue_wait_ms=2000.0 "), std::string::npos) << ta;
  EXPECT_NE(ta.find("ttft_ms=2000.0 "), std::string::npos) << ta;
  EXPECT_NE(ta.find("completion_tokens=8 "), std::string::npos) << ta;
  EXPECT_NE(ta.find("rt_level=0 sampling=entropy max_tokens_cap=0"), std::string::npos) << ta;
  EXPECT_NE(tb.find("queue_wait_ms=0.0 "), std::string::npos) << tb;
  EXPECT_NE(tb.find("completion_tokens=3 "), std::string::npos) << tb;
  EXPECT_NE(tb.find("rt_level=1 sampling=topk max_tokens_cap=3"), std::string::npos) << tb;

  // A deterministic request answered on level 1's cheaper terms is served but
  // not stored in L1: the key describes the request as asked.
  CompletionRequest c = Request("req-c", 4);
  c.sampling.temperature = 0.0f;
  c.sampling.target_entropy = -1.0f;
  for (int i = 0; i < 2; ++i) {
    auto g = gw_->Start(c);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ((*g)->cache_outcome(), CacheOutcome::kMiss) << "run " << i;
    EXPECT_EQ(Finish(**g).completion_tokens, 3);
  }
  EXPECT_EQ(gw_->l1_stats()->entries, 0u);
}

TEST_F(RtServingTest, AtFullQualityDeterministicAnswersAreStillStored) {
  CompletionRequest c = Request("req-c", 4);
  c.sampling.temperature = 0.0f;
  c.sampling.target_entropy = -1.0f;
  auto first = gw_->Start(c);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(Finish(**first).completion_tokens, 4);
  auto second = gw_->Start(c);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)->cache_outcome(), CacheOutcome::kL1);
}

TEST_F(RtControlTest, ANewSamplingPolicyRampsInOverItsTime) {
  const auto topk = sampling::SamplingTier::kTopK;
  const auto entropy = sampling::SamplingTier::kEntropyTargeted;
  Make(CeilingOptions({Level(0, 1.0, entropy, 0, 0)}));
  // Share of 2,000 admissions on the new policy.
  auto share_new = [&] {
    int n = 0;
    for (int i = 0; i < 2000; ++i) n += rt_->Admit().policy->sampling_tier == topk ? 1 : 0;
    return n / 2000.0;
  };
  const RtControl::Admission admitted_before = rt_->Admit();
  ASSERT_TRUE(rt_->Reconfigure(CeilingOptions({Level(0, 1.0, topk, 0, 0)}), seconds(100)).ok());
  EXPECT_TRUE(
      log_.Contains("policy migration: new admissions move to the new levels over 100.0 s"));
  EXPECT_LT(share_new(), 0.02) << "at the start almost every admission keeps the old policy";
  clock_.Advance(seconds(50));
  EXPECT_NEAR(rt_->policy_ramp_progress(), 0.5, 1e-9);
  EXPECT_NEAR(share_new(), 0.5, 0.05);
  clock_.Advance(seconds(25));
  EXPECT_NEAR(share_new(), 0.75, 0.05);
  clock_.Advance(seconds(26));
  EXPECT_DOUBLE_EQ(share_new(), 1.0);
  EXPECT_DOUBLE_EQ(rt_->policy_ramp_progress(), 1.0);
  EXPECT_EQ(admitted_before.policy->sampling_tier, entropy)
      << "an admitted choice keeps its policy";
}

TEST_F(RtControlTest, WithoutARampANewPolicyHoldsAtOnce) {
  Make(CeilingOptions({Level(0, 1.0, sampling::SamplingTier::kEntropyTargeted, 0, 0)}));
  ASSERT_TRUE(
      rt_->Reconfigure(CeilingOptions({Level(0, 1.0, sampling::SamplingTier::kTopK, 0, 0)})).ok());
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(rt_->Admit().policy->sampling_tier, sampling::SamplingTier::kTopK);
  }
  EXPECT_FALSE(
      rt_->Reconfigure(CeilingOptions(gateway::DefaultLevels()), std::chrono::hours(48)).ok());
}

}  // namespace
}  // namespace strata::gateway
