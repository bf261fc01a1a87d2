// cache/shared_store.h — the shared tier: L1 and L3 entries kept in Redis so
// that several strata instances serve each other's answers.
//
// Promise: nothing the shared tier does can fail or stall a request for
// longer than its timeout. Lookups answer a value or nullopt (absent, expired,
// Redis down, timed out, undecodable: all the same to the caller, counted in
// stats()); stores are queued and never block their caller.
//
// Keys (docs/api.md, "Shared tier"): every key is namespaced by the model
// fingerprint and the tenant, so instances of another model version or
// another tenant never see an entry:
//   <prefix>:<model:016x>:<tenant>:l1:<32 hex>        L1 entry (string)
//   <prefix>:<model:016x>:<tenant>:l3:<scope>:e:<id>   L3 entry (hash: t = text, v = value)
//   <prefix>:<model:016x>:<tenant>:l3:<scope>:b:<band>:<bits>   L3 bucket (set of
//   "<id><fingerprint>")
// with the tenant percent-encoded outside [A-Za-z0-9_.-]. Each entry and
// bucket carries a Redis TTL (the tier's TTL, jittered). An L1 value starts
// with the full CacheKey bytes, compared on every hit, so a hash collision
// can never serve another key's answer. An L3 lookup asks the buckets within
// the probe radius of the request's SimHash blocks (one SUNION), keeps the
// candidates within the index's Hamming distance, closest first, and confirms
// them with the same ScorePair measure and guards as the local NearDupIndex.
// Values travel as bytes through the caller's ValueCodec.
//
// Threading and latency: thread-safe. Lookups run on the calling thread (an
// HTTP request thread in strata serve) on a pooled connection, each command
// bounded by `timeout`; when no connection frees up within `timeout`, the
// lookup is skipped. Stores go into a bounded queue consumed by the store's
// own writer thread, which also owns reconnection; the scheduler thread only
// ever enqueues. A transport error marks Redis down (logged once, "redis
// down: ..."): from then on lookups are skipped and stores dropped without
// any I/O, while the writer thread reconnects with exponential backoff
// (backoff_min doubling to backoff_max) and marks it up again ("redis back").
// The injected clock dates the retries; the writer sleeps on a condition
// variable for the real duration.
//
// Usage:
//   auto store = SharedStore::Create(options, codec, clock, rng, log).value();
//   if (auto hit = store->GetExact(scope, key)) return Replay(hit->value);
//   ... generate ...
//   store->PutExact(scope, key, value, ttl);
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/cache_key.h"
#include "cache/near_dup.h"
#include "cache/response_cache.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/random.h"
#include "util/status.h"

namespace strata::cache {

struct SharedStoreOptions {
  std::string host = "127.0.0.1";
  int port = 6379;                              // [1, 65535]
  std::chrono::milliseconds timeout{50};        // [1 ms, 10 s] connect, and each command
  std::chrono::milliseconds backoff_min{100};   // [1 ms, backoff_max] first reconnect delay
  std::chrono::milliseconds backoff_max{5000};  // [backoff_min, 10 min]
  size_t read_connections = 4;                  // [1, 256] connections lookups share
  size_t max_pending_writes = 1024;             // [1, 2^20] queued stores; more are dropped
  double ttl_jitter = 0.1;                      // [0, 0.9] Redis TTL × U[1 − j, 1 + j]
  std::string prefix = "strata:v1";             // key prefix; printable, no spaces
  // L3 layout and confirmation: bands, probe_radius, max_candidates,
  // min_similarity and similarity are used (as in NearDupIndex).
  NearDupOptions near_dup;
};

// How a tier's values become bytes and back. Decode gets bytes from Redis:
// it must check everything and return an error, never crash.
class ValueCodec {
 public:
  virtual ~ValueCodec() = default;
  virtual std::string Encode(const CachedValue& value) const = 0;
  virtual util::StatusOr<std::shared_ptr<const CachedValue>> Decode(
      std::string_view bytes) const = 0;
};

// Whose entries: the namespace of every key.
struct SharedScope {
  std::string tenant;
  uint64_t model = 0;  // model fingerprint (a new model version is a new namespace)
};

struct SharedHit {
  std::shared_ptr<const CachedValue> value;
  std::chrono::milliseconds ttl_left{0};  // what Redis has left of the entry's TTL
  double similarity = 1.0;                // L3: ScorePair similarity; L1: 1
};

// A semantic tier entry (cache/semantic.h) as the shared tier keeps it.
struct SharedSemanticEntry {
  std::string ns;  // the semantic namespace (tenant and exact scope)
  uint64_t payload = 0;
  std::vector<float> vector;
  std::shared_ptr<const NearDupText> text;  // for the guards; may be null
  std::shared_ptr<const CachedValue> value;
  std::chrono::milliseconds ttl_left{0};  // GetSemantic: what Redis has left of it
};

struct SharedStoreStats {
  bool up = false;
  uint64_t lookups = 0;         // lookups sent to Redis
  uint64_t hits = 0;            // of those, answered
  uint64_t skipped = 0;         // lookups not sent: Redis down, or no connection free in time
  uint64_t writes = 0;          // stores written
  uint64_t dropped_writes = 0;  // stores not written: down, queue full, or failed
  uint64_t errors = 0;          // transport errors and undecodable entries
  uint64_t reconnects = 0;      // down → up transitions
};

// What SharedStore::Invalidate deletes: every field set must hold (none
// set: every entry under the prefix).
struct SharedInvalidation {
  std::optional<std::string> tenant;
  std::optional<uint64_t> model;  // a model fingerprint
  // Exactly one request: its L1 key, its L3 entry (scope id and text), and
  // its semantic entries (found by the key's hash).
  std::optional<CacheKey> key;
  std::optional<std::pair<std::string, std::shared_ptr<const NearDupText>>> near;
  // Entries whose decoded value it accepts (null: all); entries that do not
  // decode are deleted too (they can never be served).
  std::function<bool(const CachedValue&)> match;
};

struct SharedInvalidationResult {
  uint64_t entries = 0;  // L1 and L3 entries deleted
  uint64_t scanned = 0;  // keys looked at
};

class SharedStore {
 public:
  // InvalidArgument naming the option out of range. Tries to connect once
  // (bounded by the timeout); an unreachable Redis is not an error: the
  // store starts down and reconnects in the background. `codec`, `clock` and
  // `log` are borrowed and must outlive the store; `rng` draws TTL jitter.
  static util::StatusOr<std::unique_ptr<SharedStore>> Create(const SharedStoreOptions& options,
                                                             const ValueCodec& codec,
                                                             const util::Clock& clock,
                                                             util::Rng rng, util::Logger& log);
  ~SharedStore();  // stops the writer thread; stores still queued are dropped
  SharedStore(const SharedStore&) = delete;
  SharedStore& operator=(const SharedStore&) = delete;

