// gateway/internal/response_tiers.h — the response tiers' decision for one
// request, in one place: classify (may any tier serve it?), key, look up (L1,
// the shared tier, L3), join (single flight) and, when the generation ends,
// store (private to gateway/).
//
// Promise: only deterministic requests (temperature 0, or a seed the client
// chose) that did not opt out are keyed, looked up, coalesced or stored. The
// key holds everything that decides the answer: tenant first, the backend's
// fingerprint, what the model reads — the local engine's prompt tokens, or a
// remote request's messages or prompt and the fields the client set —, the
// effective max_tokens and stop strings, n, logprobs and every sampling
// parameter. Admit either answers the request (a hit, or the flight of an
// identical request in progress) or hands back the flight the caller runs
// the backend into; a flight's completion hook stores the answer in L1 and
// L3 (and queues it for the shared tier) only when every choice succeeded on
// the request's own terms, and leaves the single-flight table before its
// last event is readable, so a client that saw its answer end and asks again
// finds it in L1.
//
// Threading: thread-safe; shared with running flights' hooks (which may
// outlive the gateway). Lookups run on request threads (the shared tier's
// on the calling thread, bounded by its timeout); hooks on the thread that
// finishes a flight.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "backend/backend.h"
#include "cache/near_dup.h"
#include "cache/response_cache.h"
#include "cache/semantic.h"
#include "cache/shared_feed.h"
#include "cache/shared_store.h"
#include "cache/single_flight.h"
#include "gateway/cache_snapshot.h"
#include "gateway/gateway.h"
#include "gateway/internal/flight.h"
#include "gateway/internal/near_dup_request.h"
#include "obs/metrics.h"

namespace strata::gateway {

struct TierMetrics;

class ResponseTiers : public std::enable_shared_from_this<ResponseTiers> {
 public:
  static util::StatusOr<std::shared_ptr<ResponseTiers>> Create(const GatewayOptions& options,
                                                               obs::MetricsRegistry& metrics,
                                                               const util::Clock& clock,
                                                               util::Logger& log);
  ~ResponseTiers();

  // What the tiers decided for a request.
  struct Admission {
    // Served without running the backend: an L1, shared-tier or L3 hit, or
    // the flight of an identical request in progress.
    std::unique_ptr<Generation> answer;
    // Otherwise: the flight the caller runs the backend into.
    std::shared_ptr<Flight> flight;
    bool registered = false;  // `flight` is in the single-flight table
    bool refresh = false;     // L1 chose this request to regenerate an entry near expiry
  };
  // `live`: the request's options (which tiers it may use, the L3
  // threshold, the TTL its answer is shared with).
  Admission Admit(const CompletionRequest& r, const backend::Backend& backend,
                  const backend::Prepared& prepared, const GatewayLiveOptions& live);
  // Gives the caches `live`'s TTLs, jitter, threshold and admission switch;
  // InvalidArgument, changing nothing, when one is out of range or L3 would
  // be turned on without an index (it was off at creation).
  util::Status Reconfigure(const GatewayLiveOptions& live);
  // The backend did not start `a.flight`: its followers get `why`, and it
  // leaves the single-flight table.
  void Abort(const Admission& a, const util::Status& why);
  // A reader of a registered flight leaves; true when it was the last (the
  // run must then be cancelled).
  bool Leave(const Flight& flight);

  std::optional<cache::ResponseCacheStats> l1_stats() const;
  std::optional<cache::NearDupStats> l3_stats() const;
  std::optional<cache::SemanticStats> semantic_stats() const;
  // The semantic tier to and from a file (cache::SemanticIndex::Save/Load);
  // FailedPrecondition when the tier is off.
  util::Status SaveSemantic(util::FileSystem& fs, const std::string& path) const;
  util::StatusOr<size_t> LoadSemantic(util::FileSystem& fs, const std::string& path);
  std::optional<cache::SharedStoreStats> shared_stats() const;
  bool FlushShared(std::chrono::milliseconds timeout);

  // Warm-up (gateway/warm_up.cpp): the tiers' live entries as snapshot
  // records, and back (only entries of these model fingerprints).
  void AppendSnapshot(std::vector<CacheSnapshotRecord>& out) const;
  void ImportSnapshot(const std::vector<CacheSnapshotRecord>& records,
                      const std::vector<uint64_t>& models, WarmUpReport& report);
  // Invalidation (gateway/invalidation.cpp): which stored answers go.
  struct Selector {
    std::optional<std::string> tenant, model, prefix;
    std::optional<uint64_t> fingerprint;
    std::optional<cache::CacheKey> key;          // an exact request's key
    std::shared_ptr<const NearDupRequest> near;  // ... and its L3 view (for Redis)
    bool Selects(const StoredResponse& v) const;
  };
  struct Removed {
    uint64_t l1 = 0, l3 = 0, semantic = 0, shared = 0;
    std::vector<std::string> warnings;
  };
  // Removes the selected answers from L1, L3 and the semantic tier, and with
  // `shared` from Redis too (on this thread, bounded by `deadline`). Answers
  // of generations that began before this call are not stored afterwards.
  Removed Invalidate(const Selector& s, bool shared,
                     std::chrono::steady_clock::time_point deadline);
  // The key an exact invalidation removes (the L1 key of `r` as `b` prepared it),
  // and its L3 view (null when it has none).
  cache::CacheKey KeyOf(const CompletionRequest& r, const backend::Backend& b,
                        const backend::Prepared& p) const;
  std::shared_ptr<const NearDupRequest> NearViewOf(const CompletionRequest& r,
                                                   const backend::Backend& b,
                                                   const backend::Prepared& p) const;
  // Other instances' invalidations come and go through it; null without Redis.
  cache::SharedFeed* feed() { return feed_.get(); }
  // The keys of other instances' semantic entries come through it; null
  // without Redis or without the semantic tier.
  cache::SharedFeed* semantic_feed() { return semantic_feed_.get(); }
  // Copies the semantic entry stored in Redis under `key` into the local
  // index (on the feed's thread), keeping the TTL Redis has left; false
  // when it is gone, another encoder's or damaged.
  bool AdoptSemantic(std::string_view key);
  // A warm start: adopts up to the index's capacity of the entries Redis
  // holds for these model fingerprints (on the feed's thread, before it
  // reads the stream).
  void AdoptStoredSemantic(const std::vector<uint64_t>& models);
  bool has_shared() const { return shared_ != nullptr; }
  bool has_semantic() const { return semantic_ != nullptr; }

