#include "cli/serve_sessions.h"

#include <fmt/format.h>

#include "cli/serve_snapshots.h"
#include "session/rocks_store.h"

namespace strata::cli {
namespace {

constexpr std::string_view kRocksPrefix = "rocksdb:";

util::StatusOr<std::chrono::seconds> Ttl(const SessionFlags& f) {
  if (f.ttl == "0") return std::chrono::seconds(0);
  return ParseRetention(f.ttl, "--session-ttl");
}

}  // namespace

void RegisterSessionFlags(CLI::App& cmd, SessionFlags& f) {
  cmd.add_option("--sessions", f.store,
                 "Durable sessions: rocksdb:DIR keeps every tenant's conversations in DIR (each "
                 "turn synced before its answer ends); a chat request with a session_id then "
                 "needs to send only its new turn. Default: off (session_id only labels)");
  cmd.add_option("--session-max-turns", f.max_turns, "Turns a session may hold, 1 to 1000000")
      ->capture_default_str();
  cmd.add_option("--session-max-bytes", f.max_bytes,
                 "Bytes of messages a session may hold, 1024 to 2^32")
      ->capture_default_str();
  cmd.add_option("--sessions-per-tenant", f.max_per_tenant,
                 "Sessions a tenant may have, 1 to 1000000000")
      ->capture_default_str();
  cmd.add_option("--session-ttl", f.ttl,
                 "A session is deleted this long after its last turn: seconds, or a number with "
                 "s, m, h or d; 0 = never")
      ->capture_default_str();
  cmd.add_option("--session-dependency-wait-ms", f.dependency_wait_ms,
                 "How long a turn waits for the turn it answers to be stored, 0 to 60000 ms")
      ->capture_default_str();
}

util::Status ValidateSessionFlags(const SessionFlags& f) {
  if (!f.store.empty()) {
    if (f.store.rfind(kRocksPrefix, 0) != 0 || f.store.size() == kRocksPrefix.size()) {
      return util::InvalidArgumentError(fmt::format(
          "--sessions '{}' is not rocksdb:DIR (the embedded store; a directory it creates)",
          f.store));
    }
  }
  if (f.max_turns < 1 || f.max_turns > 1000000) {
    return util::InvalidArgumentError(
        fmt::format("--session-max-turns {} is outside [1, 1000000]", f.max_turns));
  }
  if (f.max_bytes < 1024 || f.max_bytes > (1ull << 32)) {
    return util::InvalidArgumentError(
        fmt::format("--session-max-bytes {} is outside [1024, 2^32]", f.max_bytes));
  }
  if (f.max_per_tenant < 1 || f.max_per_tenant > 1000000000) {
    return util::InvalidArgumentError(
        fmt::format("--sessions-per-tenant {} is outside [1, 1000000000]", f.max_per_tenant));
  }
  if (f.dependency_wait_ms < 0 || f.dependency_wait_ms > 60000) {
    return util::InvalidArgumentError(
        fmt::format("--session-dependency-wait-ms {} is outside [0, 60000]", f.dependency_wait_ms));
  }
  return Ttl(f).status();
}

util::StatusOr<std::unique_ptr<session::SessionStore>> OpenSessions(const SessionFlags& f,
                                                                    util::Logger& log) {
  if (f.store.empty()) return std::unique_ptr<session::SessionStore>();
  STRATA_RETURN_IF_ERROR(ValidateSessionFlags(f));
  STRATA_ASSIGN_OR_RETURN(const std::chrono::seconds ttl, Ttl(f));
  session::RocksStoreOptions o;
  o.dir = f.store.substr(kRocksPrefix.size());
  o.limits.max_turns = f.max_turns;
  o.limits.max_bytes = f.max_bytes;
  o.limits.max_sessions_per_tenant = f.max_per_tenant;
  o.limits.ttl = ttl;
  o.limits.dependency_wait = std::chrono::milliseconds(f.dependency_wait_ms);
  auto store = session::OpenRocksStore(o);
  if (!store.ok()) return store.status().WithContext("--sessions");
  log.Info(
      "sessions: stored in {} (RocksDB, every turn synced; at most {} turns and {} bytes a "
      "session, {} sessions a tenant, TTL {})",
      o.dir, f.max_turns, f.max_bytes, f.max_per_tenant, f.ttl);
  return std::move(store).value();
}

}  // namespace strata::cli
