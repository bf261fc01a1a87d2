#include "obs/snapshot_store.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include <fmt/format.h>

namespace strata::obs {
namespace {

constexpr int kWriterNice = 10;  // the writer thread's nice value

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A name this store writes: 32 hex digits, then ".snap".
bool IsSnapshotName(std::string_view name) {
  if (name.size() != kSnapshotNameHexDigits + kSnapshotSuffix.size()) return false;
  if (!EndsWith(name, kSnapshotSuffix)) return false;
  for (size_t i = 0; i < kSnapshotNameHexDigits; ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

util::Status CheckOptions(const SnapshotStoreOptions& o) {
  using util::InvalidArgumentError;
  if (o.dir.empty()) return InvalidArgumentError("the snapshot directory is empty");
  if (o.retention < std::chrono::seconds(1) || o.retention > std::chrono::hours(24 * 3650)) {
    return InvalidArgumentError(fmt::format("snapshot retention {} s is outside [1, {}] seconds",
                                            o.retention.count(), 3650LL * 86400));
  }
  if (o.max_bytes < (1u << 20) || o.max_bytes > (1ull << 50)) {
    return InvalidArgumentError(
        fmt::format("snapshot budget {} bytes is outside [2^20, 2^50]", o.max_bytes));
  }
  if (o.max_pending < 1 || o.max_pending > 65536) {
    return InvalidArgumentError(
        fmt::format("snapshot queue of {} is outside [1, 65536]", o.max_pending));
  }
  if (o.max_pending_bytes < (1u << 20) || o.max_pending_bytes > (1ull << 40)) {
    return InvalidArgumentError(
        fmt::format("snapshot queue bytes {} is outside [2^20, 2^40]", o.max_pending_bytes));
  }
  if (o.max_snapshot_bytes < 1024 || o.max_snapshot_bytes > kMaxSnapshotPlaintextBytes) {
    return InvalidArgumentError(fmt::format("one snapshot's limit {} bytes is outside [1024, {}]",
                                            o.max_snapshot_bytes, kMaxSnapshotPlaintextBytes));
  }
  if (o.sweep_interval < std::chrono::milliseconds(10) ||
      o.sweep_interval > std::chrono::hours(24)) {
    return InvalidArgumentError(fmt::format(
        "snapshot sweep interval {} ms is outside [10, 86400000]", o.sweep_interval.count()));
  }
  if (o.shutdown_flush < std::chrono::milliseconds(0) ||
      o.shutdown_flush > std::chrono::seconds(60)) {
    return InvalidArgumentError("snapshot shutdown flush is outside [0, 60] seconds");
  }
  if (o.digest_slice_bytes < 4096 || o.digest_slice_bytes > (1u << 30)) {
    return InvalidArgumentError("snapshot digest slice is outside [4096, 2^30] bytes");
  }
  return util::OkStatus();
}

}  // namespace

struct SnapshotStore::Metrics {
  explicit Metrics(MetricsRegistry& reg)
      : written(reg.Counter("strata_snapshots_written_total",
                            "Request snapshots written to the snapshot directory.")
                    .With({})),
        dropped(reg.Counter("strata_snapshots_dropped_total",
                            "Request snapshots not written: queue_full, too_large, write_error, "
                            "shutdown.",
                            {"reason"})),
        deleted(reg.Counter("strata_snapshots_deleted_total",
                            "Snapshot files deleted by retention: expired, or budget (oldest "
                            "first, to stay under the byte budget).",
                            {"reason"})),
        auth_failures(reg.Counter("strata_snapshot_auth_failures_total",
                                  "Snapshot files that failed authentication when read (changed "
                                  "on disk, or written under another key).")
                          .With({})),
        queue(reg.Gauge("strata_snapshot_queue_depth", "Request snapshots waiting to be written.")
                  .With({})),
        files(reg.Gauge("strata_snapshot_files", "Snapshot files in the snapshot directory.")
                  .With({})),
        bytes(reg.Gauge("strata_snapshot_bytes", "Bytes of the snapshot files.").With({})) {}
  CounterValue& written;
  Family<CounterValue>& dropped;
  Family<CounterValue>& deleted;
  CounterValue& auth_failures;
  GaugeValue& queue;
  GaugeValue& files;
  GaugeValue& bytes;
};

struct SnapshotStore::Counters {
  std::atomic<int64_t> written{0}, dropped_queue_full{0}, dropped_too_large{0},
      dropped_write_error{0}, dropped_shutdown{0}, deleted_expired{0}, deleted_budget{0},
      auth_failures{0}, files{0}, bytes{0};
};

util::StatusOr<std::unique_ptr<SnapshotStore>> SnapshotStore::Open(
    const SnapshotStoreOptions& options, SnapshotKey key, util::FileSystem& fs,
    const util::Clock& clock, MetricsRegistry* metrics, util::Logger& log) {
  STRATA_RETURN_IF_ERROR(CheckOptions(options));
  STRATA_RETURN_IF_ERROR(fs.CreateDirs(options.dir));
  std::unique_ptr<SnapshotStore> s(new SnapshotStore(options, std::move(key), fs, clock, log));
  if (metrics != nullptr) s->metrics_ = std::make_unique<Metrics>(*metrics);
  // The first sweep learns what the directory holds; the writer runs it
  // first, so opening does not wait on a large directory.
  s->writer_ = std::thread([p = s.get()] { p->WriterLoop(); });
  return s;
}

SnapshotStore::SnapshotStore(const SnapshotStoreOptions& options, SnapshotKey key,
                             util::FileSystem& fs, const util::Clock& clock, util::Logger& log)
    : options_(options),
      key_(std::move(key)),
      fs_(fs),
      clock_(clock),
      log_(log),
      counters_(std::make_unique<Counters>()) {}

void SnapshotStore::Drop(const char* reason) {
  const std::string_view r = reason;
  std::atomic<int64_t>& c = r == "queue_full"  ? counters_->dropped_queue_full
                            : r == "too_large" ? counters_->dropped_too_large
                            : r == "shutdown"  ? counters_->dropped_shutdown
                                               : counters_->dropped_write_error;
  c.fetch_add(1, std::memory_order_relaxed);
  if (metrics_) metrics_->dropped.With({reason}).Inc();
}

SnapshotStore::~SnapshotStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

int64_t SnapshotStore::NowMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_.WallNow().time_since_epoch())
      .count();
}

bool SnapshotStore::Put(SnapshotMeta meta, size_t estimated_bytes,
                        std::function<std::string()> render) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return false;
  if (estimated_bytes > options_.max_snapshot_bytes ||
      estimated_bytes + kSnapshotOverheadBytes > options_.max_bytes) {
    Drop("too_large");
    return false;
  }
  if (queue_.size() >= options_.max_pending ||
      queued_bytes_ + estimated_bytes > options_.max_pending_bytes) {
    Drop("queue_full");
    return false;
  }
  queued_bytes_ += estimated_bytes;
  queue_.push_back(Pending{std::move(meta), estimated_bytes, std::move(render)});
  if (metrics_) metrics_->queue.Set(static_cast<double>(queue_.size()));
  cv_.notify_one();
  return true;
}

