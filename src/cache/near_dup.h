// cache/near_dup.h — the L3 tier: near-duplicate request lookup.
//
// Promise: NearDupIndex remembers request texts (normalized, text_normalize.h)
// under a namespace and, for a new text, returns the stored entry of the same
// namespace that is most similar to it, if that similarity is at least
// min_similarity and no guard objects. Two stages:
//  1. candidates: the weighted 64-bit SimHash (simhash.h) is split into
//     `bands` blocks; each block indexes a bucket keyed by (namespace, block
//     number, block bits). A lookup probes every bucket whose bits are within
//     `probe_radius` of the query's block. Guarantee (pigeonhole): every
//     stored fingerprint within Hamming distance
//         max_distance = bands · (probe_radius + 1) − 1
//     of the query's has some block within probe_radius, so it is found;
//     candidates farther away are discarded, so results never depend on
//     bucket luck. Default 4 × (2 + 1) − 1 = 11 bits.
//  2. confirmation: each candidate (closest first, at most max_candidates)
//     is scored by a second measure on the token sequences (ScorePair): the
//     weighted longest common subsequence, 2·W(LCS)/(W(a) + W(b)), which
//     unlike a bag of words sees swapped entities ("from London to Paris" vs
//     "from Paris to London"). Guards reject outright pairs whose numbers and
//     symbols differ ("2+3" vs "2+4"), whose count of negations differs ("is
//     X safe" vs "is X not safe"), whose shared content words come in another
//     order, or where a capitalised name of one is missing from the other.
// Namespaces (NearDupNamespace: tenant + model) are part of every bucket key
// and checked on every candidate, so a lookup never sees another namespace's
// entries. The index is bounded by max_entries and max_bytes (an entry's
// value counts too); when over, expired entries go first, then an
// EvictionPolicy (dual-factor by default) picks the victims, and with
// admission enabled (admission.h) a new entry that needs room must first pass
// the gate (an entry's key for the gate is its token sequence). Each entry
// lives ttl × U[1 − ttl_jitter, 1 + ttl_jitter] (drawn from the injected Rng)
// and never matches after that.
//
// The caller decides whether an approximate answer is allowed (request or
// tenant policy) and marks such answers (`x-strata-cache: l3` and the
// similarity). The payload is opaque (an id of the caller's); an entry may
// also carry the answer itself (a CachedValue), returned with the match.
// EncodeNearDupText/DecodeNearDupText give a prepared text a versioned byte
// form, so a shared tier (shared_store.h) can confirm candidates from another
// process with the same measure.
//
// Threading: NearDupIndex is thread-safe. One mutex guards all of its state;
// the scoring of candidates runs outside it on immutable snapshots. The
// observer is called with the mutex held: it must be quick and must not call
// back into the index.
//
// Usage:
//   NearDupOptions options;
//   options.max_entries = 50'000;
//   auto index = NearDupIndex::Create(options, clock).value();
//   const std::string ns = NearDupNamespace(tenant, model_id);
//   auto text = PrepareNearDupText(prompt);           // once per request
//   if (text.ok()) {
//     if (auto hit = index->Lookup(ns, *text)) return Serve(hit->payload, hit->similarity);
//     ... generate ...; index->Insert(ns, *text, response_key);
//   }
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/admission.h"
#include "cache/eviction_policy.h"
#include "cache/response_cache.h"
#include "cache/text_normalize.h"
#include "util/clock.h"
#include "util/random.h"
#include "util/status.h"

