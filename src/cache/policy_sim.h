// cache/policy_sim.h — replaying key streams through eviction policies.
//
// Promise: SimulatePolicy feeds a stream of accesses to a cache of `capacity`
// entries governed by `policy` (hit: Access; miss: Insert, then evict while
// over capacity) and counts hits; deterministic for a given stream. Used by
// `strata bench cache` to compare policies and by tests.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/eviction_policy.h"

namespace strata::cache {

struct KeyAccess {
  uint64_t key = 0;
  TimePoint time;
};

struct SimResult {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  double hit_ratio() const {
    return hits + misses == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(hits + misses);
  }
};

SimResult SimulatePolicy(EvictionPolicy& policy, std::span<const KeyAccess> stream, size_t capacity);

// `n` accesses over keys 1..n_keys drawn from Zipf(skew), one every `step`
// starting at `start`, from a seeded generator.
std::vector<KeyAccess> ZipfWorkload(uint64_t n_keys, size_t n, double skew, uint64_t seed,
                                    TimePoint start, std::chrono::microseconds step);

// Distinct keys of a stream.
size_t DistinctKeys(std::span<const KeyAccess> stream);

}  // namespace strata::cache
