// obs/tracer.h — making spans: one RequestTrace per API request, its spans,
// and the sampling decision that says whether any of them is recorded.
//
// Promise: a request is traced parent-based: a valid incoming traceparent's
// sampled flag decides (both ways), else a draw against the rate
// `sample_rate x rate_factor` (the caller passes the RT-Switcher's trace
// rate as the factor, so a degraded level records fewer traces). Either way
// the request gets ids (the incoming trace id, or a new one, and a span id
// of its own), so that what it sends upstream and answers carries a
// consistent context; only a recorded one makes spans. An unrecorded
// request costs one allocation and a few lock-free draws; its spans are
// empty objects whose setters return at once. Recorded spans go to the
// tracer's SpanExporter when they end (Span::End, or destruction), with
// times from the injected clock as Unix nanoseconds (one steady-to-wall
// anchor per request, so a trace's spans never run backwards).
//
// Without a tracer (no exporter configured) a request that came with a
// valid traceparent still gets a RequestTrace (PassThrough): it records
// nothing and forwards the caller's context unchanged.
//
// Threading: Tracer and RequestTrace are thread-safe (immutable once made;
// ids and draws come from one atomic counter). A Span is thread-compatible:
// one owner at a time.
//
// Usage:
//   auto trace = tracer->StartRequest(ParseTraceparent(header), ParseTracestate(states), 1.0);
//   obs::Span root = trace->StartRoot("chat llama", obs::SpanKind::kServer, t0);
//   root.SetString("gen_ai.operation.name", "chat");
//   obs::Span lookup = trace->StartSpan("cache.lookup l1", obs::SpanKind::kInternal, clock.Now());
//   lookup.SetBool("cache.hit", false);
//   lookup.End();
//   ...
//   root.End();
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "obs/metrics.h"
#include "obs/span.h"
#include "obs/trace_context.h"
#include "util/clock.h"
#include "util/status.h"

namespace strata::obs {

// Who decided whether a request is recorded.
enum class SampledBy { kParent, kRate };
std::string_view SampledByName(SampledBy by);  // "parent", "rate"

struct SamplingDecision {
  bool sampled = false;
  SampledBy by = SampledBy::kRate;
  double rate = 0;  // the effective rate the draw was made against (kRate)
};

// The pure sampler: a valid `parent` decides by its sampled flag; else
// sampled when `u` (uniform in [0, 1)) < `rate` (so rate 0 never, rate 1
// always).
SamplingDecision DecideSampling(const std::optional<SpanContext>& parent, double rate, double u);

struct TracerOptions {
  // [0, 1]: the fraction of requests without a parent that are recorded
  // (before StartRequest's rate factor).
  double sample_rate = 1.0;
  uint64_t seed = 0;  // the ids and the sampling draws
};

class RequestTrace;
class Span;

class Tracer : public std::enable_shared_from_this<Tracer> {
 public:
  // `exporter` (not null) takes every recorded span; `clock` must outlive
  // the tracer and every span. InvalidArgument when sample_rate is outside
  // [0, 1]. Registers strata_trace_requests_total{sampled, by}.
  static util::StatusOr<std::shared_ptr<Tracer>> Create(const TracerOptions& options,
                                                        std::shared_ptr<SpanExporter> exporter,
                                                        MetricsRegistry& metrics,
                                                        const util::Clock& clock);

  // One request's trace. `parent`: the incoming traceparent (nullopt: none,
  // or invalid); `tracestate`: its tracestate as ParseTracestate gave it
  // (dropped without a parent); `rate_factor` in [0, 1] scales the rate.
  std::shared_ptr<RequestTrace> StartRequest(const std::optional<SpanContext>& parent,
                                             std::string tracestate, double rate_factor);

  // The rate of requests without a parent recorded (before the factor);
  // SetSampleRate changes it for requests that start from now on (a
  // reload). InvalidArgument, changing nothing, outside [0, 1]. Thread-safe.
  double sample_rate() const { return sample_rate_.load(std::memory_order_relaxed); }
  util::Status SetSampleRate(double rate);
  // Counts a generation request by how the cache served it (`cache`:
  // "miss", "l1", "l3", "coalesced") and whether it was traced: the series
  // strata_requests_traced_total{cache, traced}, whose traced share per
  // tier is the dashboard's sampled_ratio_by_hit. Thread-safe.
  void CountByCache(std::string_view cache, bool traced);
  const util::Clock& clock() const { return clock_; }

 private:
  friend class RequestTrace;
  friend class Span;
  Tracer(const TracerOptions& options, std::shared_ptr<SpanExporter> exporter,
         MetricsRegistry& metrics, const util::Clock& clock);
  // SplitMix64 over an atomic counter: lock-free, reproducible for a seed.
  uint64_t NextRandom();
  SpanId NewSpanId();
  TraceId NewTraceId();

