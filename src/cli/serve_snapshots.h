// cli/serve_snapshots.h — the `strata serve` flags of request snapshots
// (--snapshots DIR and its key, retention, budget, tenants and queue), and
// what they start: the encrypted store with its writer thread and the
// server's recorder (obs/snapshot_store.h, server/snapshots.h).
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "model/transformer.h"
#include "obs/metrics.h"
#include "obs/snapshot_store.h"
#include "server/snapshots.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::cli {

// Each flag's default, unit and range live here, once.
struct SnapshotFlags {
  std::string dir;       // --snapshots DIR; "" = off
  std::string key_file;  // --snapshot-key-file: 32 raw bytes or 64 hex digits; required with DIR
  // --snapshot-retention: how long a snapshot is kept, [1 s, 3650 d]:
  // seconds, or a number with s, m, h or d.
  std::string retention = "7d";
  uint64_t max_bytes = 1ull << 30;  // --snapshot-max-bytes: [2^20, 2^50] bytes of snapshot files
  std::string tenants;              // --snapshot-tenants: comma-separated; "" = every tenant
  int32_t queue = 1024;             // --snapshot-queue: [1, 65536] snapshots waiting to be written
};

void RegisterSnapshotFlags(CLI::App& cmd, SnapshotFlags& flags);

// The flags alone (no file is read): InvalidArgument naming the flag.
util::Status ValidateSnapshotFlags(const SnapshotFlags& flags);

// "30d", "12h", "90m", "45s", "3600" as a duration; InvalidArgument naming
// `flag` when it is none of these or outside [1 s, 3650 d].
util::StatusOr<std::chrono::seconds> ParseRetention(const std::string& text, const char* flag);

// What --snapshots starts. The store's writer thread runs until the object
// is destroyed (it writes what is queued first, for up to 2 s); it must
// outlive the server that records into `recorder`.
struct SnapshotServing {
  std::unique_ptr<obs::SnapshotStore> store;
  std::unique_ptr<server::SnapshotRecorder> recorder;
};

// Loads the key and opens the store (creating the directory) and the
// recorder; nullptr without --snapshots. Errors name the flag or file.
util::StatusOr<std::unique_ptr<SnapshotServing>> OpenSnapshots(const SnapshotFlags& flags,
                                                               const Env& env,
                                                               obs::MetricsRegistry& metrics,
                                                               const util::Clock& clock,
                                                               util::Logger& log);

// What snapshots record of the local model served as `name` from `path`:
// its rendering settings, and its SHA-256, which the store's writer thread
// computes from a second mapping of the file while idle (left out, with a
// warning, when the file is no longer the one `model` was loaded from).
void AddLocalModel(SnapshotServing& snapshots, const Env& env, const std::string& name,
                   const std::string& path, const model::Model& model,
                   const std::string& chat_format, bool prompt_special_tokens,
                   int32_t max_tokens_cap, const std::string& kv_type, const std::string& repack,
                   util::Logger& log);

}  // namespace strata::cli
