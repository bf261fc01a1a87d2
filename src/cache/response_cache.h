// cache/response_cache.h — L1: the exact response cache.
//
// Promise: maps a CacheKey (tenant first, compared in full on every hit) to
// an immutable stored answer. Memory is bounded: the bytes of every entry
// (its key, its value's ByteSize and a fixed per-entry overhead) never sum
// above max_bytes; room is made by dropping expired entries first, then the
// eviction policy's victims (eviction_policy.h; dual-factor by default). An
// entry larger than max_entry_bytes is not stored. With admission enabled
// (admission.h), a new entry that would need room is stored only with the
// probability the tier's recent hit ratio gives; an entry that fits, or
// that replaces one under the same key, is always stored.
//
// Expiry: each entry lives ttl × U[1 − jitter, 1 + jitter] (drawn from the
// injected Rng at insertion), so entries written together do not expire
// together. Probabilistic early refresh (XFetch, Vattani et al. 2015): a hit
// with `remaining` time to expiry, on an entry that took `delta` to compute,
// asks its caller to recompute with probability
//     P = exp(−remaining / (beta · delta)),
// which is negligible while the entry is young and rises to 1 at expiry, so
// that under steady traffic one request refreshes a hot entry before it
// expires instead of every request missing at once. The caller decides what
// a refresh means (the gateway regenerates for that one request while
// everyone else keeps hitting the old entry until the new one replaces it).
//
// Threading: thread-safe. One mutex guards all state; values are immutable
// and shared, so a hit hands out a reference under the lock and the caller
// reads it after. The observer is called with the lock held: it must be quick,
// must not block and must not call back into the cache.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto l1, ResponseCache::Create({.max_bytes = 64 << 20}, clock,
//                                                          util::Rng(seed)));
//   auto found = l1->Lookup(key);
//   if (found.kind == Lookup::Kind::kHit) return Replay(found.value);
//   ... generate ...
//   l1->Insert(key, std::make_shared<MyAnswer>(...), compute_time);
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "cache/admission.h"
#include "cache/cache_key.h"
#include "cache/eviction_policy.h"
#include "util/clock.h"
#include "util/random.h"
#include "util/status.h"

namespace strata::cache {

// What a tier stores: immutable after construction.
class CachedValue {
 public:
  virtual ~CachedValue() = default;
  // Bytes this value holds (heap included), for the byte budget. Constant.
  virtual uint64_t ByteSize() const = 0;
};

// Why an entry left a tier.
enum class RemoveReason { kEvicted, kExpired, kReplaced, kErased };

// Receives a tier's events (for metrics). Implemented by the owner of the
// metrics registry (the gateway); the cache knows nothing of exporters.
class TierObserver {
 public:
  virtual ~TierObserver() = default;
  virtual void OnHit() = 0;
  virtual void OnMiss() = 0;
  virtual void OnEarlyRefresh() = 0;  // a kRefresh answer (OnMiss is called too)
  virtual void OnStore(uint64_t bytes) = 0;
  virtual void OnRemove(uint64_t bytes, RemoveReason reason) = 0;
};

struct ResponseCacheOptions {
  uint64_t max_bytes = 64ull << 20;  // [0, 2^40] bytes; 0 = stores nothing
  uint64_t max_entry_bytes = 0;      // bytes, largest entry stored; 0 = max_bytes / 8
  std::chrono::milliseconds ttl{std::chrono::minutes(10)};  // (0, 30 days]
  double ttl_jitter = 0.1;          // [0, 0.9]; each TTL is ttl × U[1 − j, 1 + j]
  double early_refresh_beta = 1.0;  // [0, 100]; XFetch beta, 0 = no early refresh
  PolicyKind policy = PolicyKind::kDualFactor;
  PolicyOptions policy_options{};
  AdmissionOptions admission{};  // off by default: every entry that fits the limits is stored
};

// Fixed bookkeeping charged to every entry on top of its key and value.
inline constexpr uint64_t kEntryOverheadBytes = 192;

struct Lookup {
  enum class Kind {
    kMiss,     // absent or expired
    kHit,      // serve `value`
    kRefresh,  // `value` is still valid, but this caller was chosen to recompute it
  };
  Kind kind = Kind::kMiss;
  std::shared_ptr<const CachedValue> value;  // kHit and kRefresh
};

struct ResponseCacheStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;           // kMiss and kRefresh answers (expired entries included)
  uint64_t early_refreshes = 0;  // kRefresh answers
  uint64_t stores = 0;
  uint64_t rejected = 0;      // Insert refused: larger than max_entry_bytes
  uint64_t not_admitted = 0;  // Insert refused by the admission gate (the cache was full)
  uint64_t evictions = 0;     // removed for room
  uint64_t expirations = 0;   // removed because their TTL ran out
};