  const TracerOptions options_;
  std::atomic<double> sample_rate_;  // options_'s, until SetSampleRate
  const std::shared_ptr<SpanExporter> exporter_;
  const util::Clock& clock_;
  std::atomic<uint64_t> state_;
  CounterValue* decisions_[2][2] = {};        // [sampled][by]
  Family<CounterValue>* by_cache_ = nullptr;  // strata_requests_traced_total
};

// One request's trace context; immutable, shared by everything that works
// on the request (its spans, the backend call that propagates it).
class RequestTrace : public std::enable_shared_from_this<RequestTrace> {
 public:
  // The caller's context, forwarded as it came (no tracer: nothing recorded).
  static std::shared_ptr<RequestTrace> PassThrough(const SpanContext& parent,
                                                   std::string tracestate);

  // Spans of this request are recorded and exported.
  bool recording() const { return decision_.sampled && tracer_ != nullptr; }
  // strata takes part (a tracer is configured): it has a root span id of its own.
  bool participating() const { return tracer_ != nullptr; }
  const TraceId& trace_id() const { return trace_id_; }
  // The request's root span (participating), else the caller's span.
  SpanId root_span_id() const { return root_id_; }
  // The incoming context, if the request came with a valid one.
  const std::optional<SpanContext>& parent() const { return parent_; }
  const std::string& tracestate() const { return tracestate_; }
  const SamplingDecision& decision() const { return decision_; }

  // The traceparent of a request this one sends on, made by span `caller`
  // (a CLIENT span; an invalid id: the root span): participating, our
  // context with the sampled flag of the decision; passing through, the
  // caller's context unchanged.
  std::string OutgoingTraceparent(SpanId caller = SpanId{}) const;
  // The traceresponse header's value (the root span, W3C Trace Context
  // response headers); "" when not participating.
  std::string Traceresponse() const;

  // The request's root span: id root_span_id(), parent the incoming one.
  // Not recording: an empty span.
  Span StartRoot(std::string name, SpanKind kind,
                 std::chrono::steady_clock::time_point start) const;
  // A span under `parent` (invalid: the root span). Not recording: an empty span.
  Span StartSpan(std::string name, SpanKind kind, std::chrono::steady_clock::time_point start,
                 SpanId parent = SpanId{}) const;
  // `t` (the injected clock's steady time) as Unix nanoseconds.
  int64_t UnixNanos(std::chrono::steady_clock::time_point t) const;

  // For StartRequest and PassThrough only (public for make_shared).
  struct Init {
    std::shared_ptr<Tracer> tracer;  // null: pass-through
    TraceId trace_id;
    SpanId root_id;
    std::optional<SpanContext> parent;
    std::string tracestate;
    SamplingDecision decision;
    std::chrono::steady_clock::time_point steady_anchor;
    int64_t unix_anchor_ns = 0;
  };
  explicit RequestTrace(Init init);

 private:
  Span Begin(std::string name, SpanKind kind, std::chrono::steady_clock::time_point start,
             SpanId id, SpanId parent) const;

  const std::shared_ptr<Tracer> tracer_;
  const TraceId trace_id_;
  const SpanId root_id_;
  const std::optional<SpanContext> parent_;
  const std::string tracestate_;
  const SamplingDecision decision_;
  const std::chrono::steady_clock::time_point steady_anchor_;
  const int64_t unix_anchor_ns_;
};

// One operation. A recording span collects attributes and goes to the
// exporter when it ends (End, or destruction: ended then); an empty one
// (default, or of an unrecorded request) ignores everything. Keys are the
// semantic conventions' (string literals); strings past
// kMaxAttributeBytes are cut at a character boundary, attributes past
// kMaxSpanAttributes are dropped and counted. Setting a key again
// replaces its value.
class Span {
 public:
  Span() = default;
  Span(Span&& other) noexcept;
  Span& operator=(Span&& other) noexcept;  // ends this one first
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span();

  bool recording() const { return trace_ != nullptr; }
  SpanId id() const { return data_.span_id; }

  // Renames the span (a name known only later, such as the model's).
  void SetName(std::string_view name);
  void SetString(std::string_view key, std::string_view value);
  void SetInt(std::string_view key, int64_t value);
  void SetDouble(std::string_view key, double value);
  void SetBool(std::string_view key, bool value);
  void SetStrings(std::string_view key, std::vector<std::string> values);
  // Status ERROR with `message` (cut like an attribute).
  void SetError(std::string_view message);
  // Ends the span at `end` (or the clock's now) and exports it; later calls do nothing.
  void End(std::chrono::steady_clock::time_point end);
  void End();

 private:
  friend class RequestTrace;
  void Put(std::string_view key, AttributeValue value);
  std::shared_ptr<const RequestTrace> trace_;  // null: empty, or ended
  std::shared_ptr<Tracer> tracer_;             // the exporter and the clock
  SpanData data_;
};

}  // namespace strata::obs
