// session/redis_store.h — the replicated session store: sessions in a Redis
// primary and its replicas, every acknowledged turn on a majority of them.
//
// Promise: as session.h says, and: an Append (or Delete) returns OK only
// after the primary applied it atomically (one Lua script: the turn, the
// session's meta hash, its op id, the tenant's index) and WAIT confirmed it
// on `wait_replicas` replicas; with the primary's AOF at `appendfsync
// always` (checked at open), the write is also on the primary's disk. So a
// turn acknowledged before the primary dies is on the replica promoted in
// its place. When the replicas do not confirm in time, Append answers
// kUnavailable: the turn may be on the primary, and a retry with the same
// op id stores it once. A replica that has just synced counts only from
// its first acknowledgement, up to a second after its link is up: with a
// `wait_timeout` of 1 s or less, a write in that second can be answered so.
//
// Failover: the store is given every node's address. It finds the primary
// (ROLE), and when a command fails on the transport or answers READONLY
// (the node it holds was demoted) it finds the primary again and retries
// once: an append only when it has an op id (else a retry could store a
// turn twice). Nothing here promotes a replica: Redis Sentinel, or an
// operator, does (docs/scaling.md).
//
// Keys: `<prefix>:{<tenant>}:m:<id>` (hash: clock, turns, bytes, created,
// updated), `…:t:<id>` (hash: turn ref → turn record), `…:o:<id>` (hash: op
// id → turn ref), `<prefix>:{<tenant>}:index` (sorted set of ids, for
// listing) and `…:expiry` (ids scored by their last turn's time, for the
// TTL and the per-tenant count). The tenant is percent-encoded; a tenant's
// keys share one hash tag, so one script touches one Redis Cluster slot.
// docs/formats/session.md has the turn record and the ref.
//
// Threading: thread-safe. Calls share a pool of connections to the
// primary; each command is bounded by `timeout` (WAIT by `wait_timeout`),
// and a dependency's wait by Limits::dependency_wait, so no call blocks
// longer than about 2 × timeout + wait_timeout + dependency_wait.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "session/session.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::session {

struct RedisStoreOptions {
  // Every node's HOST and port, the primary among them (any order).
  std::vector<std::pair<std::string, int>> nodes{};
  Limits limits{};
  std::chrono::milliseconds timeout{1000};  // [1 ms, 60 s] connect, and each command
  // Replicas that must confirm each write; -1: a majority of the nodes with
  // the primary (nodes / 2). [-1, nodes - 1]
  int wait_replicas = -1;
  std::chrono::milliseconds wait_timeout{1000};  // [1 ms, 60 s] how long WAIT waits
  size_t connections = 8;                        // [1, 256] pooled connections to the primary
  std::string prefix = "strata:v1:session";      // printable, no spaces
  // Refuse a primary whose AOF is off or not `appendfsync always` (when it
  // says: a server with CONFIG disabled is taken with a warning).
  bool require_aof = true;
  // Wall time for stamps and TTLs. Not owned; nullptr: the real clock.
  const util::Clock* clock = nullptr;
  util::Logger* log = nullptr;  // not owned; nullptr: no log lines
};

// "redis://HOST:PORT[,HOST:PORT...]" (or without the scheme) as nodes;
// InvalidArgument naming what is wrong.
util::StatusOr<std::vector<std::pair<std::string, int>>> ParseRedisNodes(std::string_view text);

// kInvalidArgument for bad options; kUnavailable when no node answers as a
// primary; kFailedPrecondition for a primary without a synced AOF (the
// message says how to turn it on).
util::StatusOr<std::unique_ptr<SessionStore>> OpenRedisStore(const RedisStoreOptions& options);

}  // namespace strata::session