// The XFetch rule as a pure function: true when a hit with `remaining` time
// to live, on a value that took `delta` to compute, should be recomputed,
// given a uniform draw u in [0, 1). Probability exp(-remaining / (beta·delta)).
bool ShouldRefreshEarly(std::chrono::nanoseconds remaining, std::chrono::nanoseconds delta,
                        double beta, double u);

class ResponseCache {
 public:
  // InvalidArgument naming the option when one is out of range. `clock` and
  // `observer` (may be null) must outlive the cache; `rng` draws TTL jitter
  // and early refreshes.
  static util::StatusOr<std::unique_ptr<ResponseCache>> Create(const ResponseCacheOptions& options,
                                                               const util::Clock& clock,
                                                               util::Rng rng,
                                                               TierObserver* observer = nullptr);

  // Counts a hit, a miss or an early refresh; an expired entry is dropped.
  Lookup Find(const CacheKey& key);
  // The live value without counting, drawing or touching recency (used to
  // re-check under the single-flight lock); nullptr when absent or expired.
  std::shared_ptr<const CachedValue> Peek(const CacheKey& key) const;
  // Stores `value` (replacing any entry under `key`) with a fresh jittered
  // TTL, or with `ttl` when given (an entry copied from a shared tier keeps
  // the time it has left there); `compute_time` is what producing it cost
  // (the XFetch delta). False when it is larger than max_entry_bytes or the
  // admission gate turned it away (nothing changes then).
  bool Insert(const CacheKey& key, std::shared_ptr<const CachedValue> value,
              std::chrono::nanoseconds compute_time,
              std::optional<std::chrono::nanoseconds> ttl = std::nullopt);
  // True when an entry was removed.
  bool Erase(const CacheKey& key);
  // Calls `fn` with every live entry and the time it has left (for a
  // snapshot; under the cache's mutex: `fn` must not call back into it).
  void ForEach(const std::function<void(const CacheKey& key, const CachedValue& value,
                                        std::chrono::nanoseconds ttl_left)>& fn) const;
  // Removes every entry for which `match(key, value)` is true; how many.
  // `match` runs with the cache's mutex held: it must be quick and must not
  // call back into the cache.
  size_t EraseIf(const std::function<bool(const CacheKey& key, const CachedValue& value)>& match);

  // New entries from now on live `ttl` x U[1 - ttl_jitter, 1 + ttl_jitter]
  // and pass the admission gate when `admission` (the rest of the options
  // stay as created); entries stored before keep their expiry.
  // InvalidArgument, changing nothing, when a value is outside its range.
  util::Status Reconfigure(std::chrono::milliseconds ttl, double ttl_jitter, bool admission);

  ResponseCacheStats Stats() const;
  // As created (Reconfigure does not change what this returns).
  const ResponseCacheOptions& options() const { return options_; }

 private:
  struct Entry {
    uint64_t id = 0;  // the policy's key for this entry
    std::shared_ptr<const CachedValue> value;
    uint64_t bytes = 0;
    TimePoint expires;
    std::chrono::nanoseconds compute_time{0};
  };
  using Map = std::unordered_map<CacheKey, Entry, CacheKeyHash>;

  ResponseCache(const ResponseCacheOptions& options, const util::Clock& clock, util::Rng rng,
                TierObserver* observer);
  // All below: mu_ held.
  void RemoveLocked(Map::iterator it, RemoveReason reason);
  void DropExpiredLocked(TimePoint now);

  const ResponseCacheOptions options_;
  const uint64_t max_entry_bytes_;
  const util::Clock& clock_;
  TierObserver* const observer_;

  mutable std::mutex mu_;          // guards everything below
  std::chrono::milliseconds ttl_;  // Reconfigure's, else options_'
  double ttl_jitter_;
  bool admission_enabled_;
  util::Rng rng_;
  Map map_;
  std::unordered_map<uint64_t, const CacheKey*> by_id_;  // policy key -> map_ key (node-stable)
  std::set<std::pair<TimePoint, uint64_t>> by_expiry_;   // (expires, id), soonest first
  std::unique_ptr<EvictionPolicy> policy_;
  AdmissionGate admission_;
  uint64_t next_id_ = 1;
  ResponseCacheStats stats_;  // entries and bytes kept current
};

}  // namespace strata::cache