namespace strata::cache {

// The similarity at which `strata eval l3` measured precision >= 0.97 on the
// PAWS dev split (docs/benchmarks.md, "L3 near-duplicate precision/recall").
inline constexpr double kDefaultNearDupSimilarity = 0.93;

// A request text prepared for comparison: built by PrepareNearDupText, then
// immutable. Tokens are compared by their 64-bit hashes.
struct NearDupText {
  enum Flag : uint8_t {
    kContent = 1,   // a word that is not a stop word, negation or question word, no digits
    kSlot = 2,      // a number, a symbol, or a word with digits
    kNegation = 4,  // not, no, never, without, ...
    kEntity = 8,    // capitalised where a sentence does not start (a name)
  };
  std::vector<uint64_t> tokens;  // FeatureHash of each token, in text order
  std::vector<float> weights;    // TokenWeight of each token
  std::vector<uint8_t> flags;    // Flag bits of each token
  uint64_t fingerprint = 0;      // SimHash of the weighted tokens
  uint64_t sequence_hash = 0;    // hash of the whole token sequence
  double total_weight = 0;       // sum of weights
  size_t MemoryBytes() const;    // heap + object size
};

struct PrepareOptions {
  NormalizeOptions normalize;
  size_t max_words = 2048;    // longer texts are not handled by L3 (OutOfRange); [1, 65536]
  bool flat_weights = false;  // weight every token 1 (for comparisons in `strata eval l3`)
};

// Errors: InvalidArgument for invalid UTF-8 or a text without any token;
// OutOfRange for more than max_words tokens.
util::StatusOr<NearDupText> PrepareNearDupText(std::string_view text,
                                               const PrepareOptions& options = {});

// A prepared text as bytes (version 1, little-endian), and back. Decode
// checks every length and returns DataLoss naming what is wrong; it never
// reads out of bounds.
std::string EncodeNearDupText(const NearDupText& text);
util::StatusOr<NearDupText> DecodeNearDupText(std::string_view bytes);

struct SimilarityOptions {
  enum class Measure {
    kWeightedLcs,     // 2·W(LCS)/(W(a) + W(b)) over the token sequences
    kShingleJaccard,  // weighted Jaccard over word 1-, 2- and 3-grams
  };
  Measure measure = Measure::kWeightedLcs;
  bool slot_guard = true;      // numbers, symbols, words with digits: equal multisets
  bool negation_guard = true;  // equal count of negations
  bool order_guard = true;     // content words that occur once in both: same order
  bool entity_guard = true;    // every capitalised name of one occurs in the other
};

enum class Guard { kNone, kSlots, kNegation, kOrder, kEntity };
std::string_view GuardName(Guard guard);  // "none", "slots", "negation", "order", "entity"

struct PairScore {
  double similarity = 0;  // in [0, 1]; 0 when a guard rejected the pair
  Guard rejected_by = Guard::kNone;
};

// The confirmation measure. Symmetric. When the similarity is below
// `at_least`, the result may be any value below `at_least` (the exact value
// is not computed); pass 0 for the exact value.
PairScore ScorePair(const NearDupText& a, const NearDupText& b,
                    const SimilarityOptions& options = {}, double at_least = 0);

// The namespace string of a tenant and a model identity (length-prefixed, so
// no two (tenant, model) pairs share one).
std::string NearDupNamespace(std::string_view tenant, std::string_view model);

struct NearDupOptions {
  size_t max_entries = 100'000;          // entries over all namespaces; [1, 2^26]
  size_t max_bytes = size_t{256} << 20;  // approximate memory of entries and buckets; >= 4096
  double min_similarity = kDefaultNearDupSimilarity;  // (0, 1]
  int bands = 4;                                      // fingerprint blocks, [2, 16]
  int probe_radius = 2;                               // bits flipped per block when probing, [0, 3]
  size_t max_candidates = 16;   // candidates confirmed per lookup, closest first; >= 1
  std::chrono::seconds ttl{0};  // entries older than this never match; 0 = no TTL; >= 0
  double ttl_jitter = 0;        // [0, 0.9]; each entry lives ttl × U[1 − j, 1 + j]
  PolicyKind policy = PolicyKind::kDualFactor;
  PolicyOptions policy_options;
  PrepareOptions prepare;  // for the overloads that take raw text
  SimilarityOptions similarity;
  AdmissionOptions admission;  // off by default: every entry is stored
};

struct NearDupMatch {
  uint64_t payload = 0;
  std::shared_ptr<const CachedValue> value;  // what Insert stored with it (may be null)
  double similarity = 0;                     // ScorePair similarity, >= min_similarity
  int distance = 0;                          // Hamming distance of the fingerprints
};

// An entry that left the index during an Insert (evicted, or replaced by an
// entry with the same payload or the same token sequence in its namespace).
struct NearDupDropped {
  std::string ns;
  uint64_t payload = 0;
};

struct NearDupStats {
  uint64_t lookups = 0, hits = 0, inserts = 0, evictions = 0, expired = 0;
  uint64_t not_admitted = 0;  // inserts the admission gate turned away
  uint64_t candidates = 0;    // candidates scored by ScorePair, over all lookups
  size_t entries = 0, bytes = 0, namespaces = 0;
};

class NearDupIndex {
 public:
  // InvalidArgument names the first option outside its range. `clock` and
  // `observer` (may be null; told of hits, misses, stores and removals) are
  // borrowed and must outlive the index; `rng` draws TTL jitter and admission.
  static util::StatusOr<std::unique_ptr<NearDupIndex>> Create(const NearDupOptions& options,
                                                              const util::Clock& clock,
                                                              util::Rng rng = util::Rng(0),
                                                              TierObserver* observer = nullptr);
  ~NearDupIndex();
  NearDupIndex(const NearDupIndex&) = delete;
  NearDupIndex& operator=(const NearDupIndex&) = delete;

