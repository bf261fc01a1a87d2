#include "obs/audit_log.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "obs/internal/audit_format.h"
#include "obs/internal/audit_writer.h"
#include "util/utf8.h"

namespace strata::obs {
namespace {

// Appends `s` as a JSON string (invalid UTF-8 replaced first: a record is
// always valid JSON).
void AppendString(std::string& out, std::string_view s) {
  if (!util::AppendJsonString(out, s)) util::AppendJsonString(out, util::SanitizeUtf8(s));
}

void Key(std::string& out, std::string_view key) {
  out += ",\"";
  out += key;
  out += "\":";
}

void StringField(std::string& out, std::string_view key, std::string_view value) {
  Key(out, key);
  AppendString(out, value);
}

// A string, or null when empty.
void OptionalStringField(std::string& out, std::string_view key, std::string_view value) {
  Key(out, key);
  if (value.empty()) {
    out += "null";
  } else {
    AppendString(out, value);
  }
}

// The shortest text that reads back as `v` (a float as a float: a
// logprob's digits stop where float precision does); null when not finite.
template <typename T>
void AppendNumber(std::string& out, T v) {
  if (!std::isfinite(v)) {
    out += "null";
  } else {
    out += fmt::format("{}", v);
  }
}

// Records that arrive within kBatchDelay of the first unwritten one go out
// in one write, up to kBatchRecords: a record reaches the file (and would
// survive a crash of the process, not of the machine) within 2 ms, and a
// busy server pays one wake-up and one write per batch, not per record.
constexpr std::chrono::milliseconds kBatchDelay{2};
constexpr size_t kBatchRecords = 256;

}  // namespace

std::string RenderRequestFields(const AuditRecord& r) {
  std::string out;
  out.reserve(512);
  StringField(out, "id", r.request_id);
  StringField(out, "tenant", r.tenant);
  StringField(out, "endpoint", r.endpoint);
  StringField(out, "model", r.model);
  StringField(out, "backend", r.backend);
  StringField(out, "backend_kind", r.backend_kind);
  Key(out, "stream");
  out += r.stream ? "true" : "false";
  Key(out, "status");
  out += std::to_string(r.http_status);
  StringField(out, "outcome", r.outcome);
  OptionalStringField(out, "error", r.error);
  Key(out, "prompt_tokens");
  out += std::to_string(r.prompt_tokens);
  Key(out, "completion_tokens");
  out += std::to_string(r.completion_tokens);
  StringField(out, "cache", r.cache);
  Key(out, "similarity");
  if (r.similarity) {
    AppendNumber(out, *r.similarity);
  } else {
    out += "null";
  }
  OptionalStringField(out, "request_sha256", r.request_sha256);
  OptionalStringField(out, "response_sha256", r.response_sha256.value_or(""));
  OptionalStringField(out, "watermark", r.watermark);
  Key(out, "duration_ms");
  AppendNumber(out, std::round(r.duration_ms * 1000) / 1000);
  if (!r.tokens.empty()) {
    Key(out, "tokens");
    out += '[';
    for (size_t c = 0; c < r.tokens.size(); ++c) {
      const AuditRecord::Tokens& t = r.tokens[c];
      if (c > 0) out += ',';
      out += fmt::format(R"({{"choice":{},"ids":[)", t.choice);
      for (size_t i = 0; i < t.ids.size(); ++i) {
        if (i > 0) out += ',';
        out += std::to_string(t.ids[i]);
      }
      out += "],\"logprobs\":[";
      for (size_t i = 0; i < t.logprobs.size(); ++i) {
        if (i > 0) out += ',';
        AppendNumber(out, t.logprobs[i]);
      }
      out += "]}";
    }
    out += ']';
  }
  return out;
}

// The queue between request threads and the writer thread, and the thread.
class AuditLog::Impl {
 public:
  Impl(const util::Clock& clock, const AuditLogOptions& options, std::unique_ptr<Signer> signer,
       std::unique_ptr<AuditWriter> writer, MetricsRegistry* metrics, util::Logger& log)
      : clock_(clock),
        options_(options),
        signer_(std::move(signer)),
        writer_(std::move(writer)),
        log_(log),
        snapshot_(writer_->stats()) {
    if (metrics != nullptr) RegisterMetrics(*metrics);
    thread_ = std::thread([this] { Run(); });
  }

