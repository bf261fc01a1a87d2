// obs/audit_log.h — the append-only, hash-chained audit log (JSON lines;
// docs/formats/audit_log.md has the byte layout).
//
// Promise: every record appended is written, in the order appended, as one
// line that carries a sequence number and the SHA-256 of the record before
// it, so that an edited, removed, inserted or reordered record breaks the
// chain (obs/audit_verify.h finds where). With a Signer, a checkpoint record
// signs the chain's head every `checkpoint_records` records or
// `checkpoint_interval` (whichever comes first) and when the log closes.
// Append never waits on the disk: a writer thread takes records from a
// bounded queue, writes them in batches, and fsyncs at least every
// `sync_interval` (sooner after `sync_records` records), so a power cut
// loses at most the records appended in the last sync_interval plus the
// time one batch takes to write (docs/formats/audit_log.md, "Durability").
// The file rotates before a record would take it past `max_file_bytes`
// (PATH is renamed PATH.<index>, a new PATH starts with an "open" record
// linked to the last record of the old one). On start, the chain goes on
// from the last complete record of the existing log; a torn last line (a
// crash mid-write) is left where it is, and the new file's open record says
// the last run did not close.
//
// Limits and failures: a full queue drops the record (counted in
// strata_audit_dropped_total{reason="queue_full"}, logged once per episode)
// and the next record written is a "dropped" record with the count, so the
// log itself says what it lacks. A write or fsync error is counted
// (strata_audit_write_errors_total), logged once per episode, and the
// records not known synced are declared lost; the writer retries every
// `retry_interval` with a new file whose open record links to the last
// synced record and carries the number lost. Nothing here ever crashes the
// process or blocks a request; healthy() says whether records are being
// kept (for a server that fails requests closed).
//
// Threading: Append, healthy, Flush and stats are thread-safe; Close is
// called once, by the owner, after the last Append. The writer thread owns
// the files.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto log, AuditLog::Open(fs, clock, {.path = "audit.log"},
//                                                    std::move(signer), &metrics, logger));
//   AuditRecord r{.time = clock.WallNow(), .request_id = "abc", ...};
//   log->Append(r);
//   ...
//   log->Close();
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "obs/crypto.h"
#include "obs/metrics.h"
#include "util/clock.h"
#include "util/file_system.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::obs {

// One API request's outcome.
struct AuditRecord {
  std::chrono::system_clock::time_point time;  // when the request ended (calendar time)
  std::string request_id;
  std::string tenant;
  std::string endpoint;      // "/v1/chat/completions"
  std::string model;         // the served model id ("" when the request named none it could use)
  std::string backend;       // the backend's name ("" when none was reached)
  std::string backend_kind;  // "local", "openai", "anthropic" ("" when none)
  bool stream = false;
  int http_status = 200;  // the status sent (200 for a stream that failed after its head)
  std::string outcome;    // "ok", "error" or "cancelled"
  std::string error;      // the error's reason name ("timeout"), "" when ok
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::string cache;                 // "miss", "l1", "l3", "coalesced"; "none" when not reached
  std::optional<double> similarity;  // l3: how similar the request was to the stored one
  std::string request_sha256;        // hex SHA-256 of the request body as received; "" = never read
  std::optional<std::string> response_sha256;  // hex ResponseDigest; nullopt: no response
  std::string watermark;                       // the x-strata-watermark value; "" = none
  double duration_ms = 0;
  // Token-level audit (--audit-tokens): each output token of each choice.
  struct Tokens {
    int32_t choice = 0;
    std::vector<int32_t> ids;     // the vocabulary ids; -1 where the backend does not know them
    std::vector<float> logprobs;  // natural log; parallel to ids
  };
  std::vector<Tokens> tokens;  // empty: not recorded
};

struct AuditLogOptions {
  std::string path;                                // the live file; rotated files are path.<index>
  uint64_t max_file_bytes = 64ull << 20;           // [4096, 2^40] rotate before passing it
  std::chrono::milliseconds sync_interval{100};    // [1 ms, 60 s] the longest records stay unsynced
  int32_t sync_records = 1024;                     // [1, 1e6] fsync after this many, sooner
  size_t queue_records = 65536;                    // [16, 1e7] records waiting; more are dropped
  int32_t checkpoint_records = 1000;               // [1, 1e9] records between checkpoints
  std::chrono::seconds checkpoint_interval{60};    // [1 s, 1 day] the longest between checkpoints
  std::chrono::milliseconds retry_interval{1000};  // after a write error, wait before a new file
};

// Checks the ranges above; InvalidArgument naming the field.
util::Status ValidateAuditLogOptions(const AuditLogOptions& options);

struct AuditLogStats {
  uint64_t appended = 0;             // records accepted by Append
  uint64_t written = 0;              // records (of every type) appended to a file
  uint64_t synced = 0;               // records known durable
  uint64_t dropped_queue_full = 0;   // refused by a full queue
  uint64_t dropped_closed = 0;       // appended after Close
  uint64_t dropped_write_error = 0;  // taken by the writer while its file had failed
  uint64_t lost = 0;  // written but declared lost after a write or sync error (not known synced)
  uint64_t write_errors = 0;
  uint64_t checkpoints = 0;
  uint64_t rotations = 0;
  uint64_t file_index = 0;  // the live file's index
  uint64_t last_seq = 0;    // the last sequence number written
};

class AuditWriter;

class AuditLog {
 public:
  // Reads the existing log at options.path (if any) to continue its chain,
  // moves it aside as a rotated file, starts a new one and the writer
  // thread. `signer` (may be null: no checkpoints) signs checkpoints.
  // `metrics` may be null. Errors: the file system's (naming the path), or
  // FailedPrecondition when the existing log's last complete record is not
  // a valid record (it names the file and line).
  static util::StatusOr<std::unique_ptr<AuditLog>> Open(
      util::FileSystem& fs, const util::Clock& clock, const AuditLogOptions& options,
      std::unique_ptr<Signer> signer, MetricsRegistry* metrics, util::Logger& log);
  ~AuditLog();  // Close() if not closed
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Queues a request record; false when it was dropped (queue full, closed).
  bool Append(const AuditRecord& record);
  // False while records are being lost: the queue is full, or the last
  // write or sync failed and no new file has been opened since.
  bool healthy() const;
  // Waits until every record appended before the call is written and
  // synced, up to `timeout`; false when the time ran out or writing failed.
  bool Flush(std::chrono::milliseconds timeout);
  // Writes what is queued, a "close" record and (with a signer) a last
  // checkpoint, syncs and stops the writer. Later Appends are dropped.
  void Close();
  AuditLogStats stats() const;

 private:
  class Impl;
  explicit AuditLog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The JSON body of a request record: its fields after "time" and before
// "prev", starting with a comma (docs/formats/audit_log.md lists them in
// order). Exposed for tests and the fuzz target.
std::string RenderRequestFields(const AuditRecord& record);

}  // namespace strata::obs