void SnapshotStore::WriterLoop() {
  // Background work: the request threads come first. On a loaded machine
  // this thread then writes less and the queue drops more (counted), rather
  // than taking CPU from requests (docs/benchmarks.md, "Request snapshots").
  // Linux keeps a nice value per thread; where it cannot be set, nothing changes.
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kWriterNice);
  Sweep();
  auto next_sweep = std::chrono::steady_clock::now() + options_.sweep_interval;
  const auto shutdown_deadline = [this] {
    return std::chrono::steady_clock::now() + options_.shutdown_flush;
  };
  std::optional<std::chrono::steady_clock::time_point> flush_until;
  while (true) {
    std::unique_lock<std::mutex> lock(mu_);
    // The sweep's wake-up is a real-time wait: only what a sweep deletes is
    // decided by the injected clock.
    cv_.wait_until(lock, next_sweep,
                   [this] { return stop_ || !queue_.empty() || !digests_.empty(); });
    if (!queue_.empty()) {
      if (stop_ && !flush_until) flush_until = shutdown_deadline();
      Pending p = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= p.bytes;
      if (metrics_) metrics_->queue.Set(static_cast<double>(queue_.size()));
      if (flush_until && std::chrono::steady_clock::now() > *flush_until) {
        // Shutting down and out of time: what is left is dropped, counted.
        Drop("shutdown");
        if (queue_.empty()) idle_cv_.notify_all();
        continue;
      }
      writing_ = true;
      lock.unlock();
      Write(std::move(p));
      lock.lock();
      writing_ = false;
      if (queue_.empty()) idle_cv_.notify_all();
      continue;
    }
    if (stop_) return;
    if (std::chrono::steady_clock::now() >= next_sweep) {
      lock.unlock();
      Sweep();
      next_sweep = std::chrono::steady_clock::now() + options_.sweep_interval;
      continue;
    }
    if (!digests_.empty()) {
      // Idle: one slice of the oldest digest still running.
      std::shared_ptr<FileDigest> d = digests_.front();
      lock.unlock();
      const bool done = d->Step(options_.digest_slice_bytes);
      lock.lock();
      if (done) {
        digests_.erase(std::remove(digests_.begin(), digests_.end(), d), digests_.end());
        log_.Info("SHA-256 of {}: {}", d->path(), d->hex().value_or("?"));
      }
    }
  }
}

