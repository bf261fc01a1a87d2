// gateway — the request pipeline between the HTTP front end and the engine.
//
// Promise: Start() turns an API-neutral completion request into running
// generations: it validates every parameter (InvalidArgument naming the
// field), renders the model's chat template, tokenizes (message content never
// becomes a control token), checks the context (OutOfRange, "context length
// exceeded"), and submits one scheduler request per choice. The returned
// Generation yields events in order: text deltas (stop strings never
// appear, even split across tokens; text is always complete UTF-8), then one
// finish per choice. Destroying a Generation or calling Cancel frees its
// engine resources within one step. Latency and token counts are recorded as
// metrics. A traced choice (every choice, or the RT-Switcher's sample of them)
// logs one timing line when it ends: queue wait, prefill, decode, TTFT.
// Nothing of HTTP is known here.
//
// Response cache (L1) and single flight (DESIGN.md §1, §2): a deterministic
// request (temperature 0, or a seed the client fixed) that did not opt out
// is keyed by tenant, model fingerprint, prompt tokens, max_tokens, n, stop
// strings, logprobs and every sampling parameter. An L1 hit replays the
// stored events (text, logprobs, finish reasons, stop sequences and the usage
// of the run that produced them), so the HTTP layer renders it in whatever
// shape the request asked for. A miss while an identical request is being
// generated follows that generation (single flight) and reads every event
// from the first. A generation is stored only when every choice finished
// without error and was not cancelled; it keeps running for its followers
// when the client that started it goes away, and stops when nobody reads it.
// Generation::cache_outcome says how a response was served.
//
// Near-duplicate tier (L3): a deterministic request whose tenant policy or
// own "l3" field allows it (L3Mode) may be answered with the stored answer
// of an earlier request of the same tenant whose wording differs but whose
// everything else matches exactly (internal/near_dup_request.h): same model,
// earlier messages, max_tokens, n, stop strings, logprobs and sampling
// parameters. Its text is compared by cache::NearDupIndex (weighted SimHash
// candidates, confirmed by the weighted-LCS similarity and its guards). Such
// an answer is marked (CacheOutcome::kL3 and Generation::cache_similarity).
// A generation is stored in L3 under the same rule as in L1 (every choice
// succeeded, on the request's own terms); a request allowed to read L3 also
// fills it.
//
// Shared tier (GatewayOptions::shared, Redis): an L1 or L3 miss is looked up
// in Redis next (on the calling thread, bounded by the shared tier's
// timeout); a hit there is copied into the local tier and served as l1 or
// l3. Every answer stored locally is also queued for Redis (the scheduler
// thread only enqueues; the shared store's writer thread writes). Redis being
// slow or down never fails a request: the local tiers keep serving.
//
// Threading: Gateway is thread-safe (any HTTP thread may Start); a
// Generation is used by one thread, its events produced on the scheduler
// thread and handed over through a locked queue.
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
#include <optional>
#include <string>
#include <vector>

#include "cache/near_dup.h"
#include "cache/response_cache.h"
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

// Who may be answered by the near-duplicate tier (L3).
enum class L3Mode {
  kOff,    // no L3 at all
  kOptIn,  // a request that asks ("cache": {"l3": true}) or whose tenant is in l3_tenants
  kOn,     // every request, unless it refuses ("cache": {"l3": false})
};
std::string_view L3ModeName(L3Mode mode);  // "off", "opt-in", "on"
std::optional<L3Mode> ParseL3Mode(std::string_view name);

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
  // The shared tier (Redis) for L1 and L3, whichever are on; nullopt = local
  // tiers only. Its L3 layout and threshold are taken from `l3`.
  std::optional<cache::SharedStoreOptions> shared;
  // The RT-Switcher (gateway/rt_control.h); borrowed, must outlive the
  // gateway. nullptr = off: every choice runs as asked and is traced. When
  // set, each choice takes the policy in force when the scheduler admits it
  // (sampling tier, max_tokens cap, traced or not) and reports its latency.
  RtControl* rt_control = nullptr;
};

