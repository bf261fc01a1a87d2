// cache/policy_sim.h — replaying key streams through eviction policies.
//
// Promise: SimulatePolicy feeds a stream of accesses to a cache of `capacity`
// entries governed by `policy` (hit: Access; miss: Insert, then evict while
// over capacity) and counts hits; deterministic for a given stream and seed.
// With admission enabled, a miss on a full cache is stored only when the
// AdmissionGate admits it (admission.h), exactly as the L1 and L3 tiers do.
// Used by `strata bench cache` to compare policies and admission, and by tests.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/admission.h"
#include "cache/eviction_policy.h"

namespace strata::cache {

struct KeyAccess {
  uint64_t key = 0;
  TimePoint time;
};

struct SimResult {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;                  // replacements: stored entries evicted for a newer one
  uint64_t stores = 0;                     // misses stored
  uint64_t rejected = 0;                   // misses on a full cache the admission gate turned away
  double final_admission_probability = 1;  // the gate's p at the end of the stream
  double hit_ratio() const {
    return hits + misses == 0 ? 0.0
                              : static_cast<double>(hits) / static_cast<double>(hits + misses);
  }
};

// `seed` drives the admission draws (unused when admission is disabled).
SimResult SimulatePolicy(EvictionPolicy& policy, std::span<const KeyAccess> stream, size_t capacity,
                         const AdmissionOptions& admission = {}, uint64_t seed = 0);

// `n` accesses over keys 1..n_keys drawn from Zipf(skew), one every `step`
// starting at `start`, from a seeded generator.
std::vector<KeyAccess> ZipfWorkload(uint64_t n_keys, size_t n, double skew, uint64_t seed,
                                    TimePoint start, std::chrono::microseconds step);

// Distinct keys of a stream.
size_t DistinctKeys(std::span<const KeyAccess> stream);

}  // namespace strata::cache
