#include "obs/internal/audit_writer.h"

#include <algorithm>

#include <fmt/format.h>

#include "obs/internal/audit_format.h"

namespace strata::obs {
namespace {

// The parts of the existing log the chain goes on from.
struct Previous {
  uint64_t seq = 0;
  std::string hash;
  uint64_t file_index = 0;
  bool closed = false;  // its last record is a close (or the checkpoint after one)
  bool torn = false;    // it ends in a partial line
};

std::pair<std::string, std::string> SplitPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {"", path};
  return {path.substr(0, slash == 0 ? 1 : slash), path.substr(slash + 1)};
}

// The index of a rotated file's name ("audit.log.000042" of base
// "audit.log"), or nullopt.
std::optional<uint64_t> RotatedIndex(const std::string& name, const std::string& base) {
  if (name.size() <= base.size() + 1 || name.compare(0, base.size(), base) != 0 ||
      name[base.size()] != '.') {
    return std::nullopt;
  }
  const std::string digits = name.substr(base.size() + 1);
  if (digits.size() > 18) return std::nullopt;
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

// The complete lines at the end of `content`: the last (and the one before
// it, when there is one); empty when there is no complete line.
std::vector<std::string_view> LastLines(std::string_view content) {
  std::vector<std::string_view> out;
  size_t end = content.rfind('\n');
  while (end != std::string_view::npos && out.size() < 2) {
    const size_t start = end == 0 ? std::string_view::npos : content.rfind('\n', end - 1);
    const size_t from = start == std::string_view::npos ? 0 : start + 1;
    out.push_back(content.substr(from, end - from));
    if (start == std::string_view::npos) break;
    end = start;
  }
  return out;
}

// What the log file at `path` (with `content`) leaves to continue from;
// nullopt when it has no complete line; FailedPrecondition naming the file
// when its first line is not an open record or its last is not a valid
// record.
util::StatusOr<std::optional<Previous>> ReadPrevious(const std::string& path,
                                                     std::string_view content) {
  const size_t first_end = content.find('\n');
  if (first_end == std::string_view::npos) return std::optional<Previous>();
  auto broken = [&](std::string_view which, const util::Status& why) {
    return util::FailedPreconditionError(fmt::format(
        "audit log '{}': its {} line is not a valid record ({}); the chain cannot go on from it. "
        "Check it with `strata audit verify`, then move it away to start a new chain",
        path, which, why.message()));
  };
  auto first = audit::ParseLine(content.substr(0, first_end));
  if (!first.ok()) return broken("first", first.status());
  if (first->type != audit::kTypeOpen || !first->file_index) {
    return broken("first", util::InvalidArgumentError("it is not an open record"));
  }
  const std::vector<std::string_view> last = LastLines(content);
  auto tail = audit::ParseLine(last[0]);
  if (!tail.ok()) return broken("last complete", tail.status());
  if (tail->computed_hash != tail->hash) {
    return broken("last complete", util::InvalidArgumentError("its hash does not match it"));
  }
  Previous p;
  p.seq = tail->seq;
  p.hash = tail->hash;
  p.file_index = *first->file_index;
  p.torn = content.back() != '\n';
  p.closed = tail->type == audit::kTypeClose;
  if (!p.closed && tail->type == audit::kTypeCheckpoint && last.size() > 1) {
    auto before = audit::ParseLine(last[1]);
    p.closed = before.ok() && before->type == audit::kTypeClose;
  }
  return std::optional<Previous>(std::move(p));
}

}  // namespace

util::Status ValidateAuditLogOptions(const AuditLogOptions& o) {
  using util::InvalidArgumentError;
  if (o.path.empty()) return InvalidArgumentError("audit log: path is empty");
  if (o.max_file_bytes < 4096 || o.max_file_bytes > (1ull << 40)) {
    return InvalidArgumentError(
        fmt::format("audit log: max_file_bytes {} is outside [4096, 2^40]", o.max_file_bytes));
  }
  if (o.sync_interval.count() < 1 || o.sync_interval.count() > 60000) {
    return InvalidArgumentError(fmt::format("audit log: sync_interval {} ms is outside [1, 60000]",
                                            o.sync_interval.count()));
  }
  if (o.sync_records < 1 || o.sync_records > 1'000'000) {
    return InvalidArgumentError(
        fmt::format("audit log: sync_records {} is outside [1, 1000000]", o.sync_records));
  }
  if (o.queue_records < 16 || o.queue_records > 10'000'000) {
    return InvalidArgumentError(
        fmt::format("audit log: queue_records {} is outside [16, 10000000]", o.queue_records));
  }
  if (o.checkpoint_records < 1 || o.checkpoint_records > 1'000'000'000) {
    return InvalidArgumentError(fmt::format(
        "audit log: checkpoint_records {} is outside [1, 1000000000]", o.checkpoint_records));
  }
  if (o.checkpoint_interval.count() < 1 || o.checkpoint_interval.count() > 86400) {
    return InvalidArgumentError(
        fmt::format("audit log: checkpoint_interval {} s is outside [1, 86400]",
                    o.checkpoint_interval.count()));
  }
  if (o.retry_interval.count() < 1 || o.retry_interval.count() > 3'600'000) {
    return InvalidArgumentError(fmt::format(
        "audit log: retry_interval {} ms is outside [1, 3600000]", o.retry_interval.count()));
  }
  return util::OkStatus();
}

AuditWriter::AuditWriter(util::FileSystem& fs, const util::Clock& clock,
                         const AuditLogOptions& options, const Signer* signer, util::Logger& log)
    : fs_(fs), clock_(clock), options_(options), signer_(signer), log_(log) {}

AuditWriter::~AuditWriter() = default;

std::string AuditWriter::Now() const { return audit::FormatTime(clock_.WallNow()); }

util::StatusOr<std::unique_ptr<AuditWriter>> AuditWriter::Open(util::FileSystem& fs,
                                                               const util::Clock& clock,
                                                               const AuditLogOptions& options,
                                                               const Signer* signer,
                                                               util::Logger& log) {
  STRATA_RETURN_IF_ERROR(ValidateAuditLogOptions(options));
  std::unique_ptr<AuditWriter> w(new AuditWriter(fs, clock, options, signer, log));
  const std::string& path = options.path;
  const auto [dir, base] = SplitPath(path);
  if (!dir.empty()) STRATA_RETURN_IF_ERROR(fs.CreateDirs(dir));
  // The rotated files beside it: the highest index, where the chain went
  // on when PATH itself is missing.
  uint64_t max_rotated = 0;
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.ListDir(dir.empty() ? "." : dir));
  for (const std::string& name : names) {
    if (auto index = RotatedIndex(name, base)) max_rotated = std::max(max_rotated, *index);
  }
  std::optional<Previous> prev;
  if (fs.Exists(path)) {
    STRATA_ASSIGN_OR_RETURN(std::string content, fs.ReadFile(path));
    STRATA_ASSIGN_OR_RETURN(prev, ReadPrevious(path, content));
    if (prev) {
      const std::string to = audit::RotatedPath(path, prev->file_index);
      if (fs.Exists(to)) {
        return util::FailedPreconditionError(fmt::format(
            "audit log '{}' says it is file {}, and '{}' exists already: move one of them away",
            path, prev->file_index, to));
      }
      STRATA_RETURN_IF_ERROR(fs.Rename(path, to));
    } else if (content.empty()) {
      STRATA_RETURN_IF_ERROR(fs.Remove(path));
    } else {
      // Only a partial line (the run crashed writing its first record):
      // kept for the verifier to report, under the next free index.
      const std::string to = audit::RotatedPath(path, ++max_rotated);
      log.Warn("audit log '{}' holds only a partial line ({} bytes); kept as '{}'", path,
               content.size(), to);
      STRATA_RETURN_IF_ERROR(fs.Rename(path, to));
    }
  }
  // Without PATH, the newest rotated file with a complete record.
  for (uint64_t i = max_rotated; !prev && i > 0 && i + 3 > max_rotated; --i) {
    const std::string rotated = audit::RotatedPath(path, i);
    if (!fs.Exists(rotated)) continue;
    STRATA_ASSIGN_OR_RETURN(std::string content, fs.ReadFile(rotated));
    STRATA_ASSIGN_OR_RETURN(prev, ReadPrevious(rotated, content));
  }
  std::string_view reason = audit::kReasonNew;
  uint64_t index = max_rotated + 1;
  w->head_ = std::string(audit::kGenesisHash);
  if (prev) {
    reason = prev->closed && !prev->torn ? audit::kReasonRestart : audit::kReasonCrash;
    index = std::max(max_rotated, prev->file_index) + 1;
    w->seq_ = prev->seq;
    w->head_ = prev->hash;
  }
  w->synced_seq_ = w->seq_;
  w->synced_head_ = w->head_;
  w->last_checkpoint_ = clock.Now();
  STRATA_RETURN_IF_ERROR(w->StartFile(index, reason, 0));
  if (prev) {
    log.Info("audit log '{}': file {} continues the chain at seq {}{}", path, index, w->seq_,
             reason == audit::kReasonCrash ? " (the last run did not close its log)" : "");
  } else {
    log.Info("audit log '{}': a new chain", path);
  }
  return w;
}

