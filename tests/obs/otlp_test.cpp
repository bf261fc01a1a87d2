// The OTLP/HTTP JSON encoding and the batching exporter, over a transport
// whose timers and answers the test drives by hand (and a FakeClock): batch
// size and age, the bounded queue and its drop count, retries, partial
// success, shutdown.
#include "obs/otlp.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <deque>
#include <mutex>

#include "testing/fake_clock.h"
#include "util/log.h"

namespace strata::obs {
namespace {

using Json = nlohmann::json;

SpanData MakeSpan(uint64_t id, std::string name = "chat demo") {
  SpanData s;
  s.trace_id = {0x4bf92f3577b34da6ULL, 0xa3ce929d0e0e4736ULL};
  s.span_id = {id};
  s.name = std::move(name);
  s.kind = SpanKind::kServer;
  s.start_unix_ns = 1'700'000'000'000'000'000;
  s.end_unix_ns = 1'700'000'000'250'000'000;
  return s;
}

TEST(EncodeOtlpJson, WritesTheExportTraceServiceRequestShape) {
  SpanData root = MakeSpan(0x00f067aa0ba902b7ULL);
  root.trace_state = "congo=t61rcWkgMzE";
  root.attributes = {
      {"gen_ai.operation.name", std::string("chat")},
      {"gen_ai.usage.input_tokens", int64_t{42}},
      {"gen_ai.request.temperature", 0.7},
      {"cache.hit", true},
      {"gen_ai.response.finish_reasons", std::vector<std::string>{"stop", "length"}}};
  SpanData child = MakeSpan(2, "cache.lookup l1");
  child.kind = SpanKind::kInternal;
  child.parent_span_id = root.span_id;
  child.error = true;
  child.status_message = "broken \"pipe\"";
  const std::vector<SpanData> spans = {child, root};
  const Json j = Json::parse(EncodeOtlpJson(
      {.service_name = "front", .service_version = "0.1.0", .instance_id = "i-1"}, spans));
  ASSERT_EQ(j["resourceSpans"].size(), 1u);
  const Json& rs = j["resourceSpans"][0];
  const Json& res = rs["resource"]["attributes"];
  EXPECT_EQ(res[0]["key"], "service.name");
  EXPECT_EQ(res[0]["value"]["stringValue"], "front");
  EXPECT_EQ(res[1]["key"], "service.version");
  EXPECT_EQ(res[2]["value"]["stringValue"], "i-1");
  ASSERT_EQ(rs["scopeSpans"].size(), 1u);
  EXPECT_EQ(rs["scopeSpans"][0]["scope"]["name"], "strata");
  const Json& out = rs["scopeSpans"][0]["spans"];
  ASSERT_EQ(out.size(), 2u);
  const Json& c = out[0];
  EXPECT_EQ(c["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(c["spanId"], "0000000000000002");
  EXPECT_EQ(c["parentSpanId"], "00f067aa0ba902b7");
  EXPECT_EQ(c["kind"], 1);
  EXPECT_EQ(c["status"]["code"], 2);
  EXPECT_EQ(c["status"]["message"], "broken \"pipe\"");
  const Json& r = out[1];
  EXPECT_FALSE(r.contains("parentSpanId"));  // a root
  EXPECT_FALSE(r.contains("status"));        // unset
  EXPECT_EQ(r["kind"], 2);
  EXPECT_EQ(r["traceState"], "congo=t61rcWkgMzE");
  EXPECT_EQ(r["startTimeUnixNano"], "1700000000000000000");
  EXPECT_EQ(r["endTimeUnixNano"], "1700000000250000000");
  const Json& a = r["attributes"];
  EXPECT_EQ(a[0]["value"]["stringValue"], "chat");
  EXPECT_EQ(a[1]["value"]["intValue"], "42");
  EXPECT_EQ(a[2]["value"]["doubleValue"], 0.7);
  EXPECT_EQ(a[3]["value"]["boolValue"], true);
  EXPECT_EQ(a[4]["value"]["arrayValue"]["values"][1]["stringValue"], "length");
}

TEST(EncodeOtlpJson, InvalidUtf8BecomesReplacementCharacters) {
  SpanData s = MakeSpan(1, "chat \xff\xfe");
  s.attributes = {{"gen_ai.request.model", std::string("m\xc3")}};
  const Json j = Json::parse(EncodeOtlpJson({}, std::vector<SpanData>{s}));
  const Json& span = j["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
  EXPECT_EQ(span["name"], "chat \xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(span["attributes"][0]["value"]["stringValue"], "m\xef\xbf\xbd");
}

TEST(EncodeOtlpJson, AnEmptyBatchIsStillAValidRequest) {
  const Json j = Json::parse(EncodeOtlpJson({}, {}));
  EXPECT_TRUE(j["resourceSpans"][0]["scopeSpans"][0]["spans"].empty());
}

// Timers and answers wait until the test releases them; with `immediate`,
// timers without a delay run at once and every POST is answered
// `auto_status` at once.
class FakeTransport final : public OtlpTransport {
 public:
  void Post(std::string body, std::function<void(util::StatusOr<Answer>)> done) override {
    std::unique_lock<std::mutex> lock(mu_);
    bodies_.push_back(body);
    if (immediate_) {
      lock.unlock();
      done(Answer{auto_status_, ""});
      return;
    }
    posts_.push_back(std::move(done));
  }
  void After(std::chrono::nanoseconds delay, std::function<void(bool)> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    delays_.push_back(delay);
    if (immediate_ && delay.count() == 0) {
      lock.unlock();
      fn(false);
      return;
    }
    timers_.push_back(std::move(fn));
  }

  // Runs every timer scheduled so far (as if their time had come).
  void FireTimers() {
    std::deque<std::function<void(bool)>> due;
    {
      std::lock_guard<std::mutex> lock(mu_);
      due.swap(timers_);
    }
    for (auto& fn : due) fn(false);
  }
  // Answers the oldest POST still waiting.
  void Reply(util::StatusOr<OtlpTransport::Answer> answer) {
    std::function<void(util::StatusOr<OtlpTransport::Answer>)> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ASSERT_FALSE(posts_.empty());
      done = std::move(posts_.front());
      posts_.pop_front();
    }
    done(std::move(answer));
  }
  void Immediate(int status) {
    std::lock_guard<std::mutex> lock(mu_);
    immediate_ = true;
    auto_status_ = status;
  }
  size_t waiting_posts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return posts_.size();
  }
  std::vector<std::string> bodies() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }
  std::vector<std::chrono::nanoseconds> delays() const {
    std::lock_guard<std::mutex> lock(mu_);
    return delays_;
  }

 private:
  mutable std::mutex mu_;  // guards everything below
  std::deque<std::function<void(util::StatusOr<OtlpTransport::Answer>)>> posts_;
  std::deque<std::function<void(bool)>> timers_;
  std::vector<std::string> bodies_;
  std::vector<std::chrono::nanoseconds> delays_;
  bool immediate_ = false;
  int auto_status_ = 200;
};

size_t SpansIn(const std::string& body) {
  return Json::parse(body)["resourceSpans"][0]["scopeSpans"][0]["spans"].size();
}

struct ExporterTest : public ::testing::Test {
  std::shared_ptr<OtlpExporter> Make(OtlpExporterOptions o) {
    auto e = OtlpExporter::Create(o, transport, metrics, clock, *log);
    EXPECT_TRUE(e.ok()) << e.status().message();
    return *e;
  }
  testing::FakeClock clock;
  MetricsRegistry metrics;
  FakeTransport transport;
  std::unique_ptr<util::Logger> log = util::NewNullLogger();
};

TEST_F(ExporterTest, APartialBatchWaitsForTheIntervalAfterItsFirstSpan) {
  auto e = Make({.max_batch_spans = 4, .batch_interval = std::chrono::milliseconds(1000)});
  e->Export(MakeSpan(1));
  clock.Advance(std::chrono::milliseconds(400));
  e->Export(MakeSpan(2));
  ASSERT_EQ(transport.delays().size(), 1u);  // one wake, for the first span's deadline
  EXPECT_EQ(transport.delays()[0], std::chrono::milliseconds(1000));
  // A timer that fires early (600 ms after the first span) sends nothing and waits on.
  clock.Advance(std::chrono::milliseconds(200));
  transport.FireTimers();
  EXPECT_TRUE(transport.bodies().empty());
  ASSERT_EQ(transport.delays().size(), 2u);
  EXPECT_EQ(transport.delays()[1], std::chrono::milliseconds(400));
  clock.Advance(std::chrono::milliseconds(400));
  transport.FireTimers();
  ASSERT_EQ(transport.bodies().size(), 1u);
  EXPECT_EQ(SpansIn(transport.bodies()[0]), 2u);
  transport.Reply(OtlpTransport::Answer{200, "{}"});
  EXPECT_EQ(e->stats().exported, 2u);
  EXPECT_EQ(e->stats().queued, 0u);
}

TEST_F(ExporterTest, AFullBatchGoesAtOnceAndTheRestWaitsForItsAnswer) {
  auto e = Make({.max_batch_spans = 3});
  for (uint64_t i = 1; i <= 7; ++i) e->Export(MakeSpan(i));
  transport.FireTimers();
  ASSERT_EQ(transport.bodies().size(), 1u);  // one batch in flight at a time
  EXPECT_EQ(SpansIn(transport.bodies()[0]), 3u);
  transport.Reply(OtlpTransport::Answer{200, ""});
  transport.FireTimers();  // four left: another full batch at once
  ASSERT_EQ(transport.bodies().size(), 2u);
  EXPECT_EQ(SpansIn(transport.bodies()[1]), 3u);
  transport.Reply(OtlpTransport::Answer{200, ""});
  transport.FireTimers();  // one left, not yet due
  EXPECT_EQ(transport.bodies().size(), 2u);
  clock.Advance(std::chrono::seconds(1));
  transport.FireTimers();
  ASSERT_EQ(transport.bodies().size(), 3u);
  EXPECT_EQ(SpansIn(transport.bodies()[2]), 1u);
  transport.Reply(OtlpTransport::Answer{200, ""});
  EXPECT_EQ(e->stats().exported, 7u);
  EXPECT_EQ(e->stats().requests_ok, 3u);
}

TEST_F(ExporterTest, AFullQueueDropsAndCountsWithoutWaiting) {
  auto e = Make({.max_queue_spans = 4, .max_batch_spans = 2});
  e->Export(MakeSpan(1));
  e->Export(MakeSpan(2));
  transport.FireTimers();  // a batch of 2 in flight; the collector never answers
  ASSERT_EQ(transport.waiting_posts(), 1u);
  // Every Export returns at once; the queue holds 4, the rest are counted.
  for (uint64_t i = 3; i <= 20; ++i) e->Export(MakeSpan(i));
  EXPECT_EQ(e->stats().queued, 4u);
  EXPECT_EQ(e->stats().dropped_queue_full, 14u);
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("strata_trace_spans_dropped_total{reason=\"queue_full\"} 14\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("strata_trace_queue_spans 4\n"), std::string::npos) << text;
  // Once the collector answers, the queue drains.
  transport.Reply(OtlpTransport::Answer{200, ""});
  transport.FireTimers();
  transport.Reply(OtlpTransport::Answer{200, ""});
  transport.FireTimers();
  transport.Reply(OtlpTransport::Answer{200, ""});
  EXPECT_EQ(e->stats().exported, 6u);
  EXPECT_EQ(e->stats().queued, 0u);
}

TEST_F(ExporterTest, RetryableFailuresAreRetriedWithABackoffThatDoubles) {
  auto e = Make(
      {.max_batch_spans = 1, .max_attempts = 3, .retry_backoff = std::chrono::milliseconds(100)});
  e->Export(MakeSpan(1));
  transport.FireTimers();
  transport.Reply(OtlpTransport::Answer{503, ""});
  EXPECT_EQ(transport.waiting_posts(), 0u);  // waiting for the backoff
  transport.FireTimers();
  transport.Reply(util::UnavailableError("connection refused"));
  transport.FireTimers();
  transport.Reply(OtlpTransport::Answer{200, ""});
  const auto d = transport.delays();
  ASSERT_EQ(d.size(), 3u);  // the batch's own wake, then the two backoffs
  EXPECT_EQ(d[1], std::chrono::milliseconds(100));
  EXPECT_EQ(d[2], std::chrono::milliseconds(200));
  EXPECT_EQ(transport.bodies().size(), 3u);
  EXPECT_EQ(transport.bodies()[0], transport.bodies()[2]);  // the same batch each time
  const OtlpExporterStats st = e->stats();
  EXPECT_EQ(st.exported, 1u);
  EXPECT_EQ(st.requests_error, 2u);
  EXPECT_EQ(st.requests_ok, 1u);
}

TEST_F(ExporterTest, TheLastFailedAttemptDropsTheBatch) {
  auto e = Make({.max_batch_spans = 2, .max_attempts = 2});
  e->Export(MakeSpan(1));
  e->Export(MakeSpan(2));
  transport.FireTimers();
  transport.Reply(OtlpTransport::Answer{429, ""});
  transport.FireTimers();
  transport.Reply(OtlpTransport::Answer{504, ""});
  EXPECT_EQ(transport.waiting_posts(), 0u);
  EXPECT_EQ(e->stats().dropped_export_failed, 2u);
  EXPECT_EQ(e->stats().exported, 0u);
  EXPECT_NE(metrics.Render().find("strata_trace_spans_dropped_total{reason=\"export_failed\"} 2\n"),
            std::string::npos);
  // The exporter goes on with the next batch.
  e->Export(MakeSpan(3));
  e->Export(MakeSpan(4));
  transport.FireTimers();
  transport.Reply(OtlpTransport::Answer{200, ""});
  EXPECT_EQ(e->stats().exported, 2u);
}

TEST_F(ExporterTest, ARefusalIsNotRetried) {
  auto e = Make({.max_batch_spans = 1, .max_attempts = 5});
  e->Export(MakeSpan(1));
  transport.FireTimers();
  transport.Reply(OtlpTransport::Answer{400, R"({"code":3,"message":"bad"})"});
  transport.FireTimers();
  EXPECT_EQ(transport.bodies().size(), 1u);
  EXPECT_EQ(e->stats().dropped_export_failed, 1u);
}

TEST_F(ExporterTest, APartialSuccessCountsTheRejectedSpans) {
  auto e = Make({.max_batch_spans = 5});
  for (uint64_t i = 1; i <= 5; ++i) e->Export(MakeSpan(i));
  transport.FireTimers();
  transport.Reply(OtlpTransport::Answer{
      200, R"({"partialSuccess":{"rejectedSpans":"2","errorMessage":"too old"}})"});
  EXPECT_EQ(e->stats().exported, 3u);
  EXPECT_EQ(e->stats().dropped_rejected, 2u);
}

TEST_F(ExporterTest, ShutdownSendsWhatIsQueuedAtOnceThenDropsEverything) {
  auto e = Make({.max_batch_spans = 2, .batch_interval = std::chrono::seconds(60)});
  for (uint64_t i = 1; i <= 5; ++i) e->Export(MakeSpan(i));
  transport.FireTimers();
  transport.Reply(OtlpTransport::Answer{200, ""});  // 2 sent; 3 wait
  transport.Immediate(200);                         // from now on the collector answers at once
  transport.FireTimers();  // 2 more sent; the last one waits for its interval
  EXPECT_EQ(e->stats().exported, 4u);
  EXPECT_TRUE(e->Shutdown(std::chrono::seconds(5)));
  EXPECT_EQ(e->stats().exported, 5u);  // no interval was waited for
  EXPECT_EQ(transport.bodies().size(), 3u);
  e->Export(MakeSpan(6));
  EXPECT_EQ(e->stats().dropped_shutdown, 1u);
  EXPECT_TRUE(e->Shutdown(std::chrono::seconds(5)));  // idempotent
}

TEST_F(ExporterTest, ShutdownIsBoundedWhenTheCollectorDoesNotAnswer) {
  auto e = Make({.max_batch_spans = 1});
  e->Export(MakeSpan(1));
  e->Export(MakeSpan(2));
  transport.FireTimers();  // span 1 in flight, never answered
  EXPECT_FALSE(e->Shutdown(std::chrono::milliseconds(1)));
  EXPECT_EQ(e->stats().dropped_shutdown, 1u);  // span 2
  // The transport stopping cancels the call in flight.
  transport.Reply(util::CancelledError("the client stopped"));
  EXPECT_EQ(e->stats().dropped_shutdown, 2u);
}

TEST_F(ExporterTest, OptionsOutOfRangeAreRefused) {
  std::unique_ptr<util::Logger> l = util::NewNullLogger();
  for (const OtlpExporterOptions& o :
       {OtlpExporterOptions{.max_queue_spans = 0}, OtlpExporterOptions{.max_batch_spans = 5000},
        OtlpExporterOptions{.batch_interval = std::chrono::milliseconds(0)},
        OtlpExporterOptions{.max_attempts = 11},
        OtlpExporterOptions{.retry_backoff = std::chrono::minutes(2)}}) {
    MetricsRegistry reg;
    EXPECT_FALSE(OtlpExporter::Create(o, transport, reg, clock, *l).ok());
  }
}

}  // namespace
}  // namespace strata::obs
