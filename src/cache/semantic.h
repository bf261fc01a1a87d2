// cache/semantic.h — the semantic tiers: L4, a coarse nearest-neighbour
// screen over sentence vectors, and L5, the exact re-rank of its survivors.
//
// Promise: SemanticIndex remembers unit-length sentence vectors (an
// encoder's, model/encoder.h) under a namespace and, for a query vector,
// returns the stored entry of the same namespace whose vector is most similar
// to it, if that cosine similarity is at least min_similarity (τ5) and no
// guard objects. Two stages:
//  1. L4 (screen): the namespace's nearest-neighbour index proposes its
//     top_k nearest entries; those below coarse_similarity (τ4) are pruned.
//     A namespace with fewer than ann_min_entries entries is scanned exactly
//     (at that size a scan is as fast as any index and finds every
//     neighbour); a larger one is searched through a FAISS index of the kind
//     `ann` names (IVF by default: docs/benchmarks.md, "Semantic tier").
//  2. L5 (re-rank): every survivor's cosine is computed exactly from its
//     stored vector, best first; the first one at or above τ5 whose text
//     passes the L3 guards (numbers and symbols, negations, word order,
//     names: near_dup.h's ScorePair with `guards`) is the answer. Without a
//     text for the query, no guard applies.
// Namespaces are part of every index (one per namespace), so a lookup never
// sees another namespace's entries: callers put the tenant (and everything
// that must match exactly) in it, as SemanticNamespace does.
// The index is bounded by max_entries; when over, expired entries go first,
// then an EvictionPolicy (dual-factor by default) picks the victims over all
// namespaces, and an entry leaves its namespace's index with its vector and
// stored value together (a removed entry is a tombstone the search skips
// until the index is rebuilt, when tombstones pass a quarter of it). Each
// entry lives ttl × U[1 − ttl_jitter, 1 + ttl_jitter] and never matches after.
//
// Threading: thread-safe; one mutex guards all of the state (FAISS searches
// included; they are read-only but share the structure's buffers). The
// observer is called with the mutex held: quick, and never back into the index.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/eviction_policy.h"
#include "cache/near_dup.h"
#include "cache/response_cache.h"
#include "cache/shared_store.h"
#include "util/clock.h"
#include "util/file_system.h"
#include "util/random.h"
#include "util/status.h"

namespace strata::cache {

// The nearest-neighbour index of a large namespace.
enum class AnnKind {
  kFlat,  // exact inner-product scan (the baseline; what GPTCache and RedisVL do)
  kHnsw,  // FAISS IndexHNSWFlat, inner product
  kIvf,   // FAISS IndexIVFFlat, inner product (trained when built, retrained at 4x growth)
  kLsh,   // FAISS IndexLSH: random-projection bits, Hamming distance
};
std::optional<AnnKind> ParseAnnKind(std::string_view name);  // "flat", "hnsw", "ivf", "lsh"
std::string_view AnnKindName(AnnKind kind);

struct SemanticOptions {
  int32_t dim = 0;                  // vector width; [1, 8192]
  size_t max_entries = 100'000;     // over all namespaces; [1, 2^26]
  double coarse_similarity = 0.65;  // τ4, [0, 1)
  size_t top_k = 50;                // L4 candidates re-ranked; [1, 1024]
  double min_similarity = 0.9;      // τ5, (coarse_similarity, 1]
  std::chrono::seconds ttl{0};      // 0 = no TTL
  double ttl_jitter = 0;            // [0, 0.9]
  AnnKind ann = AnnKind::kIvf;
  size_t ann_min_entries = 2048;  // smaller namespaces are scanned exactly; >= 1
  int hnsw_m = 32;                // HNSW links per node, [4, 128]
  int hnsw_ef_search = 96;        // HNSW search breadth, >= top_k is sensible, [1, 4096]
  int hnsw_ef_construction = 64;  // [1, 4096]
  int ivf_probe = 16;             // IVF lists probed; lists = sqrt(entries at training)
  int lsh_bits = 1024;            // LSH bits per vector, [64, 65536], a multiple of 8
  PolicyKind policy = PolicyKind::kDualFactor;
  PolicyOptions policy_options;
  SimilarityOptions guards;  // the measure is unused; the guard switches apply
};

struct SemanticMatch {
  uint64_t payload = 0;
  std::shared_ptr<const CachedValue> value;
  double similarity = 0;  // exact cosine, >= min_similarity
  size_t screened = 0;    // L4 candidates at or above τ4
  size_t compared = 0;    // L5 candidates whose cosine was computed
};

// Why the best candidate was not the answer (for verification and the eval).
struct SemanticLookup {
  std::optional<SemanticMatch> match;
  double best_similarity = 0;         // the best cosine among the candidates (0 if none)
  Guard rejected_by = Guard::kNone;   // the best candidate over τ5 failed this guard
  size_t screened = 0, compared = 0;  // as in SemanticMatch
};

struct SemanticStats {
  uint64_t lookups = 0, hits = 0, inserts = 0, evictions = 0, expired = 0, erased = 0;
  uint64_t screened = 0;  // L4 survivors over all lookups
  uint64_t rebuilds = 0;  // namespace indexes rebuilt to drop tombstones
  size_t entries = 0, namespaces = 0;
};

// The namespace of a tenant and a scope (everything else that must match
// exactly); length-prefixed like NearDupNamespace.
std::string SemanticNamespace(std::string_view tenant, std::string_view scope);
// The tenant a namespace was made for.
std::string_view SemanticNamespaceTenant(std::string_view ns);

class SemanticIndex {
 public:
  // InvalidArgument names the first option outside its range. `clock` and
  // `observer` (may be null) are borrowed and must outlive the index.
  static util::StatusOr<std::unique_ptr<SemanticIndex>> Create(const SemanticOptions& options,
                                                               const util::Clock& clock,
                                                               util::Rng rng = util::Rng(0),
                                                               TierObserver* observer = nullptr);
  ~SemanticIndex();
  SemanticIndex(const SemanticIndex&) = delete;
  SemanticIndex& operator=(const SemanticIndex&) = delete;