void AuditWriter::Render(std::string& out, std::string_view type, std::string_view time,
                         std::string_view fields) {
  std::string line = audit::LineStart(++seq_, type, time);
  line += fields;
  head_ = audit::FinishLine(line, head_);
  out += line;
  if (type != audit::kTypeCheckpoint) ++since_checkpoint_;
}

void AuditWriter::RenderCheckpoint(std::string& out) {
  std::string line = audit::LineStart(++seq_, audit::kTypeCheckpoint, Now());
  line += fmt::format(R"(,"alg":"{}","key_id":"{}")", SignatureAlgorithmName(signer_->algorithm()),
                      signer_->key_id());
  head_ = audit::FinishLine(line, head_, signer_);
  out += line;
  since_checkpoint_ = 0;
  last_checkpoint_ = clock_.Now();
  ++stats_.checkpoints;
}

util::Status AuditWriter::StartFile(uint64_t index, std::string_view reason, uint64_t lost) {
  STRATA_ASSIGN_OR_RETURN(file_, fs_.NewWritableFile(options_.path));
  file_index_ = index;
  stats_.file_index = index;
  std::string buf;
  const std::string key = signer_ ? fmt::format("\"{}\"", signer_->key_id()) : "null";
  Render(buf, audit::kTypeOpen, Now(),
         fmt::format(R"(,"file":{},"reason":"{}","lost":{},"checkpoint_key":{})", index, reason,
                     lost, key));
  // The link to the file before is durable before anything else is written.
  STRATA_RETURN_IF_ERROR(AppendBuffer(buf));
  STRATA_RETURN_IF_ERROR(Sync());
  open_bytes_ = file_->size();
  return util::OkStatus();
}