  ~Impl() { Close(); }

  bool Append(const AuditRecord& record) {
    PendingRecord p{audit::FormatTime(record.time), RenderRequestFields(record)};
    bool log_full = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!closed_ && queue_.size() < options_.queue_records) {
        queue_.push_back(std::move(p));
        ++snapshot_.appended;
        // A writer gathering a batch wakes by itself; a parked one is woken.
        const bool wake = writer_parked_ || queue_.size() == kBatchRecords;
        lock.unlock();
        if (wake) wake_.notify_one();
        return true;
      }
      if (closed_) {
        ++snapshot_.dropped_closed;
        if (dropped_closed_ != nullptr) dropped_closed_->Inc();
        return false;
      }
      ++snapshot_.dropped_queue_full;
      ++queue_dropped_;
      log_full = !queue_full_.exchange(true);
    }
    if (dropped_full_ != nullptr) dropped_full_->Inc();
    if (log_full) {
      log_.Error(
          "audit log '{}': the queue of {} records is full (the disk is slower than the "
          "requests); records are dropped and counted until it drains",
          options_.path, options_.queue_records);
    }
    return false;
  }

  bool healthy() const { return !queue_full_.load() && !writer_failed_.load(); }

  bool Flush(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return false;
    const uint64_t ticket = ++flush_requested_;
    wake_.notify_one();
    const bool done = flushed_.wait_for(lock, timeout, [&] { return flush_done_ >= ticket; });
    return done && flush_ok_;
  }

  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  AuditLogStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return snapshot_;
  }

 private:
  void RegisterMetrics(MetricsRegistry& m) {
    auto& dropped = m.Counter("strata_audit_dropped_total",
                              "Audit records not in the log, by reason: queue_full (the writer "
                              "fell behind), write_error (a write or fsync failed), closed.",
                              {"reason"});
    dropped_full_ = &dropped.With({"queue_full"});
    dropped_closed_ = &dropped.With({"closed"});
    m.ChildCallback("strata_audit_dropped_total", {"write_error"}, [this] {
      const AuditLogStats s = stats();
      return static_cast<double>(s.lost + s.dropped_write_error);
    });
    m.CounterCallback("strata_audit_records_total",
                      "Records written to the audit log (every type).",
                      [this] { return static_cast<double>(stats().written); });
    m.CounterCallback("strata_audit_write_errors_total",
                      "Writes, fsyncs or file switches of the audit log that failed.",
                      [this] { return static_cast<double>(stats().write_errors); });
    m.CounterCallback("strata_audit_checkpoints_total", "Signed checkpoints written.",
                      [this] { return static_cast<double>(stats().checkpoints); });
    m.CounterCallback("strata_audit_rotations_total", "Audit log files rotated for size.",
                      [this] { return static_cast<double>(stats().rotations); });
    m.GaugeCallback("strata_audit_queue_records", "Audit records waiting for the writer.", [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return static_cast<double>(queue_.size());
    });
    m.GaugeCallback("strata_audit_healthy",
                    "1 while the audit log keeps every record; 0 while it drops them.",
                    [this] { return healthy() ? 1.0 : 0.0; });
  }

  // The writer thread: takes what is queued, writes it, syncs and
  // checkpoints when due, and sleeps until the next deadline or record.
  void Run() {
    std::vector<PendingRecord> batch;
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      auto ready = [&] {
        return !queue_.empty() || queue_dropped_ > 0 || closed_ || flush_requested_ > flush_done_;
      };
      if (!ready()) {
        // Deadlines are on the injected clock; the wait is capped so that
        // a clock that moves by hand (tests) is looked at again.
        auto wait = std::chrono::milliseconds(1000);
        if (const auto deadline = writer_->NextDeadline()) {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
              *deadline - clock_.Now() + std::chrono::microseconds(999));
          wait = std::clamp(left, std::chrono::milliseconds(0), wait);
        }
        writer_parked_ = true;
        if (wait.count() > 0) wake_.wait_for(lock, wait, ready);
        writer_parked_ = false;
      }
      if (!queue_.empty() && queue_.size() < kBatchRecords && !closed_ &&
          flush_requested_ <= flush_done_) {
        wake_.wait_for(lock, kBatchDelay, [&] {
          return queue_.size() >= kBatchRecords || closed_ || flush_requested_ > flush_done_;
        });
      }
      batch.swap(queue_);
      const uint64_t dropped = queue_dropped_;
      queue_dropped_ = 0;
      const uint64_t flush_ticket = flush_requested_;
      const bool flush = flush_ticket > flush_done_;
      const bool closing = closed_;
      lock.unlock();

      util::Status st = util::OkStatus();
      if (!batch.empty() || dropped > 0 || writer_->failed()) st = writer_->Write(batch, dropped);
      const auto now = clock_.Now();
      if (st.ok()) st = flush || closing ? writer_->Sync() : writer_->MaybeSync(now);
      if (st.ok()) st = writer_->MaybeCheckpoint(now);
      if (closing) {
        st = writer_->Close();
        if (!st.ok()) log_.Error("audit log '{}': closing: {}", options_.path, st.message());
      }
      writer_failed_.store(writer_->failed());

      lock.lock();
      snapshot_.written = writer_->stats().written;
      snapshot_.synced = writer_->stats().synced;
      snapshot_.lost = writer_->stats().lost;
      snapshot_.write_errors = writer_->stats().write_errors;
      snapshot_.checkpoints = writer_->stats().checkpoints;
      snapshot_.rotations = writer_->stats().rotations;
      snapshot_.file_index = writer_->stats().file_index;
      snapshot_.last_seq = writer_->stats().last_seq;
      snapshot_.dropped_write_error = writer_->stats().dropped_write_error;
      if (queue_.empty()) queue_full_.store(false);
      if (flush) {
        flush_done_ = flush_ticket;
        flush_ok_ = st.ok() && !writer_->failed();
        flushed_.notify_all();
      }
      if (closing) {
        flush_done_ = flush_requested_;
        flush_ok_ = false;
        flushed_.notify_all();
        return;
      }
    }
  }

  const util::Clock& clock_;
  const AuditLogOptions options_;
  const std::unique_ptr<Signer> signer_;       // borrowed by writer_
  const std::unique_ptr<AuditWriter> writer_;  // owned by the writer thread once it runs
  util::Logger& log_;
  CounterValue* dropped_full_ = nullptr;    // null without metrics
  CounterValue* dropped_closed_ = nullptr;  // null without metrics
  std::atomic<bool> queue_full_{false};     // records dropped since the queue last drained
  std::atomic<bool> writer_failed_{false};  // the writer's failed(), as of its last wake

  mutable std::mutex mu_;
  // Guarded by mu_: the queue, its signals and the writer's stats as of its last wake.
  std::vector<PendingRecord> queue_;
  uint64_t queue_dropped_ = 0;  // refused since the writer last took the queue
  bool closed_ = false;
  bool writer_parked_ = false;    // the writer waits for a record (Append must wake it)
  uint64_t flush_requested_ = 0;  // tickets handed out by Flush
  uint64_t flush_done_ = 0;       // tickets answered
  bool flush_ok_ = false;         // whether the last answered flush synced everything
  AuditLogStats snapshot_;
  std::condition_variable wake_;     // the writer: records, flush, close
  std::condition_variable flushed_;  // Flush callers

  std::thread thread_;  // last: started once everything above is ready
};

AuditLog::AuditLog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AuditLog::~AuditLog() = default;

util::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(
    util::FileSystem& fs, const util::Clock& clock, const AuditLogOptions& options,
    std::unique_ptr<Signer> signer, MetricsRegistry* metrics, util::Logger& log) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<AuditWriter> writer,
                          AuditWriter::Open(fs, clock, options, signer.get(), log));
  return std::unique_ptr<AuditLog>(new AuditLog(
      std::make_unique<Impl>(clock, options, std::move(signer), std::move(writer), metrics, log)));
}

bool AuditLog::Append(const AuditRecord& record) { return impl_->Append(record); }
bool AuditLog::healthy() const { return impl_->healthy(); }
bool AuditLog::Flush(std::chrono::milliseconds timeout) { return impl_->Flush(timeout); }
void AuditLog::Close() { impl_->Close(); }
AuditLogStats AuditLog::stats() const { return impl_->stats(); }

}  // namespace strata::obs