struct CompletionRequest {
  std::string request_id;
  std::string tenant = "default";
  // The conversation this request belongs to, as the client names it ("" =
  // none). Scoped to the tenant: equal ids of two tenants are two sessions.
  // Labels the request's log lines; it never changes what is generated.
  std::string session_id;
  std::vector<text::ChatMessage> messages;  // chat: rendered with the chat template
  std::optional<std::string> prompt;        // completion: raw text (used when set)
  std::optional<int32_t> max_tokens;        // default: what is left of the context, capped
  sampling::SamplingParams sampling;
  std::vector<std::string> stop;
  int32_t n = 1;
  int32_t top_logprobs = -1;  // -1: no logprobs; 0..20: chosen token (+ top N)
  bool prefix_cache = true;   // reuse cached KV blocks of this tenant's prompts
  bool ignore_eos = false;    // keep generating past end-of-generation tokens (benchmarks)
  // The client chose sampling.seed: sampling at temperature > 0 is then
  // reproducible, so the response may be cached and shared.
  bool fixed_seed = false;
  // L1 and single flight for this request; false = neither served from the
  // response cache, nor coalesced, nor stored (the header still says "miss").
  bool response_cache = true;
  // L3 for this request: true asks for near-duplicate answers, false refuses
  // them (and does not fill L3); nullopt = the tenant's default (L3Mode).
  std::optional<bool> l3;
};

// How a response was served (the HTTP header x-strata-cache).
enum class CacheOutcome {
  kMiss,       // generated for this request (also: not cacheable, or opted out)
  kL1,         // replayed from the exact response cache
  kL3,         // a near-duplicate's response
  kCoalesced,  // shared the generation of an identical request in flight
};
// "miss", "l1", "l3", "coalesced".
std::string_view CacheOutcomeName(CacheOutcome outcome);

// How a choice ended (the HTTP layer maps these to each API's words): the
// engine's reasons (engine/request.h), with the stop decided here. The
// step loop ends a choice on an end-of-generation token (kEndOfTurn), on
// max_tokens or the context (kLength), on cancellation or failure
// (kCancelled, Event::status says which), and when the choice's stop matcher
// matched; then the gateway says which string did: one of the request's own
// stop strings is kStopString (Event::stop_sequence), the chat template's
// turn-end text is kEndOfTurn.
using FinishReason = engine::FinishReason;
// Token counts of a choice; preemptions are the engine's (0 in a replay).
using Usage = engine::Usage;

struct TokenLogprob {
  std::string text;  // the token's bytes as text (may be partial UTF-8, sanitized)
  std::vector<uint8_t> bytes;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // most likely tokens at that step
};

struct Event {
  enum class Kind { kDelta, kFinish };
  Kind kind = Kind::kDelta;
  int32_t index = 0;                            // choice index
  std::string text;                             // kDelta: new text
  std::vector<TokenLogprob> logprobs;           // kDelta: one per token that produced this text
  FinishReason finish = FinishReason::kLength;  // kFinish
  std::string stop_sequence;                    // kFinish with kStopString: the string that matched
  util::Status status;                          // kFinish: not OK when the choice failed
  Usage usage;                                  // kFinish
};

struct EmbeddingRequest {
  std::string request_id;
  std::string tenant = "default";
  std::vector<std::string> texts;               // each is embedded separately
  std::vector<std::vector<int32_t>> token_ids;  // or pre-tokenized inputs
};

struct EmbeddingResult {
  std::vector<std::vector<float>> embeddings;  // one per input, in order, unit length
  int32_t prompt_tokens = 0;
};

class Generation {
 public:
  virtual ~Generation() = default;
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
  // kL3 answers: the similarity of this request's text to the stored one's.
  virtual std::optional<double> cache_similarity() const { return std::nullopt; }
};

struct GatewayMetrics;
struct ResponseTier;
struct NearDupRequest;
class Flight;

class Gateway {
 public:
  static util::StatusOr<std::unique_ptr<Gateway>> Create(
      const model::Model& model, engine::Scheduler& scheduler, obs::MetricsRegistry& metrics,
      const GatewayOptions& options, const util::Clock& clock, util::Logger& log);
  ~Gateway();

