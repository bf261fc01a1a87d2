// obs/internal/audit_writer.h — the audit log's files: the chain, the
// batches, fsync, rotation, checkpoints and recovery from write errors,
// with no thread of its own. AuditLog runs one on its writer thread; tests
// drive one directly with a FakeClock and a file system that drops what
// was not synced (tests/obs/audit_log_test.cpp proves the loss window so).
//
// Contract of the calls the writer thread makes, in this order per wake:
//   Write(batch)      renders and appends the batch (one Append per file)
//   MaybeSync(now)    fsyncs once sync_records are unsynced or the oldest
//                     unsynced record was written sync_interval ago
//   MaybeCheckpoint   a time-based checkpoint (count-based ones are placed
//                     by Write, after every checkpoint_records records)
// and it sleeps until NextDeadline(). After a failed Append or Sync the
// writer is failed(): records not known synced are declared lost, later
// batches are dropped (counted) until, retry_interval later, a new file
// opens (reason "recover") linked to the last synced record.
//
// Threading: thread-compatible; owned by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "obs/audit_log.h"
#include "obs/crypto.h"
#include "util/clock.h"
#include "util/file_system.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::obs {

// A request record as the request thread rendered it: everything but its
// sequence number, prev and hash.
struct PendingRecord {
  std::string time;    // audit::FormatTime of the record's time
  std::string fields;  // RenderRequestFields
};

class AuditWriter {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Continues the chain of the log at options.path (AuditLog::Open's
  // contract) and writes and syncs the new file's open record. `signer`
  // (borrowed, may be null) must outlive the writer.
  static util::StatusOr<std::unique_ptr<AuditWriter>> Open(util::FileSystem& fs,
                                                           const util::Clock& clock,
                                                           const AuditLogOptions& options,
                                                           const Signer* signer, util::Logger& log);
  ~AuditWriter();

  // Appends `batch`, after a "dropped" record when `queue_dropped` > 0 (the
  // queue refused that many since the last batch). While failed() the batch
  // is dropped and counted, unless retry_interval has passed and a new
  // file opens. The error of the Append (or of the recovery) when not
  // written.
  util::Status Write(std::vector<PendingRecord>& batch, uint64_t queue_dropped);
  util::Status MaybeSync(TimePoint now);
  util::Status Sync();
  util::Status MaybeCheckpoint(TimePoint now);
  // A "close" record, a checkpoint (with a signer), fsync, close the file.
  util::Status Close();

  bool failed() const { return failed_; }
  // When a sync, a checkpoint or a retry is due; nullopt when nothing is.
  std::optional<TimePoint> NextDeadline() const;
  const AuditLogStats& stats() const { return stats_; }

 private:
  AuditWriter(util::FileSystem& fs, const util::Clock& clock, const AuditLogOptions& options,
              const Signer* signer, util::Logger& log);
  // Opens options.path as file `index`, its open record first; synced.
  util::Status StartFile(uint64_t index, std::string_view reason, uint64_t lost);
  // Renders a record of `type` with `fields` (starting with a comma) into `out`.
  void Render(std::string& out, std::string_view type, std::string_view time,
              std::string_view fields);
  void RenderCheckpoint(std::string& out);
  util::Status AppendBuffer(std::string& buffer);
  util::Status Rotate(std::string_view reason, uint64_t lost);
  // After a failed Append or Sync: abandon the file and rewind the chain
  // to the last synced record.
  void Fail(const util::Status& why);
  util::Status Recover();
  std::string Now() const;

  util::FileSystem& fs_;
  const util::Clock& clock_;
  const AuditLogOptions options_;
  const Signer* const signer_;
  util::Logger& log_;

  std::unique_ptr<util::WritableFile> file_;  // null while failed
  uint64_t file_index_ = 0;
  uint64_t open_bytes_ = 0;  // the file's size after its open record
  uint64_t seq_ = 0;         // the last sequence number assigned
  std::string head_;         // the hash of record seq_
  uint64_t synced_seq_ = 0;  // the last record known durable
  std::string synced_head_;  // its hash
  uint64_t unsynced_ = 0;    // records appended since the last sync
  TimePoint first_unsynced_{};
  uint64_t since_checkpoint_ = 0;  // records since the last checkpoint
  TimePoint last_checkpoint_{};
  bool failed_ = false;
  TimePoint retry_at_{};
  uint64_t lost_ = 0;            // declared lost, to be said by the next open record
  uint64_t failed_dropped_ = 0;  // dropped while failed, to be said by a dropped record
  uint64_t queue_dropped_ = 0;   // refused by the queue, not yet said (write failed)
  AuditLogStats stats_;
};

}  // namespace strata::obs
