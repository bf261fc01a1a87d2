// The sampler, the tracer's ids and its spans: parent-based decisions, the
// rate and its factor, parent links, bounds, times from the injected clock.
#include "obs/tracer.h"

#include <gtest/gtest.h>

#include <set>

#include "testing/fake_clock.h"
#include "testing/span_recorder.h"
#include "util/random.h"

namespace strata::obs {
namespace {

using testing::Attr;

SpanContext Parent(bool sampled) {
  return *ParseTraceparent(std::string("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-") +
                           (sampled ? "01" : "00"));
}

TEST(DecideSampling, AParentsFlagDecidesWhateverTheRate) {
  for (double rate : {0.0, 0.5, 1.0}) {
    for (double u : {0.0, 0.49, 0.999}) {
      const SamplingDecision yes = DecideSampling(Parent(true), rate, u);
      EXPECT_TRUE(yes.sampled);
      EXPECT_EQ(yes.by, SampledBy::kParent);
      const SamplingDecision no = DecideSampling(Parent(false), rate, u);
      EXPECT_FALSE(no.sampled);
      EXPECT_EQ(no.by, SampledBy::kParent);
    }
  }
}

TEST(DecideSampling, WithoutAParentTheDrawDecidesAgainstTheRate) {
  EXPECT_FALSE(DecideSampling(std::nullopt, 0.0, 0.0).sampled);      // rate 0: never
  EXPECT_TRUE(DecideSampling(std::nullopt, 1.0, 0.999999).sampled);  // rate 1: always
  EXPECT_TRUE(DecideSampling(std::nullopt, 0.25, 0.2499).sampled);
  EXPECT_FALSE(DecideSampling(std::nullopt, 0.25, 0.25).sampled);
  EXPECT_EQ(DecideSampling(std::nullopt, 0.25, 0.1).by, SampledBy::kRate);
  // A seeded stream of draws samples the rate's share.
  util::Rng rng(42);
  int sampled = 0;
  for (int i = 0; i < 20000; ++i)
    sampled += DecideSampling(std::nullopt, 0.1, rng.Uniform()).sampled;
  EXPECT_NEAR(sampled / 20000.0, 0.1, 0.01);
}

struct TracerFixture : public ::testing::Test {
  std::shared_ptr<Tracer> Make(double rate, uint64_t seed = 7) {
    auto t = Tracer::Create({.sample_rate = rate, .seed = seed}, recorder, metrics, clock);
    EXPECT_TRUE(t.ok());
    return *t;
  }
  testing::FakeClock clock;
  MetricsRegistry metrics;
  std::shared_ptr<testing::SpanRecorder> recorder = std::make_shared<testing::SpanRecorder>();
};

TEST_F(TracerFixture, TheRateAndItsFactorSetTheShareOfRecordedRequests) {
  auto tracer = Make(0.5);
  int full = 0, lowered = 0;
  for (int i = 0; i < 10000; ++i) {
    full += tracer->StartRequest(std::nullopt, "", 1.0)->recording();
    lowered += tracer->StartRequest(std::nullopt, "", 0.2)->recording();  // an RT level at 0.2
  }
  EXPECT_NEAR(full / 10000.0, 0.5, 0.02);
  EXPECT_NEAR(lowered / 10000.0, 0.1, 0.015);
  EXPECT_EQ(tracer->StartRequest(std::nullopt, "", 0.0)->decision().rate, 0.0);
  EXPECT_NE(metrics.Render().find("strata_trace_requests_total{sampled=\"true\",by=\"rate\"}"),
            std::string::npos);
}

TEST_F(TracerFixture, ANewSampleRateHoldsForRequestsStartedFromThenOn) {
  auto tracer = Make(1.0);
  auto before = tracer->StartRequest(std::nullopt, "", 1.0);
  ASSERT_TRUE(tracer->SetSampleRate(0).ok());
  EXPECT_EQ(tracer->sample_rate(), 0);
  EXPECT_TRUE(before->recording());  // a running request keeps its decision
  for (int i = 0; i < 100; ++i)
    EXPECT_FALSE(tracer->StartRequest(std::nullopt, "", 1.0)->recording());
  EXPECT_FALSE(tracer->SetSampleRate(1.5).ok());
  EXPECT_FALSE(tracer->SetSampleRate(-0.1).ok());
  EXPECT_EQ(tracer->sample_rate(), 0);
}

TEST_F(TracerFixture, TheSameSeedGivesTheSameIdsAndDecisions) {
  auto a = Make(0.5, 99);
  MetricsRegistry other;  // each registry takes a metric once
  auto b = *Tracer::Create({.sample_rate = 0.5, .seed = 99}, recorder, other, clock);
  for (int i = 0; i < 50; ++i) {
    auto ta = a->StartRequest(std::nullopt, "", 1.0);
    auto tb = b->StartRequest(std::nullopt, "", 1.0);
    EXPECT_EQ(ta->trace_id(), tb->trace_id());
    EXPECT_EQ(ta->root_span_id(), tb->root_span_id());
    EXPECT_EQ(ta->recording(), tb->recording());
  }
}

TEST_F(TracerFixture, AnIncomingContextKeepsItsTraceIdAndTracestate) {
  auto tracer = Make(0.0);  // the rate says no, the parent says yes
  auto t = tracer->StartRequest(Parent(true), "congo=t61rcWkgMzE", 1.0);
  EXPECT_TRUE(t->recording());
  EXPECT_EQ(t->trace_id().Hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_NE(t->root_span_id().Hex(), "00f067aa0ba902b7");
  EXPECT_EQ(t->tracestate(), "congo=t61rcWkgMzE");
  // Upstream, the caller of a request is the span that sends it.
  const SpanId client{0x1122334455667788ULL};
  EXPECT_EQ(t->OutgoingTraceparent(client),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-1122334455667788-01");
  EXPECT_EQ(t->Traceresponse(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-" + t->root_span_id().Hex() + "-01");
  // A tracestate without its traceparent is not kept.
  EXPECT_EQ(tracer->StartRequest(std::nullopt, "congo=1", 1.0)->tracestate(), "");
}

TEST_F(TracerFixture, AnUnsampledRequestStillPropagatesItsContextButRecordsNothing) {
  auto tracer = Make(1.0);
  auto t = tracer->StartRequest(Parent(false), "", 1.0);
  EXPECT_FALSE(t->recording());
  EXPECT_TRUE(t->participating());
  EXPECT_EQ(t->OutgoingTraceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-" + t->root_span_id().Hex() + "-00");
  Span root = t->StartRoot("chat m", SpanKind::kServer, clock.Now());
  Span child = t->StartSpan("cache.lookup l1", SpanKind::kInternal, clock.Now());
  EXPECT_FALSE(root.recording());
  EXPECT_FALSE(child.recording());
  child.SetString("cache.tier", "l1");
  child.End();
  root.End();
  EXPECT_TRUE(recorder->spans().empty());
}

TEST_F(TracerFixture, PassThroughForwardsTheCallersContextUnchanged) {
  auto t = RequestTrace::PassThrough(Parent(true), "rojo=1");
  EXPECT_FALSE(t->recording());
  EXPECT_FALSE(t->participating());
  EXPECT_EQ(t->OutgoingTraceparent(SpanId{5}),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_EQ(t->Traceresponse(), "");
  EXPECT_EQ(t->tracestate(), "rojo=1");
}

TEST_F(TracerFixture, SpansLinkToTheirParentsAndCarryTheirTimes) {
  auto tracer = Make(1.0);
  auto t = tracer->StartRequest(Parent(true), "k=v", 1.0);
  const auto t0 = clock.Now();
  Span root = t->StartRoot("chat m", SpanKind::kServer, t0);
  clock.Advance(std::chrono::milliseconds(3));
  Span client = t->StartSpan("chat up", SpanKind::kClient, clock.Now());
  Span inner = t->StartSpan("inner", SpanKind::kInternal, clock.Now(), client.id());
  clock.Advance(std::chrono::milliseconds(5));
  inner.End();
  client.SetError("upstream said 500");
  client.End();
  root.SetInt("gen_ai.usage.output_tokens", 12);
  root.End(t0 + std::chrono::milliseconds(20));
  const auto spans = recorder->spans();
  ASSERT_EQ(spans.size(), 3u);
  const SpanData& r = spans[2];
  EXPECT_EQ(r.span_id, t->root_span_id());
  EXPECT_EQ(r.parent_span_id.Hex(), "00f067aa0ba902b7");  // the caller's span
  EXPECT_EQ(r.kind, SpanKind::kServer);
  EXPECT_EQ(r.end_unix_ns - r.start_unix_ns, 20'000'000);
  EXPECT_EQ(r.trace_state, "k=v");
  EXPECT_EQ(std::get<int64_t>(*Attr(r, "gen_ai.usage.output_tokens")), 12);
  const SpanData& c = spans[1];
  EXPECT_EQ(c.parent_span_id, r.span_id);
  EXPECT_EQ(c.start_unix_ns - r.start_unix_ns, 3'000'000);
  EXPECT_TRUE(c.error);
  EXPECT_EQ(c.status_message, "upstream said 500");
  EXPECT_EQ(spans[0].parent_span_id, c.span_id);
  std::set<uint64_t> ids;
  for (const SpanData& s : spans) {
    EXPECT_EQ(s.trace_id, t->trace_id());
    ids.insert(s.span_id.value);
  }
  EXPECT_EQ(ids.size(), 3u);
  // The wall anchor: the fake clock's wall time at the request's start.
  EXPECT_EQ(r.start_unix_ns,
            std::chrono::duration_cast<std::chrono::nanoseconds>(clock.WallNow().time_since_epoch())
                    .count() -
                8'000'000);
}

TEST_F(TracerFixture, ARootSpanWithoutAParentHasNone) {
  auto tracer = Make(1.0);
  auto t = tracer->StartRequest(std::nullopt, "", 1.0);
  t->StartRoot("chat m", SpanKind::kServer, clock.Now()).End();
  ASSERT_EQ(recorder->spans().size(), 1u);
  EXPECT_FALSE(recorder->spans()[0].parent_span_id.valid());
}

TEST_F(TracerFixture, ASpanEndsOnceAndWhenDestroyed) {
  auto tracer = Make(1.0);
  auto t = tracer->StartRequest(std::nullopt, "", 1.0);
  {
    Span s = t->StartSpan("a", SpanKind::kInternal, clock.Now());
    s.End();
    s.End();
    Span moved = t->StartSpan("b", SpanKind::kInternal, clock.Now());
    Span to = std::move(moved);
    moved.End();  // empty after the move
  }
  const auto spans = recorder->spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "a");
  EXPECT_EQ(spans[1].name, "b");
}

TEST_F(TracerFixture, AttributesAreBoundedAndReplaced) {
  auto tracer = Make(1.0);
  auto t = tracer->StartRequest(std::nullopt, "", 1.0);
  Span s = t->StartSpan(std::string(1000, 'n'), SpanKind::kInternal, clock.Now());
  s.SetString("k", "first");
  s.SetString("k", "second");
  // A long value is cut at a character boundary: "é" is 2 bytes.
  std::string long_value;
  for (int i = 0; i < 600; ++i) long_value += "\xc3\xa9";
  s.SetString("long", long_value);
  for (int i = 0; i < 100; ++i) s.SetInt("n" + std::to_string(i), i);
  s.End();
  const SpanData d = recorder->spans().at(0);
  EXPECT_EQ(d.name.size(), kMaxSpanNameBytes);
  EXPECT_EQ(std::get<std::string>(*Attr(d, "k")), "second");
  EXPECT_EQ(std::get<std::string>(*Attr(d, "long")).size(), kMaxAttributeBytes);
  EXPECT_EQ(d.attributes.size(), kMaxSpanAttributes);
  EXPECT_EQ(d.dropped_attributes, 2u + 100u - kMaxSpanAttributes);
}

TEST_F(TracerFixture, ARateOutsideZeroToOneIsRefused) {
  EXPECT_FALSE(Tracer::Create({.sample_rate = 1.5}, recorder, metrics, clock).ok());
  EXPECT_FALSE(Tracer::Create({.sample_rate = -0.1}, recorder, metrics, clock).ok());
  EXPECT_FALSE(Tracer::Create({.sample_rate = 0.5}, nullptr, metrics, clock).ok());
}

}  // namespace
}  // namespace strata::obs
