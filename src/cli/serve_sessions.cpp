#include "cli/serve_sessions.h"

#include <fmt/format.h>

#include "cli/serve_snapshots.h"
#include "session/redis_store.h"
#include "session/rocks_store.h"

namespace strata::cli {
namespace {

constexpr std::string_view kRocksPrefix = "rocksdb:";
constexpr std::string_view kRedisPrefix = "redis://";

bool IsRedis(const SessionFlags& f) { return f.store.rfind(kRedisPrefix, 0) == 0; }

util::StatusOr<std::chrono::seconds> Ttl(const SessionFlags& f) {
  if (f.ttl == "0") return std::chrono::seconds(0);
  return ParseRetention(f.ttl, "--session-ttl");
}

}  // namespace

void RegisterSessionFlags(CLI::App& cmd, SessionFlags& f) {
  cmd.add_option("--sessions", f.store,
                 "Durable sessions: rocksdb:DIR keeps every tenant's conversations in DIR (each "
                 "turn synced before its answer ends); redis://HOST:PORT[,HOST:PORT...] keeps "
                 "them in a Redis primary and its replicas, shared by every instance (each turn "
                 "on a majority of the nodes before its answer ends). A chat request with a "
                 "session_id then needs to send only its new turn. Default: off (session_id "
                 "only labels)");
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
  cmd.add_option("--session-replicas", f.replicas,
                 "redis:// sessions: replicas that must confirm each turn before it is "
                 "acknowledged, 0 to 15; -1 = a majority of the listed nodes")
      ->capture_default_str();
  cmd.add_option("--session-replica-wait-ms", f.replica_wait_ms,
                 "redis:// sessions: how long a turn waits for its replicas, 1 to 60000 ms (then "
                 "the request fails with 503; its retry stores the turn once)")
      ->capture_default_str();
  cmd.add_option("--session-redis-timeout-ms", f.redis_timeout_ms,
                 "redis:// sessions: the bound on connecting and on each command, 1 to 60000 ms")
      ->capture_default_str();
}

util::Status ValidateSessionFlags(const SessionFlags& f) {
  if (IsRedis(f)) {
    auto nodes = session::ParseRedisNodes(f.store);
    if (!nodes.ok()) return nodes.status().WithContext("--sessions");
    if (f.replicas > static_cast<int32_t>(nodes->size()) - 1) {
      return util::InvalidArgumentError(fmt::format(
          "--session-replicas {}: --sessions lists {} node(s), so at most {} replicas can confirm "
          "a turn",
          f.replicas, nodes->size(), nodes->size() - 1));
    }
  } else if (!f.store.empty() &&
             (f.store.rfind(kRocksPrefix, 0) != 0 || f.store.size() == kRocksPrefix.size())) {
    return util::InvalidArgumentError(
        fmt::format("--sessions '{}' is neither rocksdb:DIR (the embedded store; a directory it "
                    "creates) nor redis://HOST:PORT[,HOST:PORT...] (a Redis primary and its "
                    "replicas)",
                    f.store));
  }
  if (f.replicas < -1 || f.replicas > 15) {
    return util::InvalidArgumentError(
        fmt::format("--session-replicas {} is outside [-1, 15]", f.replicas));
  }
  if (f.replica_wait_ms < 1 || f.replica_wait_ms > 60000) {
    return util::InvalidArgumentError(
        fmt::format("--session-replica-wait-ms {} is outside [1, 60000]", f.replica_wait_ms));
  }
  if (f.redis_timeout_ms < 1 || f.redis_timeout_ms > 60000) {
    return util::InvalidArgumentError(
        fmt::format("--session-redis-timeout-ms {} is outside [1, 60000]", f.redis_timeout_ms));
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
  session::Limits limits;
  limits.max_turns = f.max_turns;
  limits.max_bytes = f.max_bytes;
  limits.max_sessions_per_tenant = f.max_per_tenant;
  limits.ttl = ttl;
  limits.dependency_wait = std::chrono::milliseconds(f.dependency_wait_ms);
  const std::string bounds =
      fmt::format("at most {} turns and {} bytes a session, {} sessions a tenant, TTL {}",
                  f.max_turns, f.max_bytes, f.max_per_tenant, f.ttl);
  if (IsRedis(f)) {
    session::RedisStoreOptions o;
    STRATA_ASSIGN_OR_RETURN(o.nodes, session::ParseRedisNodes(f.store));
    o.limits = limits;
    o.timeout = std::chrono::milliseconds(f.redis_timeout_ms);
    o.wait_replicas = f.replicas;
    o.wait_timeout = std::chrono::milliseconds(f.replica_wait_ms);
    o.log = &log;
    auto store = session::OpenRedisStore(o);
    if (!store.ok()) return store.status().WithContext("--sessions");
    log.Info("sessions: stored in Redis {} ({})", f.store.substr(kRedisPrefix.size()), bounds);
    return std::move(store).value();
  }
  session::RocksStoreOptions o;
  o.dir = f.store.substr(kRocksPrefix.size());
  o.limits = limits;
  auto store = session::OpenRocksStore(o);
  if (!store.ok()) return store.status().WithContext("--sessions");
  log.Info("sessions: stored in {} (RocksDB, every turn synced; {})", o.dir, bounds);
  return std::move(store).value();
}

}  // namespace strata::cli
