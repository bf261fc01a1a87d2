// The batching OTLP/HTTP exporter (obs/otlp.h): a bounded queue, batches by
// size and age, one request in flight, retries, and a bounded shutdown.
#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "obs/otlp.h"

namespace strata::obs {

struct OtlpExporter::Metrics {
  explicit Metrics(MetricsRegistry& reg)
      : exported(
            reg.Counter("strata_trace_spans_exported_total", "Spans the OTLP collector accepted.")
                .With({})),
        duration(reg.Histogram("strata_trace_export_duration_seconds",
                               "Time from sending an OTLP export request to its answer.", {},
                               ExponentialBuckets(0.001, 2, 14))
                     .With({})) {
    auto& dropped = reg.Counter("strata_trace_spans_dropped_total",
                                "Spans not exported: queue_full (the export queue was full), "
                                "export_failed (the collector refused or could not be reached), "
                                "rejected (the collector's partial success), shutdown.",
                                {"reason"});
    // Resolved once (every reason shows, at 0): a storm of drops is a storm
    // of atomic adds, not of label lookups.
    for (const char* reason : {"queue_full", "export_failed", "rejected", "shutdown"}) {
      dropped_by.push_back({reason, &dropped.With({reason})});
    }
    auto& requests = reg.Counter("strata_trace_export_requests_total",
                                 "OTLP export requests by result (ok: 2xx; error: a transport "
                                 "failure or any other status, retried or not).",
                                 {"result"});
    requests_ok = &requests.With({"ok"});
    requests_error = &requests.With({"error"});
  }
  CounterValue& exported;
  HistogramValue& duration;
  std::vector<std::pair<std::string_view, CounterValue*>> dropped_by;  // by reason
  CounterValue* requests_ok = nullptr;
  CounterValue* requests_error = nullptr;
};

namespace {

bool RetryableStatus(int status) {
  return status == 429 || status == 502 || status == 503 || status == 504;
}

// The spans an OTLP partial success says the collector rejected
// ({"partialSuccess":{"rejectedSpans":"3", ...}}; the number may be a
// string or a number); 0 when it says nothing.
uint64_t RejectedSpans(std::string_view body) {
  const std::string_view key = "\"rejectedSpans\"";
  size_t at = body.find(key);
  if (at == std::string_view::npos) return 0;
  at += key.size();
  while (at < body.size() && (body[at] == ' ' || body[at] == ':' || body[at] == '"')) ++at;
  uint64_t n = 0;
  while (at < body.size() && body[at] >= '0' && body[at] <= '9' && n < (1ull << 40)) {
    n = n * 10 + static_cast<uint64_t>(body[at++] - '0');
  }
  return n;
}

}  // namespace

OtlpExporter::OtlpExporter(const OtlpExporterOptions& options, OtlpTransport& transport,
                           const util::Clock& clock, util::Logger& log)
    : options_(options), transport_(transport), clock_(clock), log_(log) {}

OtlpExporter::~OtlpExporter() = default;

util::StatusOr<std::shared_ptr<OtlpExporter>> OtlpExporter::Create(const OtlpExporterOptions& o,
                                                                   OtlpTransport& transport,
                                                                   MetricsRegistry& metrics,
                                                                   const util::Clock& clock,
                                                                   util::Logger& log) {
  if (o.max_queue_spans < 1 || o.max_queue_spans > (1u << 20)) {
    return util::InvalidArgumentError(fmt::format(
        "the trace export queue of {} spans is outside [1, 1048576]", o.max_queue_spans));
  }
  if (o.max_batch_spans < 1 || o.max_batch_spans > o.max_queue_spans) {
    return util::InvalidArgumentError(
        fmt::format("the trace export batch of {} spans is outside [1, {}] (the queue)",
                    o.max_batch_spans, o.max_queue_spans));
  }
  const auto in_range = [](std::chrono::milliseconds v) {
    return v >= std::chrono::milliseconds(1) && v <= std::chrono::seconds(60);
  };
  if (!in_range(o.batch_interval)) {
    return util::InvalidArgumentError(fmt::format(
        "the trace export interval of {} ms is outside [1, 60000]", o.batch_interval.count()));
  }
  if (!in_range(o.retry_backoff)) {
    return util::InvalidArgumentError(fmt::format(
        "the trace export backoff of {} ms is outside [1, 60000]", o.retry_backoff.count()));
  }
  if (o.max_attempts < 1 || o.max_attempts > 10) {
    return util::InvalidArgumentError(
        fmt::format("trace export attempts {} is outside [1, 10]", o.max_attempts));
  }
  std::shared_ptr<OtlpExporter> e(new OtlpExporter(o, transport, clock, log));
  e->metrics_ = std::make_unique<Metrics>(metrics);
  // Read at render time, weakly: the registry outlives the exporter.
  std::weak_ptr<OtlpExporter> weak = e;
  metrics.GaugeCallback("strata_trace_queue_spans", "Spans waiting in the OTLP export queue.",
                        [weak]() -> double {
                          const auto self = weak.lock();
                          return self ? static_cast<double>(self->stats().queued) : 0.0;
                        });
  return e;
}

OtlpExporterStats OtlpExporter::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  OtlpExporterStats s = stats_;
  s.queued = queue_.size();
  return s;
}

