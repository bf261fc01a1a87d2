// gateway — the request pipeline between the HTTP front end and the
// backends (backend/backend.h: the embedded engine, or a model server over
// HTTP).
//
// Promise: Start turns an API-neutral completion request into a running
// generation: it validates every parameter (InvalidArgument naming the
// field), picks the backend the request names (its "model"; NotFound with
// kModelNotFound for any other), has it prepare the request (the local
// engine renders the chat template, tokenizes and checks the context; a
// remote backend checks what its API can carry), lets the response tiers
// answer it or join it to an identical one in flight, and else starts the
// backend into a flight. The returned Generation yields events in order:
// text deltas (stop strings never appear; text is always complete UTF-8),
// then one finish per choice. Destroying a Generation or calling Cancel
// stops its run (within one engine step, or by closing the upstream
// request). Latency and token counts are recorded as metrics, per backend
// for a remote one. A traced choice (every choice, or the RT-Switcher's
// sample of them) logs one timing line when it ends: queue wait, prefill,
// decode, TTFT. Nothing of HTTP is known here.
//
// Response tiers (internal/response_tiers.h, DESIGN.md §1, §2): a
// deterministic request (temperature 0, or a seed the client fixed) that did
// not opt out is keyed by tenant, backend, what the model reads (the local
// engine's prompt tokens; a remote request's messages and the fields the
// client set), max_tokens, n, stop strings, logprobs and every sampling
// parameter. An L1 hit replays the stored events (text, logprobs, finish
// reasons, stop sequences and the usage of the run that produced them), so
// the HTTP layer renders it in whatever shape the request asked for. A miss
// while an identical request is being generated follows that generation
// (single flight) and reads every event from the first. A generation is
// stored only when every choice finished without error and was not
// cancelled; it keeps running for its followers when the client that started
// it goes away, and stops when nobody reads it. Generation::cache_outcome
// says how a response was served.
//
// Near-duplicate tier (L3): a deterministic request whose tenant policy or
// own "l3" field allows it (L3Mode) may be answered with the stored answer
// of an earlier request of the same tenant whose wording differs but whose
// everything else matches exactly (internal/near_dup_request.h). Its text is
// compared by cache::NearDupIndex (weighted SimHash candidates, confirmed by
// the weighted-LCS similarity and its guards). Such an answer is marked
// (CacheOutcome::kL3 and Generation::cache_similarity).
//
// Semantic tiers (L4/L5): a deterministic request whose tenant policy or own
// "semantic" field allows it (the same modes as L3) may be answered with the
// stored answer of an earlier request whose text means the same: its text
// (the last message, or the prompt) is embedded by the semantic encoder (a
// backend's /v1/embeddings: a sentence encoder, a remote embeddings API or
// the chat model's pooled hidden states), cache::SemanticIndex screens the
// namespace's nearest vectors (L4) and re-ranks them by exact cosine with the
// L3 guards (L5). The namespace is L3's: everything else, earlier messages
// included, matches exactly. A sampled share of would-be hits is generated
// anyway and checked against the stored answer; the threshold served at is
// learned from those checks (GatewayOptions::semantic_verify). Such an answer is marked
// (CacheOutcome:: kSemantic and Generation::cache_similarity). An encoder that fails or is late
// never fails a request: the tier is skipped for it.
//
// Shared tier (GatewayOptions::shared, Redis): an L1 or L3 miss is looked up
// in Redis next (on the calling thread, bounded by the shared tier's
// timeout); a hit there is copied into the local tier and served as l1 or
// l3. Every answer stored locally is also queued for Redis. Redis being slow
// or down never fails a request: the local tiers keep serving.
//
// Threading: Gateway is thread-safe (any HTTP thread may Start); a
// Generation is used by one thread, its events produced on the backend's
// threads and handed over through a locked queue.
//
// Usage:
//   CompletionRequest r;
//   r.messages = {{"user", "Hello"}};
//   STRATA_ASSIGN_OR_RETURN(auto gen, gateway.Start(r));
//   while (true) {
//     STRATA_ASSIGN_OR_RETURN(Event e, gen->Next(deadline));
//     ...  // stream e.text; stop after the last kFinish
//   }
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/local.h"
#include "cache/false_hit_control.h"
#include "cache/hit_rate_trigger.h"
#include "cache/near_dup.h"
#include "cache/response_cache.h"
#include "cache/semantic.h"
#include "cache/shared_store.h"
#include "engine/scheduler.h"
#include "model/transformer.h"
#include "obs/metrics.h"
#include "sampling/sampler.h"
#include "text/chat_template.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::gateway {

