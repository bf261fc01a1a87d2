// cli/serve_sessions.h — the `strata serve` flags of durable sessions
// (--sessions rocksdb:DIR or redis://HOST:PORT[,...], their limits and the
// replication they wait for), and the store they open (session/
// rocks_store.h, session/redis_store.h) for the server (server/server.h:
// sessions).
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
  // --sessions rocksdb:DIR or redis://HOST:PORT[,HOST:PORT...]; "" = off
  // (session_id only labels).
  std::string store;
  uint64_t max_turns = 1000;         // --session-max-turns: [1, 1e6] turns per session
  uint64_t max_bytes = 8ull << 20;   // --session-max-bytes: [2^10, 2^32] bytes per session
  uint64_t max_per_tenant = 100000;  // --sessions-per-tenant: [1, 1e9]
  // --session-ttl: since a session's last turn; seconds, or a number with
  // s, m, h or d; "0" = never expire.
  std::string ttl = "7d";
  int32_t dependency_wait_ms = 200;  // --session-dependency-wait-ms: [0, 60000]
  // Redis only. --session-replicas: replicas that confirm each turn before
  // it is acknowledged, [-1, 15]; -1 = a majority of the listed nodes.
  int32_t replicas = -1;
  int32_t replica_wait_ms = 1000;   // --session-replica-wait-ms: [1, 60000]
  int32_t redis_timeout_ms = 1000;  // --session-redis-timeout-ms: [1, 60000] connect, each command
};

void RegisterSessionFlags(CLI::App& cmd, SessionFlags& flags);

// The flags alone (no directory is opened): InvalidArgument naming the flag.
util::Status ValidateSessionFlags(const SessionFlags& flags);

// Opens the store --sessions names (creating its directory, or finding the
// Redis primary); nullptr without --sessions. Errors name the flag and the
// store's reason.
util::StatusOr<std::unique_ptr<session::SessionStore>> OpenSessions(const SessionFlags& flags,
                                                                    util::Logger& log);

}  // namespace strata::cli