void OtlpExporter::DropLocked(const char* reason, uint64_t n) {
  if (n == 0) return;
  for (const auto& [name, counter] : metrics_->dropped_by) {
    if (name == reason) counter->Inc(static_cast<double>(n));
  }
  const std::string_view r = reason;
  if (r == "queue_full") stats_.dropped_queue_full += n;
  if (r == "export_failed") stats_.dropped_export_failed += n;
  if (r == "rejected") stats_.dropped_rejected += n;
  if (r == "shutdown") stats_.dropped_shutdown += n;
}

std::optional<std::chrono::nanoseconds> OtlpExporter::WakeByLocked(TimePoint due, TimePoint now) {
  if (wake_at_ <= due) return std::nullopt;  // one that runs by then is pending
  wake_at_ = due;
  return std::max<std::chrono::nanoseconds>(due - now, std::chrono::nanoseconds(0));
}

void OtlpExporter::Schedule(std::optional<std::chrono::nanoseconds> delay) {
  if (!delay) return;
  std::weak_ptr<OtlpExporter> weak = weak_from_this();
  transport_.After(*delay, [weak](bool stopped) {
    if (auto self = weak.lock()) self->Flush(stopped);
  });
}

void OtlpExporter::Export(SpanData span) {
  std::optional<std::chrono::nanoseconds> wake;
  {
    const TimePoint now = clock_.Now();
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) {
      DropLocked("shutdown", 1);
      return;
    }
    if (queue_.size() >= options_.max_queue_spans) {
      DropLocked("queue_full", 1);
      return;
    }
    queue_.push_back({std::move(span), now});
    // While a batch is in flight its answer decides what comes next.
    if (!in_flight_) {
      const bool full = queue_.size() >= options_.max_batch_spans || stopping_;
      wake = WakeByLocked(full ? now : queue_.front().at + options_.batch_interval, now);
    }
  }
  Schedule(wake);
}

void OtlpExporter::Flush(bool stopped) {
  std::vector<SpanData> batch;
  std::optional<std::chrono::nanoseconds> wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_at_ = TimePoint::max();  // this was the earliest pending one
    if (stopped || in_flight_ || queue_.empty()) return;
    const TimePoint now = clock_.Now();
    const bool due = stopping_ || queue_.size() >= options_.max_batch_spans ||
                     now >= queue_.front().at + options_.batch_interval;
    if (!due) {
      wake = WakeByLocked(queue_.front().at + options_.batch_interval, now);
    } else {
      const size_t n = std::min(queue_.size(), options_.max_batch_spans);
      batch.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front().span));
        queue_.pop_front();
      }
      in_flight_ = true;
    }
  }
  if (batch.empty()) {
    Schedule(wake);
    return;
  }
  Send(std::make_shared<const std::vector<SpanData>>(std::move(batch)), 1);
}