class RtControl;

// Who may be answered by an approximate tier: near-duplicate (L3) or
// semantic (L4/L5), each with its own mode.
enum class L3Mode {
  kOff,    // no L3 at all
  kOptIn,  // a request that asks ("cache": {"l3": true}) or whose tenant is in l3_tenants
  kOn,     // every request, unless it refuses ("cache": {"l3": false})
};
std::string_view L3ModeName(L3Mode mode);  // "off", "opt-in", "on"
std::optional<L3Mode> ParseL3Mode(std::string_view name);

// The pipeline's options. model_name, max_tokens_cap, max_embedding_inputs,
// prompt_special_tokens, prefix_cache, chat_format and unseeded_seed_base are
// those of the local backend Create(model, scheduler, ...) builds; with
// backends given, each has its own.
struct GatewayOptions {
  std::string model_name;              // the id clients use ("model" field)
  int32_t max_tokens_cap = 4096;       // [1, n_ctx] hard cap on tokens generated per choice
  int32_t max_choices = 8;             // [1, 128] largest n
  int32_t max_stop_strings = 16;       // [0, 64]
  int32_t max_stop_length = 256;       // bytes per stop string
  int32_t max_top_logprobs = 20;       // [0, 20]
  int32_t max_embedding_inputs = 256;  // [1, 65536] inputs per embeddings request
  // A /v1/completions prompt's control-token text ("<s>", "<|im_start|>")
  // becomes those tokens; off, it is plain text like any other
  // (--prompt-special-tokens).
  bool prompt_special_tokens = false;
  bool prefix_cache = true;                     // the shared-prefix KV cache (L2) for every request
  std::optional<text::ChatFormat> chat_format;  // override the template detected in the GGUF
  // L1 exact response cache; max_bytes 0 (the default here) = off. `strata
  // serve` turns it on (--l1-bytes).
  cache::ResponseCacheOptions l1{.max_bytes = 0};
  uint64_t l1_seed = 0;  // seeds the L1's TTL jitter and early-refresh draws
  // Requests without a seed: nullopt = seed 0 (reproducible, for tests);
  // a value = each such choice draws its own seed from a stream started at
  // this value, so unseeded sampling differs from request to request.
  std::optional<uint64_t> unseeded_seed_base;
  // Single flight: identical concurrent deterministic requests share one
  // generation (independent of l1; `strata serve` turns it on).
  bool coalesce = false;
  // L3 near-duplicate tier; off by default here (`strata serve`: opt-in).
  L3Mode l3_mode = L3Mode::kOff;
  std::vector<std::string> l3_tenants;  // tenants L3 answers by default in kOptIn
  // Budget (max_bytes, max_entries), TTL and jitter, similarity, admission.
  cache::NearDupOptions l3;
  uint64_t l3_seed = 0;  // seeds the L3's TTL jitter and admission draws
  // Semantic tiers (L4/L5); off by default. semantic.dim must be the
  // encoder's vector width. The encoder is borrowed and must outlive the
  // gateway; it may be one of the served backends.
  L3Mode semantic_mode = L3Mode::kOff;
  std::vector<std::string> semantic_tenants;  // tenants answered by default in kOptIn
  cache::SemanticOptions semantic;
  backend::Backend* semantic_encoder = nullptr;
  // How long a request waits for its text's vector before it goes on without
  // the semantic tier.
  std::chrono::milliseconds semantic_encode_timeout{500};
  // Verification (cache/false_hit_control.h): a sampled share of would-be
  // semantic hits is generated anyway and its answer compared with the
  // stored one (equal text, or L3's similarity of the two answers at least
  // semantic_judge_similarity); the threshold served at is learned so the
  // verified false-hit rate stays under max_false_hit. Its floor is
  // semantic.min_similarity.
  cache::FalseHitOptions semantic_verify;
  double semantic_judge_similarity = 0.8;
  // The hit-rate trigger (cache/hit_rate_trigger.h): when the share of the
  // semantic tier's lookups it answers falls below `floor` over a window,
  // the tier re-learns its threshold from recent checks and retrains its
  // nearest-neighbour lists. floor 0 (the default) = off.
  cache::HitRateTriggerOptions semantic_hit_trigger;
  uint64_t semantic_seed = 0;  // seeds the TTL jitter
  // The shared tier (Redis) for L1 and L3, whichever are on; nullopt = local
  // tiers only. Its L3 layout and threshold are taken from `l3`.
  std::optional<cache::SharedStoreOptions> shared;
  // The RT-Switcher (gateway/rt_control.h); borrowed, must outlive the
  // gateway. nullptr = off: every choice runs as asked and is traced. When
  // set, each choice takes the policy in force when the scheduler admits it
  // (sampling tier, max_tokens cap, traced or not) and reports its latency.
  RtControl* rt_control = nullptr;
  // The model id requests for any other model go to while the RT-Switcher's
  // level says so (Policy::use_fallback); "" = none. Must be a served model.
  std::string rt_fallback_model;
};

