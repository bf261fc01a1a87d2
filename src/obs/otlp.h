// obs/otlp.h — OTLP/HTTP trace export: the JSON encoding of spans
// (ExportTraceServiceRequest, docs/formats/otlp_traces.md) and the batching
// exporter that sends it to a collector's /v1/traces.
//
// Promise: Export never blocks a request and never grows without bound:
// spans wait in a queue of at most max_queue_spans; a span that finds it
// full is dropped and counted (strata_trace_spans_dropped_total{reason=
// "queue_full"}). A batch (at most max_batch_spans) is sent as soon as the
// queue holds a full one, or batch_interval after the first span of a
// partial one arrived; one batch is in flight at a time. A batch the
// collector answers 2xx is exported (minus the spans its partial success
// says it rejected); a transport failure or a 429, 502, 503 or 504 is
// retried after retry_backoff (doubling each time) up to max_attempts in
// all; any other answer, or the last failed attempt, drops the batch
// (reason "export_failed"). How long one attempt may take is the
// transport's deadline. The first failure after a success logs one warning
// and the first success after failures one line: an unreachable collector
// never floods the log. Shutdown sends what is queued, without waiting for
// intervals or retries, until the queue is empty or its timeout passes;
// what is left then, and every span exported afterwards, is dropped
// (reason "shutdown").
//
// The network is the composition root's (OtlpTransport, implemented over
// net::HttpClient by cli): obs stays free of sockets, and tests drive the
// exporter with a transport whose timers they fire by hand.
//
// Threading: Export, Shutdown and stats are thread-safe. Batches are
// encoded and sent on the transport's threads (its timer and completion
// callbacks), never on the thread that exports a span.
//
// Usage:
//   auto exporter = OtlpExporter::Create({.resource = {.service_name = "strata"}}, transport,
//                                        metrics, clock, log);
//   auto tracer = Tracer::Create({.sample_rate = 0.1}, *exporter, metrics, clock);
//   ...
//   (*exporter)->Shutdown(std::chrono::seconds(2));   // before the transport stops
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "obs/metrics.h"
#include "obs/span.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::obs {

// What the resource of every exported span says (OpenTelemetry resource
// semantic conventions).
struct OtlpResource {
  std::string service_name = "strata";  // service.name
  std::string service_version = {};     // service.version ("" = not sent)
  std::string instance_id = {};         // service.instance.id ("" = not sent)
};

// The body of one OTLP/HTTP JSON export request (Content-Type
// application/json) holding `spans` under one resource and one
// instrumentation scope ("strata"). Ids are lowercase hex, 64-bit numbers
// decimal strings, enums numbers (the OTLP JSON mapping). Invalid UTF-8 in
// any string is replaced by U+FFFD.
std::string EncodeOtlpJson(const OtlpResource& resource, std::span<const SpanData> spans);

// The network as the exporter needs it.
class OtlpTransport {
 public:
  struct Answer {
    int status = 0;
    std::string body;  // at most the transport's bound (what partial success says)
  };
  virtual ~OtlpTransport() = default;
  // POSTs `body` (application/json) to the collector's traces URL; `done`
  // runs exactly once, on a transport thread, with the answer or the
  // transport's error (deadline, refused, cancelled when stopping). Must
  // not block.
  virtual void Post(std::string body, std::function<void(util::StatusOr<Answer>)> done) = 0;
  // Runs `fn(false)` on a transport thread once `delay` has passed, or
  // `fn(true)` when the transport stops first. Must not block.
  virtual void After(std::chrono::nanoseconds delay, std::function<void(bool stopped)> fn) = 0;
};

struct OtlpExporterOptions {
  size_t max_queue_spans = 4096;                   // [1, 1048576] spans waiting to be sent
  size_t max_batch_spans = 512;                    // [1, max_queue_spans] spans per request
  std::chrono::milliseconds batch_interval{1000};  // [1 ms, 60 s] a partial batch's longest wait
  int32_t max_attempts = 3;                        // [1, 10] tries per batch, the first included
  std::chrono::milliseconds retry_backoff{500};    // [1 ms, 60 s] before the first retry; doubles
  OtlpResource resource = {};
};