  // The most similar live entry of `ns` with similarity >= min_similarity
  // (or the given override), or nullopt.
  std::optional<NearDupMatch> Lookup(std::string_view ns, const NearDupText& text,
                                     std::optional<double> min_similarity = std::nullopt);
  util::StatusOr<std::optional<NearDupMatch>> Lookup(std::string_view ns, std::string_view text);

  // Remembers `text` under `ns` with `payload` (and `value`, whose ByteSize
  // counts against max_bytes); returns what left the index. An entry with
  // the same payload, or the same token sequence, in `ns` is replaced.
  // ResourceExhausted if the entry alone is over max_bytes. Nothing changes
  // (an empty list) when the admission gate turns a new entry away.
  // `ttl`, when given, replaces the jittered TTL (a copy that keeps what its
  // source had left).
  util::StatusOr<std::vector<NearDupDropped>> Insert(
      std::string_view ns, const NearDupText& text, uint64_t payload,
      std::shared_ptr<const CachedValue> value = nullptr,
      std::optional<std::chrono::nanoseconds> ttl = std::nullopt);
  util::StatusOr<std::vector<NearDupDropped>> Insert(std::string_view ns, std::string_view text,
                                                     uint64_t payload);

  // Calls `fn` with every live entry (its namespace, text, payload, value
  // — may be null — and the time it has left; nullopt without a TTL), for
  // a snapshot; under the index's mutex: `fn` must not call back into it.
  void ForEach(
      const std::function<void(std::string_view ns, const NearDupText& text, uint64_t payload,
                               const CachedValue* value,
                               std::optional<std::chrono::nanoseconds> ttl_left)>& fn) const;
  // Forgets the entry of `ns` with `payload`; false if there is none.
  bool Erase(std::string_view ns, uint64_t payload);
  // Forgets every entry for which `match(ns, payload, value)` is true (value
  // may be null); how many. `match` runs with the index's mutex held: it
  // must not call back into the index.
  size_t EraseIf(const std::function<bool(std::string_view ns, uint64_t payload,
                                          const CachedValue* value)>& match);

  // From now on a Lookup without an override needs `min_similarity`, new
  // entries live `ttl` x U[1 - ttl_jitter, 1 + ttl_jitter] (0 = no TTL) and
  // pass the admission gate when `admission`; entries stored before keep
  // their expiry. InvalidArgument, changing nothing, when a value is outside
  // its range.
  util::Status Reconfigure(double min_similarity, std::chrono::seconds ttl, double ttl_jitter,
                           bool admission);

  NearDupStats stats() const;
  // As created (Reconfigure does not change what this returns).
  const NearDupOptions& options() const;
  int max_distance() const;  // bands · (probe_radius + 1) − 1

 private:
  struct State;
  NearDupIndex(const NearDupOptions& options, const util::Clock& clock, util::Rng rng,
               TierObserver* observer);
  std::unique_ptr<State> state_;
};

}  // namespace strata::cache
