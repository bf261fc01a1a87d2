#include "cache/policy_sim.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "util/random.h"

namespace strata::cache {

SimResult SimulatePolicy(EvictionPolicy& policy, std::span<const KeyAccess> stream, size_t capacity,
                         const AdmissionOptions& admission, uint64_t seed) {
  SimResult r;
  AdmissionGate gate(admission);
  util::Rng rng(seed);
  std::unordered_set<uint64_t> present;
  present.reserve(capacity * 2);
  for (const KeyAccess& a : stream) {
    const bool hit = present.count(a.key) > 0;
    gate.RecordLookup(a.key, hit);
    if (hit) {
      ++r.hits;
      policy.Access(a.key, a.time);
      continue;
    }
    ++r.misses;
    // Only an entry that needs room asks the gate (as in the tiers).
    if (present.size() >= capacity && !gate.Admit(a.key, present.size(), rng.Uniform())) {
      ++r.rejected;
      continue;
    }
    ++r.stores;
    policy.Insert(a.key, 1, a.time);
    present.insert(a.key);
    while (present.size() > capacity) {
      const auto v = policy.Victim(a.time);
      if (!v) break;
      policy.Erase(*v);
      present.erase(*v);
      ++r.evictions;
    }
  }
  r.final_admission_probability = gate.probability();
  return r;
}

std::vector<KeyAccess> ZipfWorkload(uint64_t n_keys, size_t n, double skew, uint64_t seed,
                                    TimePoint start, std::chrono::microseconds step) {
  std::vector<double> cdf(n_keys);
  double sum = 0;
  for (uint64_t i = 0; i < n_keys; ++i) {
    sum += 1.0 / std::pow(static_cast<double>(i + 1), skew);
    cdf[i] = sum;
  }
  // Keys are scattered so that popularity is not correlated with key order.
  util::Rng rng(seed);
  std::vector<KeyAccess> out(n);
  for (size_t i = 0; i < n; ++i) {
    const double u = rng.Uniform() * sum;
    const uint64_t rank =
        static_cast<uint64_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    uint64_t x = rank + 1;
    out[i].key = util::Rng::SplitMix64(x);
    out[i].time = start + step * static_cast<int64_t>(i);
  }
  return out;
}

size_t DistinctKeys(std::span<const KeyAccess> stream) {
  std::unordered_set<uint64_t> keys;
  for (const auto& a : stream) keys.insert(a.key);
  return keys.size();
}

}  // namespace strata::cache