// What a running gateway can change (Gateway::Reconfigure), each field as
// in GatewayOptions. A request takes the values in force when it starts and
// keeps them to its end (its caps, which tiers it may use, the TTL its
// answer is shared with); entries stored before a change keep their expiry.
struct GatewayLiveOptions {
  int32_t max_tokens_cap = 4096;  // [1, 2^24]
  bool coalesce = false;
  std::chrono::milliseconds l1_ttl{std::chrono::minutes(10)};  // (0, 30 days]
  double l1_ttl_jitter = 0.1;                                  // [0, 0.9]
  L3Mode l3_mode = L3Mode::kOff;  // may leave kOff only if L3 was on at creation
  std::vector<std::string> l3_tenants;
  std::chrono::seconds l3_ttl{0};       // 0 = as l1_ttl; [0, 30 days]
  double l3_min_similarity = 0.93;      // (0, 1]
  L3Mode semantic_mode = L3Mode::kOff;  // may leave kOff only if it was on at creation
  std::vector<std::string> semantic_tenants;
  double semantic_min_similarity = 0.9;  // τ5, (coarse threshold, 1]
  bool admission = false;                // both tiers
  std::string rt_fallback_model;         // "" or a served model; needs the RT-Switcher
};
// The live part of `options`.
GatewayLiveOptions LiveOptionsOf(const GatewayOptions& options);

// The normalised request and its events are the backends' (backend/backend.h).
using CompletionRequest = backend::Request;
using FinishReason = backend::FinishReason;
using Usage = backend::Usage;
using ResponseFormat = backend::ResponseFormat;
using JsonSchemaFormat = backend::JsonSchemaFormat;
using TokenLogprob = backend::TokenLogprob;
using Event = backend::Event;
using ToolCallDelta = backend::ToolCallDelta;
using ToolCall = backend::ToolCall;
using ToolDefinition = backend::ToolDefinition;
using ToolChoice = backend::ToolChoice;
using ChatMessage = backend::ChatMessage;
using EmbeddingRequest = backend::EmbeddingRequest;
using EmbeddingResult = backend::EmbeddingResult;

// How a response was served (the HTTP header x-strata-cache).
enum class CacheOutcome {
  kMiss,       // generated for this request (also: not cacheable, or opted out)
  kL1,         // replayed from the exact response cache
  kL3,         // a near-duplicate's response
  kSemantic,   // the response of a request of similar meaning (L4/L5)
  kCoalesced,  // shared the generation of an identical request in flight
};
// "miss", "l1", "l3", "semantic", "coalesced".
std::string_view CacheOutcomeName(CacheOutcome outcome);

