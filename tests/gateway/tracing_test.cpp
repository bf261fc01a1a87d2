// The spans the gateway and the local backend make under a request's trace:
// each response-tier lookup (L1, the single-flight join) with its tier,
// hit, key hash and TTL, and each choice's queue wait, prefill and decode;
// none for a request that is not recorded, and never the prompt.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "gateway/gateway.h"
#include "gateway/rt_control.h"
#include "testing/fake_clock.h"
#include "testing/scheduler_gate.h"
#include "testing/serving_stack.h"
#include "testing/span_recorder.h"
#include "util/log.h"

namespace strata::gateway {
namespace {

using testing::Attr;

constexpr const char* kPrompt = "the secret little dog";

class GatewayTracingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tracer_ =
        *obs::Tracer::Create({.sample_rate = 1.0, .seed = 3}, recorder_, tracer_metrics_, clock_);
    Build(nullptr);
  }
  void TearDown() override { s_.Stop(); }
  void Build(RtControl* rt) {
    s_.Stop();
    metrics_ = std::make_unique<obs::MetricsRegistry>();
    GatewayOptions go = testing::TinyGatewayOptions();
    go.l1.max_bytes = 8u << 20;
    go.l1.ttl = std::chrono::seconds(60);
    go.coalesce = true;
    go.rt_control = rt;
    engine::SchedulerOptions so;
    so.control = rt;
    testing::StartServingStack(s_, go, *metrics_, clock_, *log_, so);
  }

  CompletionRequest Greedy(int n = 1) {
    CompletionRequest r;
    r.prompt = kPrompt;
    r.max_tokens = 5;
    r.n = n;
    r.ignore_eos = true;  // every choice runs to max_tokens
    r.sampling.temperature = 0.0f;
    return r;
  }
  std::shared_ptr<obs::RequestTrace> Sampled(bool sampled = true) {
    const auto parent =
        obs::ParseTraceparent(std::string("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-") +
                              (sampled ? "01" : "00"));
    return tracer_->StartRequest(parent, "", 1.0);
  }
  void Drain(Generation& g) {
    const auto far = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (g.Next(far).ok()) {
    }
  }
  void Run(const CompletionRequest& r) {
    auto g = s_.gw->Start(r);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    Drain(**g);
  }

  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  testing::FakeClock clock_;
  std::unique_ptr<obs::MetricsRegistry> metrics_;
  obs::MetricsRegistry tracer_metrics_;
  std::shared_ptr<testing::SpanRecorder> recorder_ = std::make_shared<testing::SpanRecorder>();
  std::shared_ptr<obs::Tracer> tracer_;
  testing::ServingStack s_;
};

TEST_F(GatewayTracingTest, AMissRecordsItsLookupsAndEachChoicesPhasesUnderTheRoot) {
  CompletionRequest r = Greedy(2);
  r.trace = Sampled();
  Run(r);
  const auto spans = recorder_->spans();
  std::multiset<std::string> names;
  for (const obs::SpanData& s : spans) {
    names.insert(s.name);
    EXPECT_EQ(s.trace_id, r.trace->trace_id());
    EXPECT_EQ(s.parent_span_id, r.trace->root_span_id()) << s.name;
    EXPECT_EQ(s.kind, obs::SpanKind::kInternal);
    EXPECT_LE(s.start_unix_ns, s.end_unix_ns);
    for (const obs::Attribute& a : s.attributes) {
      if (const auto* v = std::get_if<std::string>(&a.value)) {
        EXPECT_EQ(v->find("secret"), std::string::npos) << a.key;
      }
    }
  }
  EXPECT_EQ(names.count("cache.lookup l1"), 1u);
  EXPECT_EQ(names.count("cache.lookup coalesce"), 1u);
  for (const char* phase : {"queue_wait", "prefill", "decode"}) {
    EXPECT_EQ(names.count(phase), 2u) << phase;  // one per choice
  }
  const obs::SpanData l1 = recorder_->Named("cache.lookup l1").at(0);
  EXPECT_EQ(std::get<std::string>(*Attr(l1, "cache.tier")), "l1");
  EXPECT_FALSE(std::get<bool>(*Attr(l1, "cache.hit")));
  EXPECT_TRUE(std::regex_match(std::get<std::string>(*Attr(l1, "cache.key.hash")),
                               std::regex("^[0-9a-f]{16}$")));
  EXPECT_EQ(std::get<int64_t>(*Attr(l1, "cache.ttl.ms")), 60000);
  const obs::SpanData join = recorder_->Named("cache.lookup coalesce").at(0);
  EXPECT_FALSE(std::get<bool>(*Attr(join, "cache.hit")));
  std::set<int64_t> choices;
  for (const obs::SpanData& d : recorder_->Named("decode")) {
    choices.insert(std::get<int64_t>(*Attr(d, "strata.choice.index")));
    EXPECT_EQ(std::get<int64_t>(*Attr(d, "gen_ai.usage.output_tokens")), 5);
    EXPECT_EQ(std::get<std::string>(*Attr(d, "strata.finish_reason")), "length");
  }
  EXPECT_EQ(choices, (std::set<int64_t>{0, 1}));
  const obs::SpanData prefill = recorder_->Named("prefill").at(0);
  EXPECT_GT(std::get<int64_t>(*Attr(prefill, "gen_ai.usage.input_tokens")), 0);
  EXPECT_EQ(Attr(prefill, "strata.rt.level"), nullptr);  // no RT-Switcher
}