  // The best live entry of `ns` (see the promise); `text` (may be null) is
  // the query's prepared text for the guards. InvalidArgument for a vector
  // of the wrong width.
  util::StatusOr<SemanticLookup> Lookup(std::string_view ns, std::span<const float> vector,
                                        const NearDupText* text,
                                        std::optional<double> min_similarity = std::nullopt);
  // Remembers `vector` (normalised here) under `ns` with `payload`; an entry
  // of `ns` with the same payload is replaced. It lives the tier's jittered
  // TTL, or `ttl` when given (a copy that keeps what its source had left).
  // Returns the payloads of the entries that left (evicted or replaced),
  // with their namespaces.
  util::StatusOr<std::vector<std::pair<std::string, uint64_t>>> Insert(
      std::string_view ns, std::span<const float> vector, const NearDupText* text, uint64_t payload,
      std::shared_ptr<const CachedValue> value = nullptr,
      std::optional<std::chrono::milliseconds> ttl = std::nullopt);
  // Rebuilds every namespace's nearest-neighbour index from its vectors
  // (IVF: its lists retrained on them), e.g. when the tier's hit rate fell
  // (hit_rate_trigger.h); how many were rebuilt. Each is trained on a copy
  // outside the lock, so lookups and inserts go on meanwhile (a namespace
  // compacted in between keeps the index that compaction built).
  size_t Retrain();
  // Forgets every entry for which `match(ns, payload, value)` is true (value
  // may be null); how many. `match` runs with the index's mutex held: it
  // must not call back into the index.
  size_t EraseIf(const std::function<bool(std::string_view ns, uint64_t payload,
                                          const CachedValue* value)>& match);

  // Writes every live entry that holds a value (its namespace, payload,
  // vector, prepared text, remaining TTL and the value as `codec` encodes
  // it) to `path`, through a temporary file renamed into place, so a crash
  // leaves the old file or the new one. Format: docs/formats/semantic.md.
  // `encoder` identifies what made the vectors (its fingerprint).
  util::Status Save(util::FileSystem& fs, const std::string& path, const ValueCodec& codec,
                    uint64_t encoder) const;
  // Adds the entries of a file Save wrote (expired ones are skipped; the
  // rest keep their remaining TTL, and the eviction bound holds); how many.
  // DataLoss naming what is wrong for a damaged file, InvalidArgument for a
  // file of another encoder (fingerprint) or vector width; nothing is added then.
  util::StatusOr<size_t> Load(util::FileSystem& fs, const std::string& path,
                              const ValueCodec& codec, uint64_t encoder);
  // The same as bytes (Save's content; a cache snapshot embeds it), and
  // back (`name` names the source in errors).
  std::string Encode(const ValueCodec& codec, uint64_t encoder) const;
  util::StatusOr<size_t> Decode(std::string_view data, const ValueCodec& codec, uint64_t encoder,
                                std::string_view name);

  // From now on a Lookup without an override needs `min_similarity`, and
  // new entries live `ttl`; InvalidArgument, changing nothing, when out of range.
  util::Status Reconfigure(double min_similarity, std::chrono::seconds ttl, double ttl_jitter);

  SemanticStats stats() const;
  const SemanticOptions& options() const;

 private:
  struct State;
  SemanticIndex(const SemanticOptions& options, const util::Clock& clock, util::Rng rng,
                TierObserver* observer);
  std::unique_ptr<State> state_;
};

}  // namespace strata::cache