 private:
  struct Plan;  // one request's classification and key
  ResponseTiers(const GatewayOptions& options, const util::Clock& clock, util::Logger& log);
  Plan Classify(const CompletionRequest& r, const backend::Backend& b, const backend::Prepared& p,
                const GatewayLiveOptions& live) const;
  bool L3Allowed(const CompletionRequest& r, const GatewayLiveOptions& live) const;
  bool SemanticAllowed(const CompletionRequest& r, const GatewayLiveOptions& live) const;
  // The semantic tiers' answer to `plan` (filling plan.vector for the store hook).
  std::unique_ptr<Generation> FindSemantic(const CompletionRequest& r, const Plan& plan);
  std::unique_ptr<Generation> FindCached(const CompletionRequest& r, const Plan& plan,
                                         bool* refresh);
  Flight::Hook StoreHook(const CompletionRequest& r, const Plan& plan);
  // Records whether `fresh` (a verified request's answer) agrees with the
  // would-be hit's `stored` answer of cosine `similarity`.
  void Verify(double similarity, const StoredResponse& stored, const std::vector<Event>& fresh);

  const GatewayOptions options_;
  const util::Clock& clock_;
  util::Logger& log_;
  std::unique_ptr<TierMetrics> l1_observer_;        // declared first: outlives l1_, which calls it
  std::unique_ptr<cache::ResponseCache> l1_;        // null when off
  std::unique_ptr<TierMetrics> l3_observer_;        // outlives l3_, which calls it
  std::unique_ptr<cache::NearDupIndex> l3_;         // null when off
  std::unique_ptr<TierMetrics> semantic_observer_;  // outlives semantic_
  std::unique_ptr<cache::SemanticIndex> semantic_;  // null when off
  std::unique_ptr<cache::FalseHitControl> false_hits_;  // with semantic_
  std::unique_ptr<cache::HitRateTrigger> hit_trigger_;  // with semantic_
  // The last re-learning's hit rate and threshold, before and after
  // (strata_semantic_relearn_*); set by the thread that records the event.
  struct Relearned {
    double rate_before = 0, rate_after = 0, threshold_before = 0, threshold_after = 0;
  };
  std::mutex relearn_mu_;  // guards relearned_
  Relearned relearned_;
  obs::CounterValue* relearns_ = nullptr;  // strata_semantic_relearns_total
  // Retrains the semantic index's lists off the request path; one at a
  // time, joined by the destructor. It uses
  // `this` without holding a reference, so it never owns the tiers.
  std::mutex retrain_mu_;  // guards retrainer_
  std::thread retrainer_;
  // Called with each semantic lookup's outcome; re-learns when the trigger fires.
  void RecordSemanticLookup(bool served);
  std::mutex verify_mu_;  // guards verify_rng_
  util::Rng verify_rng_{0};
  obs::CounterValue* verified_[2] = {nullptr, nullptr};  // [0] agreed, [1] disagreed
  obs::CounterValue* encode_failures_ = nullptr;         // strata_semantic_encode_failures_total
  obs::HistogramValue* encode_seconds_ = nullptr;        // strata_semantic_encode_seconds
  // The shared tier (Redis); null without it. It borrows the codec (declared
  // first, so destroyed after it) and the gateway's logger. Destroying it
  // joins its writer thread, bounded by one command's timeout.
  std::unique_ptr<cache::ValueCodec> codec_;
  std::unique_ptr<cache::SharedStore> shared_;
  std::unique_ptr<cache::SharedFeed> feed_;                 // with shared_
  std::unique_ptr<cache::SharedFeed> semantic_feed_;        // with shared_ and semantic_
  obs::CounterValue* semantic_adopted_ = nullptr;           // strata_semantic_shared_adopted_total
  obs::CounterValue* remote_hits_[2] = {nullptr, nullptr};  // [0] l1, [1] l3
  obs::CounterValue* remote_misses_[2] = {nullptr, nullptr};  // [0] l1, [1] l3
  cache::SingleFlight<Flight> flights_;                       // used when coalesce is on
  // Bumped by every invalidation: a store hook whose request was admitted
  // under an older value does not store (its answer may be what was removed).
  std::atomic<uint64_t> invalidations_{0};
  obs::CounterValue* coalesced_ = nullptr;  // strata_cache_coalesced_total
};

}  // namespace strata::gateway