void SnapshotStore::Write(Pending p) {
  const std::string name = key_.FileName(p.meta.tenant, p.meta.request_id);
  util::Status st;
  std::string file;
  {
    const std::string plaintext = p.render();
    std::array<uint8_t, kSnapshotNonceBytes> nonce{};
    st = options_.nonce ? options_.nonce(nonce) : RandomNonce(nonce);
    if (st.ok() && plaintext.size() > options_.max_snapshot_bytes) {
      st = util::InvalidArgumentError(fmt::format("the snapshot has {} bytes; the limit is {}",
                                                  plaintext.size(), options_.max_snapshot_bytes));
    }
    if (st.ok()) {
      auto sealed = SealSnapshot(key_, p.meta, plaintext, nonce);
      if (sealed.ok()) {
        file = std::move(sealed).value();
      } else {
        st = sealed.status();
      }
    }
  }
  if (st.ok()) st = fs_.WriteFileAtomic(PathOf(name), file);
  if (!st.ok()) {
    Drop(st.code() == util::StatusCode::kInvalidArgument ? "too_large" : "write_error");
    log_.Warn("[{}] request snapshot not written: {}", p.meta.request_id, st.message());
    return;
  }
  counters_->written.fetch_add(1, std::memory_order_relaxed);
  if (metrics_) metrics_->written.Inc();
  std::lock_guard<std::mutex> lock(index_mu_);
  if (auto old = files_.find(name); old != files_.end()) {
    // The same tenant and request id again: the file was replaced.
    by_age_.erase({old->second.created_ms, name});
    total_bytes_ -= old->second.bytes;
    files_.erase(old);
  }
  files_[name] = File{p.meta.created_ms, file.size()};
  by_age_.insert({p.meta.created_ms, name});
  total_bytes_ += file.size();
  KeepBudgetLocked();
  PublishLocked();
}

void SnapshotStore::RemoveLocked(const std::string& name, bool expired) {
  auto it = files_.find(name);
  if (it == files_.end()) return;
  const util::Status st = fs_.Remove(PathOf(name));
  if (!st.ok() && st.code() != util::StatusCode::kNotFound) {
    log_.Warn("cannot delete snapshot file {}: {}", name, st.message());
  }
  by_age_.erase({it->second.created_ms, name});
  total_bytes_ -= it->second.bytes;
  files_.erase(it);
  (expired ? counters_->deleted_expired : counters_->deleted_budget)
      .fetch_add(1, std::memory_order_relaxed);
  if (metrics_) metrics_->deleted.With({expired ? "expired" : "budget"}).Inc();
}