util::Status AuditWriter::AppendBuffer(std::string& buffer) {
  if (buffer.empty()) return util::OkStatus();
  if (!file_) return util::FailedPreconditionError("audit log: no file open");
  const uint64_t records = seq_ - synced_seq_ - unsynced_;
  util::Status st = file_->Append(buffer);
  buffer.clear();
  if (!st.ok()) {
    Fail(st);
    return st;
  }
  if (unsynced_ == 0) first_unsynced_ = clock_.Now();
  unsynced_ += records;
  stats_.written += records;
  stats_.last_seq = seq_;
  return util::OkStatus();
}

util::Status AuditWriter::Write(std::vector<PendingRecord>& batch, uint64_t queue_dropped) {
  queue_dropped_ += queue_dropped;
  if (failed_) {
    const auto now = clock_.Now();
    util::Status st = now < retry_at_
                          ? util::UnavailableError("audit log: waiting to retry after an error")
                          : Recover();
    if (!st.ok()) {
      failed_dropped_ += batch.size();
      stats_.dropped_write_error += batch.size();
      batch.clear();
      return st;
    }
  }
  if (!file_) {
    stats_.dropped_write_error += batch.size();
    batch.clear();
    return util::FailedPreconditionError("audit log: closed");
  }
  std::string buf;
  if (queue_dropped_ > 0) {
    Render(buf, audit::kTypeDropped, Now(),
           fmt::format(R"(,"count":{},"reason":"queue_full")", queue_dropped_));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const PendingRecord& r = batch[i];
    // A record whose line could take the file past its limit starts a new
    // file, unless the file holds nothing but its open record (a record
    // larger than the limit gets a file of its own).
    const uint64_t line_bound = r.time.size() + r.fields.size() + 256;
    const uint64_t size = file_->size() + buf.size();
    if (size + line_bound > options_.max_file_bytes && size > open_bytes_) {
      util::Status st = AppendBuffer(buf);
      if (st.ok()) st = Rotate(audit::kReasonRotate, 0);
      if (!st.ok()) {
        // These were never given a place in the chain.
        failed_dropped_ += batch.size() - i;
        stats_.dropped_write_error += batch.size() - i;
        batch.clear();
        return st;
      }
    }
    Render(buf, audit::kTypeRequest, r.time, r.fields);
    if (signer_ != nullptr &&
        since_checkpoint_ >= static_cast<uint64_t>(options_.checkpoint_records)) {
      RenderCheckpoint(buf);
    }
  }
  batch.clear();
  STRATA_RETURN_IF_ERROR(AppendBuffer(buf));
  queue_dropped_ = 0;
  return util::OkStatus();
}