// What answered a generation Gateway::Start made: the backend (after any
// RT-Switcher fallback; borrowed, it outlives the gateway's requests) and
// what it prepared (the local engine's prompt tokens, the effective
// max_tokens and stop strings). For request snapshots.
struct Provenance {
  const backend::Backend* backend = nullptr;
  std::shared_ptr<const backend::Prepared> prepared;
};

class Generation {
 public:
  virtual ~Generation() = default;
  // Set by whoever makes the generation: Gateway::Start one entry, a
  // generation read as one over several (a prompt array) each part's in
  // order; empty for any other. Not thread-safe: set before the generation
  // is handed on.
  const std::vector<Provenance>& provenance() const { return provenance_; }
  void set_provenance(std::vector<Provenance> p) { provenance_ = std::move(p); }

  // The next event, waiting until `deadline` (DeadlineExceeded after it);
  // OutOfRange once every choice has finished and all events were read.
  // A deadline already past makes it a poll that never waits.
  virtual util::StatusOr<Event> Next(std::chrono::steady_clock::time_point deadline) = 0;
  // Runs `ready` once, as soon as Next would return without waiting (an event
  // is readable, or every choice has finished): at once on the caller's
  // thread if that is so now, else on the thread that makes it so (the
  // scheduler thread, or one failing the request). `ready` must be cheap and
  // must not call into this generation (post the reading elsewhere). One
  // call at a time: a later call replaces a pending one.
  virtual void NotifyWhenReady(std::function<void()> ready) = 0;
  // Ends every choice still running (the client went away).
  virtual void Cancel() = 0;
  virtual int32_t prompt_tokens() const = 0;
  virtual int32_t n_choices() const = 0;
  // Known when Start returns; constant.
  virtual CacheOutcome cache_outcome() const { return CacheOutcome::kMiss; }
  // kL3 and kSemantic answers: the similarity of this request's text to the
  // stored one's (weighted LCS for L3, the vectors' cosine for semantic).
  virtual std::optional<double> cache_similarity() const { return std::nullopt; }
  // The backend may fail before the first event (backend::Backend::
  // defers_stream_head): a stream's head should wait for that event.
  virtual bool defers_stream_head() const { return false; }

 private:
  std::vector<Provenance> provenance_;
};

// The text an invalidation's prompt prefix is compared with: a completion's
// prompt, or a conversation's message contents in order, each after a
// "\n" but the first (so a prefix of the system prompt, or of the first
// message, selects every conversation that starts with it). Empty for a
// prompt given as token ids.
std::string PromptText(const CompletionRequest& r);

// What Gateway::Invalidate removes (DELETE /v1/cache): the cached answers
// (L1, L3, the semantic tier and the shared tier in Redis) and the prefix
// blocks (L2) for which every field set holds. At least one must be set.
struct Invalidation {
  std::optional<std::string> tenant;
  std::optional<std::string> model;          // a served model id: its answers, every version
  std::optional<uint64_t> model_version;     // a Backend::fingerprint: that version's only
  std::optional<std::string> prompt_prefix;  // PromptText starts with it; not empty
  // Exactly this request (keyed as the response tiers key it, so its tenant
  // and model are its own): its answer in every tier, and in L2 the blocks
  // holding its prompt's end and what follows.
  std::optional<CompletionRequest> request;
  std::string reason;  // logged with what was removed
};

struct InvalidationReport {
  // Entries removed per tier (L2: prefix blocks); shared: Redis entries.
  uint64_t l1 = 0, l3 = 0, semantic = 0, l2_blocks = 0, shared = 0;
  // What could not be done fully (Redis down, an engine too busy): the
  // local tiers were still invalidated.
  std::vector<std::string> warnings;
};