struct OtlpExporterStats {
  uint64_t queued = 0;    // spans waiting now
  uint64_t exported = 0;  // accepted by the collector
  uint64_t dropped_queue_full = 0;
  uint64_t dropped_export_failed = 0;
  uint64_t dropped_rejected = 0;  // the collector's partial success rejected them
  uint64_t dropped_shutdown = 0;
  uint64_t requests_ok = 0;     // export requests answered 2xx
  uint64_t requests_error = 0;  // attempts that failed (retried or not)
};

class OtlpExporter final : public SpanExporter, public std::enable_shared_from_this<OtlpExporter> {
 public:
  // `transport`, `clock` and `log` are borrowed and must outlive the
  // exporter; the transport must stop (ending every pending callback) before
  // the exporter goes. InvalidArgument naming the option out of range.
  // Registers the strata_trace_* export metrics.
  static util::StatusOr<std::shared_ptr<OtlpExporter>> Create(const OtlpExporterOptions& options,
                                                              OtlpTransport& transport,
                                                              MetricsRegistry& metrics,
                                                              const util::Clock& clock,
                                                              util::Logger& log);
  ~OtlpExporter() override;

  void Export(SpanData span) override;
  // Sends everything queued, waiting at most `timeout`; true when all of it
  // was answered. From then on every span is dropped. Idempotent.
  bool Shutdown(std::chrono::milliseconds timeout);
  OtlpExporterStats stats() const;

 private:
  struct Metrics;
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Queued {
    SpanData span;
    TimePoint at;  // when it was exported to us
  };
  OtlpExporter(const OtlpExporterOptions& options, OtlpTransport& transport,
               const util::Clock& clock, util::Logger& log);
  // mu_ held: makes sure a Flush runs by `due`: the delay to schedule one
  // after (Schedule, without mu_), or nullopt when an earlier one is pending.
  std::optional<std::chrono::nanoseconds> WakeByLocked(TimePoint due, TimePoint now);
  void Schedule(std::optional<std::chrono::nanoseconds> delay);
  // On a transport thread: sends the next batch if one is due, else waits
  // for it.
  void Flush(bool stopped);
  // Encodes `batch` and posts it (attempt 1, 2, ...).
  void Send(std::shared_ptr<const std::vector<SpanData>> batch, int32_t attempt);
  void OnAnswer(const util::StatusOr<OtlpTransport::Answer>& answer,
                std::shared_ptr<const std::vector<SpanData>> batch, int32_t attempt,
                TimePoint started);
  // mu_ held: the batch in flight is done (exported or dropped); when the
  // next Flush must run (for Schedule).
  std::optional<std::chrono::nanoseconds> FinishedLocked(TimePoint now);
  // mu_ held: counts `n` spans dropped for `reason`.
  void DropLocked(const char* reason, uint64_t n);

  const OtlpExporterOptions options_;
  OtlpTransport& transport_;
  const util::Clock& clock_;
  util::Logger& log_;
  std::unique_ptr<Metrics> metrics_;

  mutable std::mutex mu_;         // guards everything below
  std::condition_variable idle_;  // a batch finished (Shutdown waits on it)
  std::deque<Queued> queue_;
  TimePoint wake_at_ = TimePoint::max();  // the earliest Flush scheduled; max = none
  bool in_flight_ = false;                // a batch is being sent (or waits for its retry)
  bool stopping_ = false;                 // Shutdown began: no intervals, no retries
  bool stopped_ = false;                  // Shutdown ended: everything is dropped
  bool drained_ = false;                  // what Shutdown returned
  bool failing_ = false;                  // the last attempt failed (its warning was logged)
  OtlpExporterStats stats_;               // queued is queue_.size()
};

}  // namespace strata::obs