void SnapshotStore::KeepBudgetLocked() {
  while (total_bytes_ > options_.max_bytes && !by_age_.empty()) {
    const std::string oldest = by_age_.begin()->second;
    RemoveLocked(oldest, /*expired=*/false);
  }
}

void SnapshotStore::PublishLocked() {
  counters_->files.store(static_cast<int64_t>(files_.size()), std::memory_order_relaxed);
  counters_->bytes.store(static_cast<int64_t>(total_bytes_), std::memory_order_relaxed);
  if (metrics_) {
    metrics_->files.Set(static_cast<double>(files_.size()));
    metrics_->bytes.Set(static_cast<double>(total_bytes_));
  }
}

void SnapshotStore::Sweep() {
  auto names = fs_.ListDir(options_.dir);
  if (!names.ok()) {
    log_.Warn("snapshot sweep: {}", names.status().message());
    return;
  }
  // New files' headers are read outside the lock (files another process
  // wrote, or every file at start-up).
  std::set<std::string> present;
  std::set<std::string> tmp;
  std::vector<std::string> unknown;
  {
    std::lock_guard<std::mutex> lock(index_mu_);
    for (const std::string& n : *names) {
      if (IsSnapshotName(n)) {
        present.insert(n);
        if (files_.count(n) == 0) unknown.push_back(n);
      } else if (EndsWith(n, ".snap.tmp")) {
        tmp.insert(n);
      }
    }
  }
  std::vector<std::pair<std::string, File>> found;
  for (const std::string& n : unknown) {
    auto mapped = fs_.MapReadOnly(PathOf(n));
    if (!mapped.ok()) continue;  // gone since the listing
    auto header = ParseSnapshotHeader((*mapped)->bytes());
    if (!header.ok()) {
      log_.Warn("snapshot sweep: {} is not a snapshot file ({}); left alone", n,
                header.status().message());
      continue;
    }
    // Another key's files (a rotated key) still count and expire here.
    found.push_back({n, File{header->created_ms, (*mapped)->bytes().size()}});
  }
  std::lock_guard<std::mutex> lock(index_mu_);
  for (auto& [n, f] : found) {
    if (files_.count(n) != 0) continue;  // written meanwhile
    files_[n] = f;
    by_age_.insert({f.created_ms, n});
    total_bytes_ += f.bytes;
  }
  // Files deleted by someone else are forgotten (not counted as deletions).
  for (auto it = files_.begin(); it != files_.end();) {
    if (present.count(it->first) != 0) {
      ++it;
      continue;
    }
    // Written after the listing? Then it is present now; keep it.
    if (fs_.Exists(PathOf(it->first))) {
      ++it;
      continue;
    }
    by_age_.erase({it->second.created_ms, it->first});
    total_bytes_ -= it->second.bytes;
    it = files_.erase(it);
  }
  // A temporary file seen by two sweeps in a row is a write that never
  // finished (a crash): it is removed.
  for (const std::string& n : tmp) {
    if (stale_tmp_.count(n) != 0) (void)fs_.Remove(PathOf(n));
  }
  stale_tmp_ = std::move(tmp);
  const int64_t cutoff =
      NowMs() - std::chrono::duration_cast<std::chrono::milliseconds>(options_.retention).count();
  while (!by_age_.empty() && by_age_.begin()->first < cutoff) {
    const std::string oldest = by_age_.begin()->second;
    RemoveLocked(oldest, /*expired=*/true);
  }
  KeepBudgetLocked();
  PublishLocked();
}

bool SnapshotStore::Flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [this] { return queue_.empty() && !writing_; });
}

void SnapshotStore::AddDigest(std::shared_ptr<FileDigest> digest) {
  if (digest == nullptr || digest->done()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    digests_.push_back(std::move(digest));
  }
  cv_.notify_one();
}