util::Status AuditWriter::Rotate(std::string_view reason, uint64_t lost) {
  STRATA_RETURN_IF_ERROR(Sync());
  util::Status st = file_->Close();
  if (st.ok()) st = fs_.Rename(options_.path, audit::RotatedPath(options_.path, file_index_));
  if (st.ok()) st = StartFile(file_index_ + 1, reason, lost);
  if (!st.ok()) {
    if (!failed_) Fail(st);
    return st;
  }
  ++stats_.rotations;
  return util::OkStatus();
}

util::Status AuditWriter::MaybeSync(TimePoint now) {
  if (!file_ || unsynced_ == 0) return util::OkStatus();
  if (unsynced_ < static_cast<uint64_t>(options_.sync_records) &&
      now - first_unsynced_ < options_.sync_interval) {
    return util::OkStatus();
  }
  return Sync();
}

util::Status AuditWriter::Sync() {
  if (!file_) return failed_ ? util::UnavailableError("audit log: failed") : util::OkStatus();
  if (unsynced_ == 0) return util::OkStatus();
  util::Status st = file_->Sync();
  if (!st.ok()) {
    Fail(st);
    return st;
  }
  stats_.synced += unsynced_;
  unsynced_ = 0;
  synced_seq_ = seq_;
  synced_head_ = head_;
  return util::OkStatus();
}

util::Status AuditWriter::MaybeCheckpoint(TimePoint now) {
  if (signer_ == nullptr || !file_ || since_checkpoint_ == 0 ||
      now - last_checkpoint_ < options_.checkpoint_interval) {
    return util::OkStatus();
  }
  std::string buf;
  RenderCheckpoint(buf);
  return AppendBuffer(buf);
}

void AuditWriter::Fail(const util::Status& why) {
  ++stats_.write_errors;
  const uint64_t lost = seq_ - synced_seq_;
  if (!failed_) {
    log_.Error(
        "audit log '{}': {}; {} records not known synced are lost, and records are dropped "
        "until a new file opens (retrying every {} ms)",
        options_.path, why.message(), lost, options_.retry_interval.count());
  }
  failed_ = true;
  lost_ += lost;
  stats_.lost += lost;
  seq_ = synced_seq_;
  head_ = synced_head_;
  unsynced_ = 0;
  since_checkpoint_ = std::max<uint64_t>(since_checkpoint_, 1);
  if (file_) (void)file_->Close();  // what it says no longer matters: the file is abandoned
  file_.reset();
  retry_at_ = clock_.Now() + options_.retry_interval;
}

util::Status AuditWriter::Recover() {
  retry_at_ = clock_.Now() + options_.retry_interval;
  // The abandoned file (its tail may be torn) keeps its own index.
  if (fs_.Exists(options_.path)) {
    STRATA_RETURN_IF_ERROR(
        fs_.Rename(options_.path, audit::RotatedPath(options_.path, file_index_)));
  }
  util::Status st = StartFile(file_index_ + 1, audit::kReasonRecover, lost_);
  if (!st.ok()) {
    if (file_) Fail(st);
    return st;
  }
  failed_ = false;
  log_.Warn("audit log '{}': writing again in file {} ({} records lost, {} dropped meanwhile)",
            options_.path, file_index_, lost_, failed_dropped_);
  lost_ = 0;
  if (failed_dropped_ > 0) {
    std::string buf;
    Render(buf, audit::kTypeDropped, Now(),
           fmt::format(R"(,"count":{},"reason":"write_error")", failed_dropped_));
    STRATA_RETURN_IF_ERROR(AppendBuffer(buf));
    failed_dropped_ = 0;
  }
  return util::OkStatus();
}

util::Status AuditWriter::Close() {
  if (failed_) STRATA_RETURN_IF_ERROR(Recover());
  std::vector<PendingRecord> none;
  STRATA_RETURN_IF_ERROR(Write(none, 0));
  std::string buf;
  Render(buf, audit::kTypeClose, Now(), "");
  if (signer_ != nullptr) RenderCheckpoint(buf);
  STRATA_RETURN_IF_ERROR(AppendBuffer(buf));
  STRATA_RETURN_IF_ERROR(Sync());
  util::Status st = file_->Close();
  file_.reset();
  return st;
}

std::optional<AuditWriter::TimePoint> AuditWriter::NextDeadline() const {
  std::optional<TimePoint> next;
  auto consider = [&next](TimePoint t) {
    if (!next || t < *next) next = t;
  };
  if (failed_) {
    consider(retry_at_);
    return next;
  }
  if (unsynced_ > 0) consider(first_unsynced_ + options_.sync_interval);
  if (signer_ != nullptr && since_checkpoint_ > 0) {
    consider(last_checkpoint_ + options_.checkpoint_interval);
  }
  return next;
}

}  // namespace strata::obs
