// What tracing costs a request's own thread, and what the exporter's thread
// spends per span (docs/benchmarks.md, "Tracing overhead").
//
// BM_Request*: one request's tracing as the server and the gateway do it
// for an L1 hit: the sampling decision, a root span with the attributes the
// server sets (19), one cache-lookup span (4), the traceresponse header, and
// both spans handed to the exporter. Unsampled: rate 0 (the spans are
// empty). Sampled: into a SpanExporter that discards (the request thread's
// share), or into the real OtlpExporter over a transport that answers at
// once on the calling thread (its queue and, amortised, its encoding).
// BM_EncodeOtlpJson: the exporter thread's JSON per span, batches of 512.
// BM_Parse*: the W3C headers.
#include <benchmark/benchmark.h>

#include <atomic>

#include "obs/otlp.h"
#include "obs/trace_context.h"
#include "obs/tracer.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::obs {
namespace {

class Discard final : public SpanExporter {
 public:
  void Export(SpanData span) override { bytes_ += span.name.size(); }

 private:
  std::atomic<size_t> bytes_{0};
};

// Answers every POST 200 at once and runs a timer without delay at once;
// the interval's timers never fire (full batches carry the load).
class InstantTransport final : public OtlpTransport {
 public:
  void Post(std::string, std::function<void(util::StatusOr<Answer>)> done) override {
    done(Answer{200, "{}"});
  }
  void After(std::chrono::nanoseconds delay, std::function<void(bool)> fn) override {
    if (delay.count() == 0) fn(false);
  }
};

void OneRequest(Tracer& tracer, const util::Clock& clock) {
  const auto t0 = clock.Now();
  auto trace = tracer.StartRequest(std::nullopt, "", 1.0);
  Span root = trace->StartRoot("chat", SpanKind::kServer, t0);
  root.SetString("gen_ai.operation.name", "chat");
  root.SetString("http.request.method", "POST");
  root.SetString("http.route", "/v1/chat/completions");
  root.SetString("url.path", "/v1/chat/completions");
  root.SetString("strata.request.id", "8a4ab1aaa349b891");
  root.SetString("strata.trace.sampled_by", "rate");
  root.SetDouble("strata.trace.sample_rate", 1.0);
  root.SetName("chat demo");
  root.SetString("gen_ai.request.model", "demo");
  root.SetString("gen_ai.provider.name", "strata");
  root.SetInt("gen_ai.request.max_tokens", 32);
  root.SetDouble("gen_ai.request.temperature", 0.0);
  root.SetString("strata.tenant", "default");
  root.SetBool("strata.stream", false);
  {
    Span l1 = trace->StartSpan("cache.lookup l1", SpanKind::kInternal, clock.Now());
    l1.SetString("cache.tier", "l1");
    l1.SetString("cache.key.hash", "bfa72d003b3fec51");
    l1.SetInt("cache.ttl.ms", 600000);
    l1.SetBool("cache.hit", true);
    l1.End();
  }
  root.SetString("strata.cache.outcome", "l1");
  root.SetString("gen_ai.response.id", "chatcmpl-8a4ab1aaa349b891");
  root.SetString("gen_ai.response.model", "demo");
  root.SetInt("http.response.status_code", 200);
  root.SetInt("gen_ai.usage.input_tokens", 20);
  root.SetInt("gen_ai.usage.output_tokens", 32);
  if (root.recording()) root.SetStrings("gen_ai.response.finish_reasons", {"length"});
  std::string header = trace->Traceresponse();
  benchmark::DoNotOptimize(header);
  root.End();
}

void BM_RequestUnsampled(benchmark::State& state) {
  MetricsRegistry metrics;
  const util::Clock& clock = util::RealClock();
  auto tracer =
      *Tracer::Create({.sample_rate = 0.0, .seed = 1}, std::make_shared<Discard>(), metrics, clock);
  for (auto _ : state) OneRequest(*tracer, clock);
}
BENCHMARK(BM_RequestUnsampled);

void BM_RequestSampledDiscarded(benchmark::State& state) {
  MetricsRegistry metrics;
  const util::Clock& clock = util::RealClock();
  auto tracer =
      *Tracer::Create({.sample_rate = 1.0, .seed = 1}, std::make_shared<Discard>(), metrics, clock);
  for (auto _ : state) OneRequest(*tracer, clock);
}
BENCHMARK(BM_RequestSampledDiscarded);

void BM_RequestSampledExported(benchmark::State& state) {
  MetricsRegistry metrics;
  const util::Clock& clock = util::RealClock();
  auto log = util::NewNullLogger();
  InstantTransport transport;
  auto exporter = *OtlpExporter::Create({.max_batch_spans = 512}, transport, metrics, clock, *log);
  auto tracer = *Tracer::Create({.sample_rate = 1.0, .seed = 1}, exporter, metrics, clock);
  for (auto _ : state) OneRequest(*tracer, clock);
  state.counters["exported"] = static_cast<double>(exporter->stats().exported);
}
BENCHMARK(BM_RequestSampledExported);

void BM_EncodeOtlpJson(benchmark::State& state) {
  std::vector<SpanData> spans(512);
  for (size_t i = 0; i < spans.size(); ++i) {
    SpanData& s = spans[i];
    s.trace_id = {0x4bf92f3577b34da6ULL + i, 0xa3ce929d0e0e4736ULL};
    s.span_id = {i + 1};
    s.parent_span_id = {i % 2 == 0 ? 0 : i};
    s.name = i % 2 == 0 ? "chat demo" : "cache.lookup l1";
    s.start_unix_ns = 1'700'000'000'000'000'000 + static_cast<int64_t>(i);
    s.end_unix_ns = s.start_unix_ns + 250'000;
    for (int a = 0; a < (i % 2 == 0 ? 19 : 4); ++a) {
      s.attributes.push_back({"gen_ai.attribute." + std::to_string(a),
                              a % 3 == 0 ? AttributeValue(int64_t{a}) : AttributeValue("value")});
    }
  }
  size_t bytes = 0;
  for (auto _ : state) {
    std::string body = EncodeOtlpJson({.service_name = "strata"}, spans);
    bytes = body.size();
    benchmark::DoNotOptimize(body);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(spans.size()));
  state.counters["bytes_per_span"] = static_cast<double>(bytes) / spans.size();
}
BENCHMARK(BM_EncodeOtlpJson);

void BM_ParseTraceContext(benchmark::State& state) {
  const std::string_view state_fields[] = {"congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"};
  for (auto _ : state) {
    auto c = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    benchmark::DoNotOptimize(c);
    std::string ts = ParseTracestate(state_fields);
    benchmark::DoNotOptimize(ts);
  }
}
BENCHMARK(BM_ParseTraceContext);

}  // namespace
}  // namespace strata::obs

BENCHMARK_MAIN();