SnapshotStoreStats SnapshotStore::stats() const {
  const Counters& c = *counters_;
  auto get = [](const std::atomic<int64_t>& v) { return v.load(std::memory_order_relaxed); };
  return {.written = get(c.written),
          .dropped_queue_full = get(c.dropped_queue_full),
          .dropped_too_large = get(c.dropped_too_large),
          .dropped_write_error = get(c.dropped_write_error),
          .dropped_shutdown = get(c.dropped_shutdown),
          .deleted_expired = get(c.deleted_expired),
          .deleted_budget = get(c.deleted_budget),
          .auth_failures = get(c.auth_failures),
          .files = get(c.files),
          .bytes = get(c.bytes)};
}

namespace {

// The snapshot of (tenant, request_id) in `dir`: NotFound, the file
// system's error, or what OpenSnapshot says.
util::StatusOr<OpenedSnapshot> ReadOne(util::FileSystem& fs, const std::string& dir,
                                       const SnapshotKey& key, const std::string& tenant,
                                       const std::string& request_id) {
  const std::string path = dir + "/" + key.FileName(tenant, request_id);
  auto size = fs.FileSize(path);
  if (!size.ok()) {
    if (size.status().code() == util::StatusCode::kNotFound) {
      return util::NotFoundError(fmt::format("no snapshot of request '{}'", request_id));
    }
    return size.status();
  }
  if (*size > kMaxSnapshotPlaintextBytes + kSnapshotOverheadBytes) {
    return util::DataLossError(
        fmt::format("the snapshot file of request '{}' has {} bytes, over "
                    "the limit of {}",
                    request_id, *size, kMaxSnapshotPlaintextBytes + kSnapshotOverheadBytes));
  }
  auto bytes = fs.ReadFile(path);
  if (!bytes.ok()) {
    if (bytes.status().code() == util::StatusCode::kNotFound) {
      return util::NotFoundError(fmt::format("no snapshot of request '{}'", request_id));
    }
    return bytes.status();
  }
  return OpenSnapshot(key, tenant, request_id, *bytes);
}

}  // namespace

util::StatusOr<OpenedSnapshot> SnapshotStore::Read(util::FileSystem& fs, const std::string& dir,
                                                   const SnapshotKey& key,
                                                   const std::string& tenant,
                                                   const std::string& request_id) {
  auto opened = ReadOne(fs, dir, key, tenant, request_id);
  if (opened.ok() || opened.status().code() != util::StatusCode::kNotFound) return opened;
  // A key names its files: under a wrong key every snapshot looks absent.
  // The headers say which key wrote them (up to 64 looked at).
  auto names = fs.ListDir(dir);
  if (!names.ok()) return opened;
  size_t looked = 0;
  std::string other;
  for (const std::string& n : *names) {
    if (!IsSnapshotName(n) || looked >= 64) continue;
    auto mapped = fs.MapReadOnly(dir + "/" + n);
    if (!mapped.ok()) continue;
    auto header = ParseSnapshotHeader((*mapped)->bytes());
    if (!header.ok()) continue;
    ++looked;
    if (header->key_id == key.id()) return opened;  // the key is right: it is absent
    other = Hex(header->key_id);
  }
  if (other.empty()) return opened;
  return util::DataLossError(fmt::format(
      "snapshot authentication failed: the snapshots in {} were written under another key (key id "
      "{}; this key's is {})",
      dir, other, key.IdHex()));
}

util::StatusOr<OpenedSnapshot> SnapshotStore::Get(const std::string& tenant,
                                                  const std::string& request_id) const {
  auto opened = ReadOne(fs_, options_.dir, key_, tenant, request_id);
  if (!opened.ok()) {
    if (opened.status().code() == util::StatusCode::kDataLoss) {
      counters_->auth_failures.fetch_add(1, std::memory_order_relaxed);
      if (metrics_) metrics_->auth_failures.Inc();
    }
    return opened.status();
  }
  const int64_t cutoff =
      NowMs() - std::chrono::duration_cast<std::chrono::milliseconds>(options_.retention).count();
  if (opened->created_ms < cutoff) {
    // Expired: the next sweep deletes it; until then it is absent.
    return util::NotFoundError(fmt::format("no snapshot of request '{}'", request_id));
  }
  return opened;
}

}  // namespace strata::obs
