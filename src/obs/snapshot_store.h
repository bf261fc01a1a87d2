// obs/snapshot_store.h — a directory of encrypted request snapshots, with a
// writer thread, a bounded queue and retention (docs/formats/snapshot.md).
//
// Promise: Put never blocks and never fails the request it records: it
// queues the snapshot for the writer thread, or drops it, counted by reason
// (queue_full: more than max_pending snapshots or max_pending_bytes bytes
// wait; too_large: one snapshot is over max_snapshot_bytes or the whole
// budget). The writer renders each one (the callback Put was given), seals
// it (obs/snapshot_envelope.h: AES-256-GCM, a fresh random nonce, tenant
// and request id authenticated) and writes it atomically (a temporary
// sibling, fsync, rename: a reader sees the whole old file or the whole new
// one) as DIR/<name>.snap, the name an HMAC of tenant and request id; a
// later snapshot of the same tenant and id replaces the earlier one. A
// failed write is logged and counted (write_error), never retried.
//
// Retention: Get treats a snapshot older than `retention` (by the injected
// clock's calendar time) as absent, and a sweep — on the writer thread every
// sweep_interval, or Sweep() — deletes them and then, oldest first, as many
// as needed to bring the directory's snapshot bytes under max_bytes. The
// budget is also kept after every write. The sweep lists the directory each
// time, so files another process writes into the same directory count too;
// it reads only each new file's 32-byte header.
//
// When idle, the writer advances the background file digests handed to it
// (AddDigest: the served model's SHA-256), a slice at a time.
//
// Get reads a snapshot back for its own tenant only: another tenant's name
// is another file, so it is NotFound exactly like one that never existed
// or has expired; a file that fails authentication is DataLoss (and
// counted). Nothing here logs a snapshot's content or the key.
//
// Metrics (when a registry is given): strata_snapshots_written_total,
// strata_snapshots_dropped_total{reason}, strata_snapshots_deleted_total
// {reason=expired|budget}, strata_snapshot_auth_failures_total,
// strata_snapshot_queue_depth, strata_snapshot_files, strata_snapshot_bytes.
//
// Threading: thread-safe. Put and Get from any thread; one writer thread
// (started by Open, joined by the destructor after it writes what is still
// queued, for at most shutdown_flush) owns the writing, the sweeps and the
// digests. It runs at nice 10: on a busy machine requests come first and
// the queue drops more, rather than the writer taking their CPU.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto store, SnapshotStore::Open({.dir = "snapshots"}, key, fs,
//                                                           clock, &metrics, log));
//   store->Put({.tenant = "acme", .request_id = "r1", .created_ms = now_ms}, bytes,
//              [record] { return Render(*record); });
//   STRATA_ASSIGN_OR_RETURN(OpenedSnapshot s, store->Get("acme", "r1"));
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "obs/digest.h"
#include "obs/metrics.h"
#include "obs/snapshot_envelope.h"
#include "util/clock.h"
#include "util/file_system.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::obs {