// What Gateway::ImportCache loaded.
struct WarmUpReport {
  uint64_t l1 = 0, l3 = 0, semantic = 0;  // entries
  uint64_t l2_prefixes = 0, l2_blocks = 0;
  uint64_t skipped = 0;  // entries of a model version not served here, or expired
  std::vector<std::string> warnings;
};

struct GatewayMetrics;
class ResponseTiers;
class RtGovernor;

class Gateway {
 public:
  // The gateway over the embedded engine alone: a local backend named
  // options.model_name, owned by the gateway.
  static util::StatusOr<std::unique_ptr<Gateway>> Create(
      const model::Model& model, engine::Scheduler& scheduler, obs::MetricsRegistry& metrics,
      const GatewayOptions& options, const util::Clock& clock, util::Logger& log);
  // The gateway over `backends` (borrowed, at least one, distinct names; the
  // first is the default for requests that name no model).
  static util::StatusOr<std::unique_ptr<Gateway>> Create(std::vector<backend::Backend*> backends,
                                                         obs::MetricsRegistry& metrics,
                                                         const GatewayOptions& options,
                                                         const util::Clock& clock,
                                                         util::Logger& log);
  ~Gateway();

  util::StatusOr<std::unique_ptr<Generation>> Start(const CompletionRequest& request);

  // Swaps the live options atomically: requests that start from now on take
  // them; running ones finish on theirs. InvalidArgument (naming the option),
  // changing nothing, when one is out of range, names a model not served, or
  // turns on a tier that was off at creation (that needs a new gateway).
  //
  // With `ramp` > 0, a hot migration: the share of new requests that take
  // `live` rises linearly from 0 to 1 over `ramp`; the others take the
  // options in force before (a hash of the request's session, else of its
  // id, against the share: a session moves once and stays moved). A
  // reconfiguration during a ramp ramps from the options fully in force
  // before it to the newest. What the caches hold themselves (L1 and L3
  // expiry, admission, thresholds of stores) changes at once; what each
  // request decides (its caps, which tiers it may use and at what
  // similarity, coalescing, the fallback model) follows the ramp.
  util::Status Reconfigure(const GatewayLiveOptions& live,
                           std::chrono::milliseconds ramp = std::chrono::milliseconds(0));
  // The live options in force (the newest, during a ramp).
  GatewayLiveOptions live_options() const;
  // The share of new requests on the newest options: 1 when no ramp runs.
  double policy_ramp_progress() const;
  // Unit-length embeddings of each input, from the backend the request
  // names. Waits until `deadline` (DeadlineExceeded after it, cancelling
  // what is left).
  util::StatusOr<EmbeddingResult> Embed(const EmbeddingRequest& request,
                                        std::chrono::steady_clock::time_point deadline);

