// cli/serve_sessions.h — the `strata serve` flags of durable sessions
// (--sessions rocksdb:DIR and its limits), and the store they open
// (session/rocks_store.h) for the server (server/server.h: sessions).
//
// Threading: called on the main thread at start-up.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "session/session.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::cli {

// Each flag's default, unit and range live here, once.
struct SessionFlags {
  std::string store;                 // --sessions rocksdb:DIR; "" = off (session_id only labels)
  uint64_t max_turns = 1000;         // --session-max-turns: [1, 1e6] turns per session
  uint64_t max_bytes = 8ull << 20;   // --session-max-bytes: [2^10, 2^32] bytes per session
  uint64_t max_per_tenant = 100000;  // --sessions-per-tenant: [1, 1e9]
  // --session-ttl: since a session's last turn; seconds, or a number with
  // s, m, h or d; "0" = never expire.
  std::string ttl = "7d";
  int32_t dependency_wait_ms = 200;  // --session-dependency-wait-ms: [0, 60000]
};

void RegisterSessionFlags(CLI::App& cmd, SessionFlags& flags);

// The flags alone (no directory is opened): InvalidArgument naming the flag.
util::Status ValidateSessionFlags(const SessionFlags& flags);

// Opens the store --sessions names (creating its directory); nullptr
// without --sessions. Errors name the flag and RocksDB's reason.
util::StatusOr<std::unique_ptr<session::SessionStore>> OpenSessions(const SessionFlags& flags,
                                                                    util::Logger& log);

}  // namespace strata::cli