TEST_F(GatewayTracingTest, AnL1HitRecordsALookupThatHitAndNoEngineWork) {
  CompletionRequest r = Greedy();
  Run(r);  // stored, untraced
  EXPECT_TRUE(recorder_->spans().empty());
  r.trace = Sampled();
  Run(r);
  const auto spans = recorder_->spans();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].name, "cache.lookup l1");
  EXPECT_TRUE(std::get<bool>(*Attr(spans[0], "cache.hit")));
}

TEST_F(GatewayTracingTest, AnUnrecordedRequestMakesNoSpans) {
  CompletionRequest r = Greedy(2);
  r.trace = Sampled(/*sampled=*/false);
  Run(r);
  r.trace = nullptr;
  r.max_tokens = 6;
  Run(r);
  EXPECT_TRUE(recorder_->spans().empty());
}

TEST_F(GatewayTracingTest, AFollowerRecordsAJoinThatHit) {
  auto gate = std::make_shared<testing::SchedulerGate>();
  engine::SchedulerRequest hold;
  hold.prompt = {1, 2, 3};
  hold.max_tokens = 2;
  hold.stop_at_eog = false;
  hold.sink = gate;
  ASSERT_TRUE(s_.sched->Submit(std::move(hold)).ok());
  gate->WaitHolding();
  CompletionRequest r = Greedy();
  auto leader = s_.gw->Start(r);
  r.trace = Sampled();
  auto follower = s_.gw->Start(r);
  ASSERT_TRUE(leader.ok() && follower.ok());
  EXPECT_EQ((*follower)->cache_outcome(), CacheOutcome::kCoalesced);
  gate->Open();
  Drain(**leader);
  Drain(**follower);
  const auto joins = recorder_->Named("cache.lookup coalesce");
  ASSERT_EQ(joins.size(), 1u);
  EXPECT_TRUE(std::get<bool>(*Attr(joins[0], "cache.hit")));
  EXPECT_TRUE(recorder_->Named("decode").empty());  // the leader's run is not this trace's
}

TEST_F(GatewayTracingTest, UnderTheRtSwitcherEachPhaseSaysItsLevelAndTier) {
  obs::MetricsRegistry rt_metrics;
  auto rt = RtControl::Create({}, rt_metrics, clock_, *log_);
  ASSERT_TRUE(rt.ok());
  Build(rt->get());
  CompletionRequest r = Greedy();
  r.trace = Sampled();
  Run(r);
  const obs::SpanData decode = recorder_->Named("decode").at(0);
  EXPECT_EQ(std::get<int64_t>(*Attr(decode, "strata.rt.level")), 0);
  EXPECT_EQ(std::get<std::string>(*Attr(decode, "strata.sampling.tier")), "entropy");
  EXPECT_DOUBLE_EQ((*rt)->trace_sample_rate(), 1.0);  // the default ladder's level 0
  s_.Stop();                                          // before the RT-Switcher it reports to
}

}  // namespace
}  // namespace strata::gateway