void OtlpExporter::Send(std::shared_ptr<const std::vector<SpanData>> batch, int32_t attempt) {
  // Encoded here, on the transport's thread (about a microsecond a span),
  // for each attempt: the body moves into the request instead of being
  // copied, and a retry (rare) encodes again.
  std::string body = EncodeOtlpJson(options_.resource, *batch);
  std::weak_ptr<OtlpExporter> weak = weak_from_this();
  const TimePoint started = clock_.Now();
  transport_.Post(std::move(body), [weak, batch, attempt,
                                    started](const util::StatusOr<OtlpTransport::Answer>& answer) {
    if (auto self = weak.lock()) self->OnAnswer(answer, batch, attempt, started);
  });
}

void OtlpExporter::OnAnswer(const util::StatusOr<OtlpTransport::Answer>& answer,
                            std::shared_ptr<const std::vector<SpanData>> batch, int32_t attempt,
                            TimePoint started) {
  const size_t n_spans = batch->size();
  const TimePoint now = clock_.Now();
  metrics_->duration.Observe(util::SecondsBetween(started, now));
  const bool ok = answer.ok() && answer->status >= 200 && answer->status < 300;
  std::optional<std::chrono::nanoseconds> wake;
  std::optional<std::chrono::milliseconds> retry_in;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ok) {
      ++stats_.requests_ok;
      metrics_->requests_ok->Inc();
      const uint64_t rejected = std::min<uint64_t>(RejectedSpans(answer->body), n_spans);
      stats_.exported += n_spans - rejected;
      metrics_->exported.Inc(static_cast<double>(n_spans - rejected));
      DropLocked("rejected", rejected);
      if (failing_) log_.Info("OTLP trace export works again");
      failing_ = false;
      wake = FinishedLocked(now);
    } else {
      ++stats_.requests_error;
      metrics_->requests_error->Inc();
      const std::string why = answer.ok()
                                  ? fmt::format("the collector answered HTTP {}", answer->status)
                                  : answer.status().message();
      const bool cancelled = !answer.ok() && answer.status().code() == util::StatusCode::kCancelled;
      const bool retryable = !cancelled && (!answer.ok() || RetryableStatus(answer->status));
      if (retryable && attempt < options_.max_attempts && !stopping_ && !stopped_) {
        if (!failing_) {
          log_.Warn("OTLP trace export failed ({}); retrying, and dropping spans while it fails",
                    why);
        }
        failing_ = true;
        retry_in = options_.retry_backoff * (1 << (attempt - 1));  // the batch stays in flight
      } else {
        if (!failing_) log_.Warn("OTLP trace export failed ({}); the batch is dropped", why);
        failing_ = true;
        DropLocked(stopped_ || cancelled ? "shutdown" : "export_failed", n_spans);
        wake = FinishedLocked(now);
      }
    }
  }
  if (retry_in) {
    std::weak_ptr<OtlpExporter> weak = weak_from_this();
    transport_.After(*retry_in, [weak, batch, n_spans, attempt](bool stopped) {
      const auto self = weak.lock();
      if (self == nullptr) return;
      if (stopped) {
        std::lock_guard<std::mutex> relock(self->mu_);
        self->DropLocked("shutdown", n_spans);
        (void)self->FinishedLocked(self->clock_.Now());
        return;
      }
      self->Send(batch, attempt + 1);
    });
  }
  Schedule(wake);
}

std::optional<std::chrono::nanoseconds> OtlpExporter::FinishedLocked(TimePoint now) {
  in_flight_ = false;
  idle_.notify_all();
  if (queue_.empty() || stopped_) return std::nullopt;
  const bool full = queue_.size() >= options_.max_batch_spans || stopping_;
  return WakeByLocked(full ? now : queue_.front().at + options_.batch_interval, now);
}

bool OtlpExporter::Shutdown(std::chrono::milliseconds timeout) {
  std::optional<std::chrono::nanoseconds> wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return drained_;
    stopping_ = true;
    if (!in_flight_ && !queue_.empty()) wake = WakeByLocked(clock_.Now(), clock_.Now());
  }
  Schedule(wake);
  std::unique_lock<std::mutex> lock(mu_);
  // Real time, not the injected clock: this bounds how long the process
  // waits to exit.
  drained_ = idle_.wait_for(lock, timeout, [this] { return queue_.empty() && !in_flight_; });
  stopped_ = true;
  DropLocked("shutdown", queue_.size());
  queue_.clear();
  return drained_;
}

}  // namespace strata::obs
