// cache/admission.h — cache-aware admission: which new entries a full tier takes.
//
// Promise: an AdmissionGate decides, for a tier that would have to evict to
// store a new entry, whether to store it. A tier with room never asks
// (storing then replaces nothing), so a cold cache fills at once. When asked:
//  - a key the tier missed recently and that came back (a second request
//    within the watch horizon) is admitted: it has shown reuse;
//  - a key seen for the first time is admitted with probability
//        p = clamp(gain · r, min_probability, 1),
//    r the tier's measured hit ratio of new keys: of the first-time keys it
//    watched, the share asked for again while watched (a hit when it had been
//    admitted, a would-be hit when not), over the last `window` outcomes.
// The watch list holds watch_factor × the tier's entry count of the most
// recent first-time keys (64-bit hashes only), about as long as an admitted
// entry would have stayed.
//
// Why this design. Admitting a new entry with probability q makes it miss
// about 1/q times before it gets in: a frequency filter in front of the
// eviction policy. Under skewed, stable demand it moves LRU towards LFU
// (q-LRU; Martina, Garetto, Leonardi, INFOCOM 2014), and a doorkeeper that
// lets in what was asked for twice (TinyLFU; Einziger, Friedman, Manes, ACM
// ToS 2017) does the same sooner. But where demand runs on recency (the next
// turn of a conversation repeats the prefix of the last one) a filter turns
// each second request into a miss and costs hits. The tier's measured hit
// ratio of new keys tells the two apart: where new keys come back (hits are
// common) p rises to 1 and the tier admits everything; where they do not (the
// cache churns: what it admits is evicted unread) p falls and replacements
// drop. `strata bench cache --admission` measures it against always-admit on
// Zipf and the traces (docs/benchmarks.md).
//
// Pure core, thin shell: the gate is a small state machine fed with lookups;
// the uniform draw comes from the caller (the tier's injected Rng).
//
// Threading: AdmissionGate is thread-compatible; the owning tier serialises
// calls (under its own mutex).
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

#include "util/status.h"

namespace strata::cache {

struct AdmissionOptions {
  bool enabled = false;           // false: every entry is admitted
  double gain = 4.0;              // (0, 100] p = clamp(gain · r, min_probability, 1)
  double min_probability = 0.05;  // (0, 1] p never goes below this
  double watch_factor = 2.0;      // [0.25, 16] watched keys per entry the tier holds
  uint32_t window = 4096;         // [16, 2^20] outcomes of watched keys r is measured over
};

// InvalidArgument naming the first field out of range.
util::Status ValidateAdmission(const AdmissionOptions& options);

struct AdmissionStats {
  uint64_t offered = 0;   // entries that needed room (the gate was asked)
  uint64_t admitted = 0;  // of those, admitted
  uint64_t returned = 0;  // of those admitted, keys that had come back (always admitted)
};

class AdmissionGate {
 public:
  explicit AdmissionGate(const AdmissionOptions& options);

  // Every lookup of the tier: the key's 64-bit hash and whether it hit.
  void RecordLookup(uint64_t key, bool hit);
  // Admit `key`, which needs room? `entries` is what the tier holds now
  // (sizes the watch list); `u` a uniform draw in [0, 1). True when disabled.
  bool Admit(uint64_t key, size_t entries, double u);

  // The hit ratio of new keys; 1 before any outcome (admit until shown otherwise).
  double reuse_ratio() const;
  // The admission probability of a first-time key now.
  double probability() const;
  const AdmissionOptions& options() const { return options_; }
  const AdmissionStats& stats() const { return stats_; }

 private:
  void Outcome(bool came_back);

  const AdmissionOptions options_;
  struct Watched {
    bool came_back = false;
    uint64_t seq = 0;  // its place in watch_order_ (a key may be watched again later)
  };
  // Watched first-time keys, oldest first, as (key, seq); stale pairs (keys
  // admitted after coming back, or watched again since) are skipped.
  std::deque<std::pair<uint64_t, uint64_t>> watch_order_;
  std::unordered_map<uint64_t, Watched> watched_;
  uint64_t next_seq_ = 0;
  // Ring of the last `window` outcomes (1 = came back).
  std::vector<uint64_t> outcomes_;
  uint64_t n_outcomes_ = 0;
  uint32_t came_back_ = 0;  // ones among the ring's live bits
  AdmissionStats stats_;
};

}  // namespace strata::cache