  util::StatusOr<std::unique_ptr<Generation>> Start(const CompletionRequest& request);
  // Mean-pooled, L2-normalised final hidden states of each input. Waits until
  // `deadline` (DeadlineExceeded after it, cancelling what is left).
  util::StatusOr<EmbeddingResult> Embed(const EmbeddingRequest& request,
                                        std::chrono::steady_clock::time_point deadline);

  const std::string& model_name() const { return options_.model_name; }
  int32_t n_ctx() const { return n_ctx_; }
  const text::ChatStyle& chat_style() const { return style_; }
  // Tokens of a prompt (for usage reporting and tests).
  util::StatusOr<std::vector<int32_t>> Tokenize(const CompletionRequest& request) const;
  // The L1's counters; nullopt when L1 is off.
  std::optional<cache::ResponseCacheStats> l1_stats() const;
  // The L3's counters; nullopt when L3 is off.
  std::optional<cache::NearDupStats> l3_stats() const;
  // The shared tier's counters; nullopt without Redis.
  std::optional<cache::SharedStoreStats> shared_stats() const;
  // Waits until every answer queued for the shared tier is written (tests, shutdown).
  bool FlushShared(std::chrono::milliseconds timeout);
  // Start never waits on anything but CPU work and short locks: true
  // without the shared tier, whose lookups are network round trips.
  bool StartIsCpuBound() const;

 private:
  Gateway(const model::Model& model, engine::Scheduler& scheduler, const GatewayOptions& options,
          const util::Clock& clock, util::Logger& log, int32_t n_ctx);
  util::Status Validate(const CompletionRequest& r) const;
  // The prefix-cache namespace of a tenant: cached blocks are shared only
  // among requests of one tenant on one model.
  uint64_t CacheNamespace(const std::string& tenant) const;
  // Submits one scheduler request per choice, each reporting into `flight`;
  // on failure cancels what was submitted.
  util::Status Submit(const CompletionRequest& r, const std::vector<int32_t>& tokens,
                      int32_t max_tokens, const std::vector<std::string>& stops,
                      const std::shared_ptr<Flight>& flight);
  // The L1 and single-flight key: everything that decides the events.
  cache::CacheKey ResponseKey(const CompletionRequest& r, const std::vector<int32_t>& tokens,
                              int32_t max_tokens, const std::vector<std::string>& stops) const;
  // May L3 answer (and be filled by) this request? (L3Mode, l3_tenants, r.l3)
  bool L3Allowed(const CompletionRequest& r) const;
  // The response tiers' part of Start (response_tiers.cpp). FindCached: an
  // answer from L1, the shared tier or L3, or nullptr; sets *refresh when L1
  // chose this request to regenerate an entry near expiry (L3 is then not
  // asked). StoreHook: what the request's shared flight does when it
  // completes — store the answer in L1 and L3 (and queue it for the shared
  // tier) if every choice succeeded on the request's own terms, then leave the
  // single-flight table.
  std::unique_ptr<Generation> FindCached(const CompletionRequest& r, const cache::CacheKey& key,
                                         const NearDupRequest* near, bool use_l1, int32_t n_prompt,
                                         bool* refresh);
  std::function<void(const Flight&, bool, const std::vector<Event>&)> StoreHook(
      const CompletionRequest& r, int32_t n_prompt, bool use_l1,
      std::shared_ptr<const NearDupRequest> near) const;

  const model::Model& model_;
  engine::Scheduler& scheduler_;
  const GatewayOptions options_;
  const util::Clock& clock_;
  util::Logger& log_;
  const int32_t n_ctx_;
  text::ChatStyle style_;
  std::shared_ptr<GatewayMetrics> metrics_;  // shared with running sinks
  std::atomic<uint64_t> unseeded_count_{0};  // requests given a seed from unseeded_seed_base
  std::shared_ptr<ResponseTier> tier_;       // L1 and single flight; shared with running flights
};

}  // namespace strata::gateway