  // The default backend's model id.
  const std::string& model_name() const;
  // Every model id served, the default first.
  std::vector<std::string> model_names() const;
  // The backend serving `model` ("" = the default); nullptr when none does.
  backend::Backend* Find(std::string_view model) const;
  // The default backend's context length (0 when a remote one does not say).
  int32_t n_ctx() const;
  // Tokens of a prompt as the default backend (a local one) reads it.
  util::StatusOr<std::vector<int32_t>> Tokenize(const CompletionRequest& request) const;
  // Removes what `what` selects from every tier (see Invalidation), counts
  // it (strata_cache_invalidated_total) and logs it with its reason. With
  // the shared tier, Redis's matching entries are deleted too and the other
  // instances are told, so they drop theirs within a poll of the stream.
  // InvalidArgument when nothing is selected or a field is malformed;
  // NotFound for a model not served; an exact request that its backend
  // refuses gets that error. Blocks while Redis is scanned: call it off the
  // I/O threads.
  util::StatusOr<InvalidationReport> Invalidate(const Invalidation& what);
  // Cache warm-up (gateway/cache_snapshot.h; `strata cache export`,
  // `strata serve --warm-from`). ExportCache: the live entries of L1, L3 and
  // the semantic tier with the time each has left, and each local model's
  // shared cached prompt prefixes (at most 4,096 per model). ImportCache,
  // before the server takes traffic: the entries of the models served here
  // (the same fingerprint; others are skipped) go into the tiers with the
  // time they had left, and the prefixes are computed into the local
  // engines' prefix caches. DataLoss, with nothing applied, when the bytes
  // are not a snapshot.
  util::StatusOr<std::string> ExportCache();
  util::StatusOr<WarmUpReport> ImportCache(std::string_view snapshot);
  // The L1's counters; nullopt when L1 is off.
  std::optional<cache::ResponseCacheStats> l1_stats() const;
  // The L3's counters; nullopt when L3 is off.
  std::optional<cache::NearDupStats> l3_stats() const;
  // The semantic tiers' counters; nullopt when they are off.
  std::optional<cache::SemanticStats> semantic_stats() const;
  // The semantic tier's entries and answers to a file at shutdown, and back
  // at start (cache::SemanticIndex::Save/Load); FailedPrecondition when off.
  util::Status SaveSemantic(util::FileSystem& fs, const std::string& path) const;
  util::StatusOr<size_t> LoadSemantic(util::FileSystem& fs, const std::string& path);
  // The RT-Switcher steering this gateway; nullptr when it is off.
  const RtControl* rt_control() const { return options_.rt_control; }
  // The shared tier's counters; nullopt without Redis.
  std::optional<cache::SharedStoreStats> shared_stats() const;
  // Waits until every answer queued for the shared tier is written (tests, shutdown).
  bool FlushShared(std::chrono::milliseconds timeout);
  // Start never waits on anything but CPU work and short locks: true
  // without the shared tier, whose lookups are network round trips, and
  // while no backend may wait for its model to load (Backend::may_block).
  bool StartIsCpuBound() const;

 private:
  Gateway(std::vector<backend::Backend*> backends, const GatewayOptions& options,
          util::Logger& log);
  util::Status Validate(const CompletionRequest& r, const GatewayLiveOptions& live) const;
  // Another instance's invalidation, read from the shared tier's stream (on
  // its watcher thread): the local tiers and prefix blocks only.
  void ApplyRemoteInvalidation(std::string_view message);
  void CountInvalidation(const InvalidationReport& r);

  std::unique_ptr<backend::LocalBackend> owned_local_;  // Create(model, scheduler, ...) only
  const std::vector<backend::Backend*> backends_;       // the default first
  const GatewayOptions options_;
  util::Logger& log_;
  std::shared_ptr<GatewayMetrics> metrics_;  // shared with running flights' sinks
  std::unique_ptr<RtGovernor> governor_;     // the RT-Switcher as the backends see it
  obs::CounterValue* fallbacks_ = nullptr;   // strata_rt_fallback_total
  // strata_cache_invalidated_total{tier}: l1, l3, semantic, l2, shared.
  obs::CounterValue* invalidated_[5] = {};
  obs::CounterValue* invalidation_requests_ = nullptr;  // strata_cache_invalidations_total
  std::shared_ptr<ResponseTiers> tiers_;                // shared with running flights
  // The live options and the ramp from the previous ones: replaced whole
  // by Reconfigure, read once by each Start.
  struct LivePolicies {
    std::shared_ptr<const GatewayLiveOptions> current;
    std::shared_ptr<const GatewayLiveOptions> previous;  // null: no ramp
    std::chrono::steady_clock::time_point ramp_start;
    std::chrono::nanoseconds ramp{0};
    // The share of new requests on `current` at `now`, in [0, 1].
    double Progress(std::chrono::steady_clock::time_point now) const;
  };
  // The options request `r` runs on.
  std::shared_ptr<const GatewayLiveOptions> LiveFor(const CompletionRequest& r);
  const util::Clock* clock_ = nullptr;
  obs::CounterValue* policy_requests_[2] = {};  // strata_policy_requests_total{policy}
  std::atomic<std::shared_ptr<const LivePolicies>> live_;
  std::mutex reconfigure_mu_;  // serialises Reconfigure (validate, then swap)
};

}  // namespace strata::gateway
