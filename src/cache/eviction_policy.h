// cache/eviction_policy.h — one eviction interface for every cache tier.
//
// Promise: a policy tracks a set of 64-bit keys with a cost each (bytes or 1)
// and names the key to evict when the owner needs room. Three
// implementations, chosen per tier in the config:
//  - LRU: least recently inserted-or-accessed first.
//  - Dual-factor: score = exp(-λ·age) · n/(n+k), with age the time since the
//    last access and n an access count that decays with half-life ln2/μ
//    (applied at each access); the lowest score goes first. Between two
//    accesses an entry's score only shrinks by the common factor
//    exp(-λ·Δt), so the order of entries never changes while time passes and
//    an ordered index finds the victim in O(log n).
//  - W-TinyLFU: a small LRU window in front of a segmented LRU main area
//    (probation/protected); a count-min sketch of recent access frequencies
//    (with periodic halving) decides whether the window's victim may displace
//    the main area's. The strong baseline.
// The owner calls Insert/Access/Erase as entries come, are hit and go, then
// Victim()+Erase until its budget holds; VictimAmong when some entries
// cannot go now. Time comes in as arguments.
//
// Threading: thread-compatible; the owning cache serialises calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

namespace strata::cache {

using TimePoint = std::chrono::steady_clock::time_point;

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual void Insert(uint64_t key, uint64_t cost, TimePoint now) = 0;  // key not present
  virtual void Access(uint64_t key, TimePoint now) = 0;                 // a hit; no-op if absent
  virtual void Erase(uint64_t key) = 0;                                 // no-op if absent
  // The key to evict next (present in the policy), nullopt when empty.
  virtual std::optional<uint64_t> Victim(TimePoint now) = 0;
  // The key to evict next among those `allowed` accepts (an owner whose
  // entries may be in use, and in use cannot go: resident models), in the
  // policy's order; nullopt when none is. With every key allowed it is
  // Victim(now). Walks the entries: for small sets.
  virtual std::optional<uint64_t> VictimAmong(TimePoint now,
                                              const std::function<bool(uint64_t)>& allowed) = 0;
  virtual size_t size() const = 0;
  virtual std::string_view name() const = 0;
};

enum class PolicyKind { kLru, kDualFactor, kWTinyLfu };

struct PolicyOptions {
  // dual-factor: age decay rate of the score (1/s), >= 0. 0.003 balances
  // stationary popularity (Zipf: lower is better, 0.001 is within 1.4 points
  // of W-TinyLFU) against recency-driven traces (Mooncake, BurstGPT: 0.001
  // falls up to 3.6 points below LRU); docs/benchmarks.md, "Eviction policies".
  double lambda_per_s = 0.003;
  double k = 0.5;                  // dual-factor: frequency saturation, > 0
  double count_half_life_s = 600;  // dual-factor: half-life of the access count (s), > 0
  size_t capacity = 1024;  // W-TinyLFU: expected number of entries (sizes the sketch and window)
  double window_fraction = 0.01;  // W-TinyLFU: share of capacity in the LRU window, (0, 1)
};

std::unique_ptr<EvictionPolicy> NewEvictionPolicy(PolicyKind kind,
                                                  const PolicyOptions& options = {});
std::optional<PolicyKind> ParsePolicyKind(
    std::string_view name);  // "lru", "dual-factor", "w-tinylfu"
std::string_view PolicyKindName(PolicyKind kind);

}  // namespace strata::cache