struct SnapshotStoreOptions {
  std::string dir = "";                              // created when missing
  std::chrono::seconds retention{7 * 24 * 3600};     // [1 s, 3650 days]
  uint64_t max_bytes = 1ull << 30;                   // [1 MiB, 2^50] bytes of snapshot files
  size_t max_pending = 1024;                         // [1, 65536] snapshots waiting to be written
  uint64_t max_pending_bytes = 256ull << 20;         // [1 MiB, 2^40] their (estimated) bytes
  size_t max_snapshot_bytes = 64u << 20;             // [1 KiB, 256 MiB] one snapshot's plaintext
  std::chrono::milliseconds sweep_interval{60'000};  // [10 ms, 1 day] between sweeps
  std::chrono::milliseconds shutdown_flush{2'000};   // [0, 60 s] the destructor's writing
  size_t digest_slice_bytes = 16u << 20;             // [4 KiB, 1 GiB] hashed per idle turn
  // The nonce source; default RandomNonce (OpenSSL's CSPRNG). Tests only.
  std::function<util::Status(std::span<uint8_t, kSnapshotNonceBytes>)> nonce = nullptr;
};

// Counters of what the store did (tests, logs); the metrics say the same.
struct SnapshotStoreStats {
  int64_t written = 0;
  int64_t dropped_queue_full = 0;
  int64_t dropped_too_large = 0;
  int64_t dropped_write_error = 0;
  int64_t dropped_shutdown = 0;
  int64_t deleted_expired = 0;
  int64_t deleted_budget = 0;
  int64_t auth_failures = 0;
  int64_t files = 0;  // snapshot files the last sweep or write knows of
  int64_t bytes = 0;  // their bytes
};

class SnapshotStore {
 public:
  // Creates `options.dir` if needed and starts the writer thread. `fs`,
  // `clock`, `metrics` (may be null) and `log` are borrowed and must outlive
  // the store. InvalidArgument naming the option out of range; the file
  // system's error when the directory cannot be made.
  static util::StatusOr<std::unique_ptr<SnapshotStore>> Open(const SnapshotStoreOptions& options,
                                                             SnapshotKey key, util::FileSystem& fs,
                                                             const util::Clock& clock,
                                                             MetricsRegistry* metrics,
                                                             util::Logger& log);
  ~SnapshotStore();
  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  // Queues the snapshot of (meta.tenant, meta.request_id); `render` makes its
  // plaintext on the writer thread and `estimated_bytes` is about its size.
  // False when it was dropped (counted). Never blocks.
  bool Put(SnapshotMeta meta, size_t estimated_bytes, std::function<std::string()> render);

  // The snapshot of (tenant, request_id) when it exists, is younger than the
  // retention and authenticates; NotFound when it does not exist or has
  // expired, DataLoss when it fails authentication, the file system's error
  // otherwise. Blocking file I/O: call it off the I/O threads.
  util::StatusOr<OpenedSnapshot> Get(const std::string& tenant,
                                     const std::string& request_id) const;

  // One retention sweep now, on the calling thread (the writer runs one
  // every sweep_interval).
  void Sweep();
  // Waits up to `timeout` until nothing is queued or being written; true
  // when that happened.
  bool Flush(std::chrono::milliseconds timeout);
  // The writer hashes `digest` a slice at a time while it has nothing to
  // write, until it is done.
  void AddDigest(std::shared_ptr<FileDigest> digest);

  SnapshotStoreStats stats() const;
  const SnapshotStoreOptions& options() const { return options_; }

  // The snapshot of (tenant, request_id) in `dir`, read without a store (the
  // replay command): as Get, with no retention check, and when it is absent
  // and the directory's snapshots were all written under another key (their
  // headers' key ids), DataLoss saying so.
  static util::StatusOr<OpenedSnapshot> Read(util::FileSystem& fs, const std::string& dir,
                                             const SnapshotKey& key, const std::string& tenant,
                                             const std::string& request_id);

 private:
  struct Pending {
    SnapshotMeta meta;
    size_t bytes = 0;
    std::function<std::string()> render;
  };
  struct Metrics;
  SnapshotStore(const SnapshotStoreOptions& options, SnapshotKey key, util::FileSystem& fs,
                const util::Clock& clock, util::Logger& log);
  void WriterLoop();
  void Write(Pending p);
  // Deletes the oldest files until the budget holds (index_mu_ held).
  void KeepBudgetLocked();
  void RemoveLocked(const std::string& name, bool expired);  // index_mu_ held
  void PublishLocked();                                      // index_mu_ held
  void Drop(const char* reason);
  int64_t NowMs() const;
  std::string PathOf(const std::string& name) const { return options_.dir + "/" + name; }

  const SnapshotStoreOptions options_;
  const SnapshotKey key_;
  util::FileSystem& fs_;
  const util::Clock& clock_;
  util::Logger& log_;
  std::unique_ptr<Metrics> metrics_;  // null without a registry

  // mu_ guards the hand-off between Put and the writer only, so Put (on an
  // I/O thread) never waits on file system work.
  mutable std::mutex mu_;
  std::condition_variable cv_;       // work queued, or stop (the writer waits)
  std::condition_variable idle_cv_;  // the queue emptied and nothing is being written
  std::deque<Pending> queue_;        // guarded by mu_
  uint64_t queued_bytes_ = 0;        // guarded by mu_
  bool writing_ = false;             // guarded by mu_: the writer holds a popped snapshot
  bool stop_ = false;                // guarded by mu_
  std::vector<std::shared_ptr<FileDigest>> digests_;  // guarded by mu_: not yet done

  // index_mu_ guards what the directory holds (the writer and sweeps).
  mutable std::mutex index_mu_;
  struct File {
    int64_t created_ms = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, File> files_;                 // guarded by index_mu_: name -> file
  std::set<std::pair<int64_t, std::string>> by_age_;  // guarded by index_mu_: (created, name)
  uint64_t total_bytes_ = 0;                          // guarded by index_mu_
  std::set<std::string> stale_tmp_;  // guarded by index_mu_: .tmp files the last sweep saw

  struct Counters;                      // SnapshotStoreStats as atomics
  std::unique_ptr<Counters> counters_;  // updated from any thread
  std::thread writer_;                  // last: started once everything above exists
};

}  // namespace strata::obs
