// session/rocks_store.h — the embedded session store: RocksDB in one
// directory, every acknowledged turn synced to its write-ahead log.
//
// Promise: as session.h says, and: an Append returns only after RocksDB has
// fsynced the write (WriteOptions::sync), so a turn acknowledged before a
// crash (kill -9, power loss on a file system that honours fsync) is there
// after a restart; one Append is one atomic write batch (the turn, the
// session's meta record, its op id, the tenant's count), so a crash never
// leaves half a turn. Opening an existing directory recovers its log.
//
// Threading: thread-safe. Appends, reads and deletes of one session are
// serialised by a lock of that session's stripe; other sessions proceed in
// parallel (RocksDB is thread-safe itself).
#pragma once

#include <memory>
#include <string>

#include "session/session.h"
#include "util/clock.h"
#include "util/status.h"

namespace strata::session {

struct RocksStoreOptions {
  std::string dir{};  // created if missing
  Limits limits{};
  // Wall time for created/updated stamps and TTLs; steady time for waits.
  // Not owned; must outlive the store. nullptr: the real clock.
  const util::Clock* clock = nullptr;
  // false only in benchmarks that measure what the sync costs.
  bool sync = true;
};

// kInvalidArgument for an empty dir or out-of-range limits; kUnavailable
// when RocksDB cannot open the directory (locked by another process, not
// writable, corrupt), with RocksDB's message.
util::StatusOr<std::unique_ptr<SessionStore>> OpenRocksStore(const RocksStoreOptions& options);

}  // namespace strata::session