  // L1: the value stored under `key` in `scope` (full key bytes compared).
  std::optional<SharedHit> GetExact(const SharedScope& scope, const CacheKey& key);
  // Queues SET with a Redis TTL of `ttl` (jittered).
  void PutExact(const SharedScope& scope, const CacheKey& key,
                std::shared_ptr<const CachedValue> value, std::chrono::nanoseconds ttl);

  // L3: the most similar entry of `scope` and `ns_id` (what must match
  // exactly, e.g. a hash of the parameters) with similarity >=
  // near_dup.min_similarity and no guard objecting.
  // `min_similarity` overrides the options' near_dup.min_similarity.
  std::optional<SharedHit> FindNear(const SharedScope& scope, std::string_view ns_id,
                                    const NearDupText& text,
                                    std::optional<double> min_similarity = std::nullopt);
  // Queues the entry (keyed by the text's token sequence) and its bucket
  // memberships, with a Redis TTL of `ttl` (jittered).
  void PutNear(const SharedScope& scope, std::string_view ns_id,
               std::shared_ptr<const NearDupText> text, std::shared_ptr<const CachedValue> value,
               std::chrono::nanoseconds ttl);

  // Deletes the entries `what` selects, on the calling thread: pending
  // stores are written first (up to `deadline`), then a SCAN of the
  // namespaces it names (values fetched and decoded only when `match` is
  // set), each command bounded by the timeout, the whole by `deadline`.
  // Unavailable while Redis is down; DeadlineExceeded when the scan could
  // not finish (what was deleted stays deleted).
  util::StatusOr<SharedInvalidationResult> Invalidate(
      const SharedInvalidation& what, std::chrono::steady_clock::time_point deadline);
  // The semantic tier, shared by replication (shared_semantic.cpp): each
  // instance keeps every instance's entries in its own index, so lookups
  // stay local. PutSemantic queues the entry (a hash under
  // <prefix>:<model>:<tenant>:sem:<encoder>:<id>, with a Redis TTL of `ttl`,
  // jittered) and its key on the stream <prefix>:semantic, which other
  // instances read with a SharedFeed (id() marks this store's own).
  // `encoder` is the encoder's fingerprint: vectors are only ever read back
  // by an instance with the same encoder.
  void PutSemantic(const SharedScope& scope, uint64_t encoder, SharedSemanticEntry entry,
                   std::chrono::nanoseconds ttl);
  // The entry under `key` (a message of the semantic stream) when it is
  // still there, decodes, and was made by `encoder`; on the calling thread.
  std::optional<SharedSemanticEntry> GetSemantic(std::string_view key, uint64_t encoder);
  // The keys of up to `max` semantic entries of model `model` made by
  // `encoder` (a SCAN; for a warm start), within `deadline`.
  std::vector<std::string> SemanticKeys(uint64_t model, uint64_t encoder, size_t max,
                                        std::chrono::steady_clock::time_point deadline);
  // What marks this store's messages on the semantic stream.
  const std::string& id() const;

  bool up() const;
  SharedStoreStats stats() const;
  // Waits until every queued store has been written or dropped; false if
  // that took longer than `timeout` (for tests and shutdown).
  bool Flush(std::chrono::milliseconds timeout);

 private:
  struct State;
  explicit SharedStore(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace strata::cache
