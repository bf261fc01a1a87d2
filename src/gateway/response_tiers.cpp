// The response tiers (internal/response_tiers.h): classify, key, look up,
// join and store, for every backend.
#include "gateway/internal/response_tiers.h"

#include <algorithm>

#include <fmt/format.h>

#include "gateway/internal/stored_codec.h"

namespace strata::gateway {

// The per-tier families ("tier" label), registered once whatever the tiers:
// the KV pool's prefix cache adds its "l2" children to them.
struct TierFamilies {
  explicit TierFamilies(obs::MetricsRegistry& reg)
      : hits(reg.Counter("strata_cache_hits_total", "Requests answered from a response cache tier.",
                         {"tier"})),
        misses(reg.Counter("strata_cache_misses_total",
                           "Lookups of cacheable requests that a tier could not answer.",
                           {"tier"})),
        early_refreshes(reg.Counter(
            "strata_cache_early_refreshes_total",
            "Hits near expiry chosen to regenerate (probabilistic early refresh).", {"tier"})),
        evictions(
            reg.Counter("strata_cache_evictions_total", "Entries removed to make room.", {"tier"})),
        expirations(reg.Counter("strata_cache_expirations_total",
                                "Entries removed because their TTL ran out.", {"tier"})),
        bytes(reg.Gauge("strata_cache_bytes", "Bytes held by a cache tier.", {"tier"})),
        entries(reg.Gauge("strata_cache_entries", "Entries held by a cache tier.", {"tier"})) {}
  obs::Family<obs::CounterValue>& hits;
  obs::Family<obs::CounterValue>& misses;
  obs::Family<obs::CounterValue>& early_refreshes;
  obs::Family<obs::CounterValue>& evictions;
  obs::Family<obs::CounterValue>& expirations;
  obs::Family<obs::GaugeValue>& bytes;
  obs::Family<obs::GaugeValue>& entries;
};

// One tier's events as Prometheus series. The label children are resolved
// once here, so each event is a lock-free atomic update (the cache calls this
// with its mutex held).
struct TierMetrics final : public cache::TierObserver {
  TierMetrics(TierFamilies& f, const std::string& tier)
      : hits(f.hits.With({tier})),
        misses(f.misses.With({tier})),
        early_refreshes(f.early_refreshes.With({tier})),
        evictions(f.evictions.With({tier})),
        expirations(f.expirations.With({tier})),
        bytes(f.bytes.With({tier})),
        entries(f.entries.With({tier})) {}
  void OnHit() override { hits.Inc(); }
  void OnMiss() override { misses.Inc(); }
  void OnEarlyRefresh() override { early_refreshes.Inc(); }
  void OnStore(uint64_t n) override {
    bytes.Add(static_cast<double>(n));
    entries.Add(1);
  }
  void OnRemove(uint64_t n, cache::RemoveReason reason) override {
    bytes.Add(-static_cast<double>(n));
    entries.Add(-1);
    if (reason == cache::RemoveReason::kEvicted) evictions.Inc();
    if (reason == cache::RemoveReason::kExpired) expirations.Inc();
  }

  obs::CounterValue& hits;
  obs::CounterValue& misses;
  obs::CounterValue& early_refreshes;
  obs::CounterValue& evictions;
  obs::CounterValue& expirations;
  obs::GaugeValue& bytes;
  obs::GaugeValue& entries;
};

struct ResponseTiers::Plan {
  std::chrono::nanoseconds l1_ttl{0};  // the request's, for the shared tier
  std::chrono::nanoseconds l3_ttl{0};
  double l3_min_similarity = 1;
  bool use_l1 = false;
  bool use_coalesce = false;
  std::shared_ptr<const NearDupRequest> near;  // the L3 view, when L3 may answer
  // The semantic view (the same scope and text), when L4/L5 may answer; the
  // lookup fills `vector` (the text's embedding), which the answer is stored with.
  std::shared_ptr<const NearDupRequest> semantic;
  std::shared_ptr<std::vector<float>> vector;
  double semantic_min_similarity = 1;
  // Set by the lookup when this request verifies a would-be hit instead of
  // being answered by it: the candidate's similarity and stored answer.
  struct Verification {
    double similarity = 0;
    std::shared_ptr<const StoredResponse> stored;
  };
  std::shared_ptr<Verification> verify;
  cache::CacheKey key;       // set when any of the three is used
  uint64_t fingerprint = 0;  // the backend's
  std::string model;         // the backend's name
  uint64_t epoch = 0;        // invalidations_ when the request was admitted
  int32_t n_prompt = 0;      // 0: known only from the backend's usage
  bool any() const { return use_l1 || use_coalesce || near != nullptr || semantic != nullptr; }
};

namespace {

// What a remote backend reads of a request besides the common fields: the
// conversation or prompt, and which sampling fields the client set (only
// those are sent, so the upstream's defaults decide the rest).
void AppendRemoteRequest(cache::CacheKeyBuilder& b, const CompletionRequest& r) {
  if (!r.prompt_ids.empty()) {
    b.Str("completion ids").I32s(r.prompt_ids);
  } else if (r.prompt) {
    b.Str("completion").Str(*r.prompt);
  } else {
    b.Str("chat").I64(static_cast<int64_t>(r.messages.size()));
    for (const auto& m : r.messages) {
      b.Str(m.role).Str(m.content).Str(m.tool_call_id).Bool(m.is_error);
      b.I64(static_cast<int64_t>(m.tool_calls.size()));
      for (const auto& c : m.tool_calls) b.Str(c.id).Str(c.name).Str(c.arguments);
    }
    b.I64(static_cast<int64_t>(r.tools.size()));
    for (const auto& t : r.tools) b.Str(t.name).Str(t.description).Str(t.parameters);
  }
  b.I64(static_cast<int64_t>(r.cache_breakpoints.size()));
  for (int32_t i : r.cache_breakpoints) b.I32(i);
  const backend::SamplingFieldsSet& s = r.sampling_set;
  b.Bool(s.temperature).Bool(s.top_p).Bool(s.top_k).Bool(s.min_p).Bool(s.presence_penalty);
  b.Bool(s.frequency_penalty).Bool(s.repetition_penalty).Bool(s.seed).Bool(s.strata_sampler);
  b.Bool(s.logit_bias);
}

// A tier lookup as a span of the request's trace (empty unless it records):
// the tier, a hash of its key (the key itself holds the prompt, so it is
// never recorded), and the TTL the tier gives (or has left of) an entry.
// The caller sets cache.hit and ends it.
obs::Span LookupSpan(const CompletionRequest& r, const util::Clock& clock, std::string_view tier,
                     uint64_t key_hash, std::chrono::nanoseconds ttl) {
  if (r.trace == nullptr || !r.trace->recording()) return obs::Span();
  obs::Span s = r.trace->StartSpan(fmt::format("cache.lookup {}", tier), obs::SpanKind::kInternal,
                                   clock.Now());
  s.SetString("cache.tier", tier);
  s.SetString("cache.key.hash", fmt::format("{:016x}", key_hash));
  if (ttl.count() > 0) {
    s.SetInt("cache.ttl.ms", std::chrono::duration_cast<std::chrono::milliseconds>(ttl).count());
  }
  return s;
}

// The L1 and single-flight key: everything that decides the events.
cache::CacheKey ResponseKey(const CompletionRequest& r, const backend::Backend& backend,
                            const backend::Prepared& p) {
  constexpr uint64_t kKeyVersion = 2;  // bump when the meaning of any field changes
  cache::CacheKeyBuilder b(r.tenant);
  b.U64(kKeyVersion).U64(backend.fingerprint());
  if (!p.tokens.empty()) {
    b.I32s(p.tokens);  // the local engine: what the model reads
  } else {
    b.Str(backend.kind());
    AppendRemoteRequest(b, r);
  }
  b.I32(p.max_tokens).I32(r.n).I32(r.top_logprobs).Bool(r.ignore_eos);
  b.I32(static_cast<int32_t>(r.response_format));
  // Whether and which tool the model must call (the tools themselves are
  // in the prompt's tokens, or in the remote request above).
  b.I32(static_cast<int32_t>(r.tool_choice.mode)).Str(r.tool_choice.name);
  b.Bool(r.parallel_tool_calls).Bool(!r.tools.empty());
  // The schema and the grammar decide the text (absent: the key as before).
  if (r.response_format == ResponseFormat::kJsonSchema) {
    b.Str(r.json_schema.name).Str(r.json_schema.description).Str(r.json_schema.schema);
    b.Bool(r.json_schema.strict);
  }
  if (!r.grammar.empty()) b.Str("grammar").Str(r.grammar);
  // The stop strings: the request's own, then the template's turn ends.
  b.I64(static_cast<int64_t>(p.stops.size())).I64(static_cast<int64_t>(r.stop.size()));
  for (const std::string& s : p.stops) b.Str(s);
  AppendSamplingParams(b, r.sampling);  // every field (a static_assert guards the list)
  return b.Build();
}

}  // namespace

ResponseTiers::ResponseTiers(const GatewayOptions& options, const util::Clock& clock,
                             util::Logger& log)
    : options_(options), clock_(clock), log_(log) {}

ResponseTiers::~ResponseTiers() {
  std::lock_guard lock(retrain_mu_);
  if (retrainer_.joinable()) retrainer_.join();
}

util::StatusOr<std::shared_ptr<ResponseTiers>> ResponseTiers::Create(const GatewayOptions& options,
                                                                     obs::MetricsRegistry& metrics,
                                                                     const util::Clock& clock,
                                                                     util::Logger& log) {
  std::shared_ptr<ResponseTiers> t(new ResponseTiers(options, clock, log));
  t->coalesced_ = &metrics
                       .Counter("strata_cache_coalesced_total",
                                "Requests that shared the generation of an identical "
                                "request in flight (single flight).")
                       .With({});
  auto& remote_hits =
      metrics.Counter("strata_cache_remote_hits_total",
                      "Local misses answered by the shared tier (Redis).", {"tier"});
  auto& remote_misses = metrics.Counter("strata_cache_remote_misses_total",
                                        "Local misses the shared tier did not answer (absent, or "
                                        "Redis down or slow).",
                                        {"tier"});
  TierFamilies families(metrics);
  if (options.l1.max_bytes > 0) {
    t->l1_observer_ = std::make_unique<TierMetrics>(families, "l1");
    STRATA_ASSIGN_OR_RETURN(
        t->l1_, cache::ResponseCache::Create(options.l1, clock, util::Rng(options.l1_seed),
                                             t->l1_observer_.get()));
  }
  if (options.l3_mode != L3Mode::kOff) {
    t->l3_observer_ = std::make_unique<TierMetrics>(families, "l3");
    STRATA_ASSIGN_OR_RETURN(
        t->l3_, cache::NearDupIndex::Create(options.l3, clock, util::Rng(options.l3_seed),
                                            t->l3_observer_.get()));
  }
  if (options.semantic_mode != L3Mode::kOff) {
    if (options.semantic_encoder == nullptr) {
      return util::InvalidArgumentError("the semantic tier needs an encoder");
    }
    t->semantic_observer_ = std::make_unique<TierMetrics>(families, "semantic");
    STRATA_ASSIGN_OR_RETURN(
        t->semantic_,
        cache::SemanticIndex::Create(options.semantic, clock, util::Rng(options.semantic_seed),
                                     t->semantic_observer_.get()));
    t->codec_ = std::make_unique<StoredResponseCodec>();  // for its file (and Redis)
    cache::FalseHitOptions fo = options.semantic_verify;
    fo.floor = options.semantic.min_similarity;
    STRATA_RETURN_IF_ERROR(cache::FalseHitControl::Validate(fo));
    t->false_hits_ = std::make_unique<cache::FalseHitControl>(fo);
    STRATA_RETURN_IF_ERROR(cache::HitRateTrigger::Validate(options.semantic_hit_trigger));
    t->hit_trigger_ = std::make_unique<cache::HitRateTrigger>(options.semantic_hit_trigger);
    t->relearns_ =
        &metrics
             .Counter("strata_semantic_relearns_total",
                      "Times the semantic tier's hit rate fell below its floor and the tier "
                      "re-learned its threshold and retrained its nearest-neighbour lists.")
             .With({});
    t->verify_rng_ = util::Rng(options.semantic_seed ^ 0x5645'5249'4659ULL);
    auto& verified = metrics.Counter(
        "strata_semantic_verifications_total",
        "Would-be semantic hits generated anyway and compared with the stored answer, by "
        "result (agreed, disagreed).",
        {"result"});
    t->verified_[0] = &verified.With({"agreed"});
    t->verified_[1] = &verified.With({"disagreed"});
    std::weak_ptr<ResponseTiers> weak_tiers = t;
    auto estimate = [weak_tiers](auto field) {
      return [weak_tiers, field]() -> double {
        const auto tiers = weak_tiers.lock();
        return tiers ? field(tiers->false_hits_->Estimate()) : 0.0;
      };
    };
    metrics.GaugeCallback(
        "strata_semantic_threshold",
        "The cosine similarity a semantic answer needs now: the learned threshold (above 1 "
        "while no threshold keeps the verified false-hit rate under the bound).",
        estimate([](const cache::FalseHitEstimate& e) { return e.threshold; }));
    metrics.GaugeCallback(
        "strata_semantic_false_hit_rate",
        "Verified false-hit rate of the would-be hits at the threshold (window of recent checks).",
        estimate([](const cache::FalseHitEstimate& e) { return e.rate; }));
    metrics.GaugeCallback("strata_semantic_false_hit_rate_lower",
                          "Lower end of its 95 % Wilson interval.",
                          estimate([](const cache::FalseHitEstimate& e) { return e.lower; }));
    metrics.GaugeCallback("strata_semantic_false_hit_rate_upper",
                          "Upper end of its 95 % Wilson interval.",
                          estimate([](const cache::FalseHitEstimate& e) { return e.upper; }));
    metrics.GaugeCallback(
        "strata_semantic_verified_samples", "Verified would-be hits at or above the threshold.",
        estimate([](const cache::FalseHitEstimate& e) { return static_cast<double>(e.samples); }));
    metrics.GaugeCallback(
        "strata_semantic_hit_rate",
        "Share of the semantic tier's lookups it answered, over the last full window of the "
        "hit-rate trigger (0 before the first, or with the trigger off).",
        [weak_tiers]() -> double {
          const auto tiers = weak_tiers.lock();
          return tiers ? tiers->hit_trigger_->rate().value_or(0.0) : 0.0;
        });
    auto relearned = [weak_tiers](double Relearned::*field) {
      return [weak_tiers, field]() -> double {
        const auto tiers = weak_tiers.lock();
        if (!tiers) return 0.0;
        std::lock_guard lock(tiers->relearn_mu_);
        return tiers->relearned_.*field;
      };
    };
    metrics.Gauge("strata_semantic_relearn_hit_rate",
                  "The semantic tier's hit rate in the window that triggered the last "
                  "re-learning (before) and in the first window after it (after).",
                  {"when"});
    metrics.ChildCallback("strata_semantic_relearn_hit_rate", {"before"},
                          relearned(&Relearned::rate_before));
    metrics.ChildCallback("strata_semantic_relearn_hit_rate", {"after"},
                          relearned(&Relearned::rate_after));
    metrics.Gauge("strata_semantic_relearn_threshold",
                  "The semantic threshold served when the last re-learning began (before) and "
                  "when it settled (after).",
                  {"when"});
    metrics.ChildCallback("strata_semantic_relearn_threshold", {"before"},
                          relearned(&Relearned::threshold_before));
    metrics.ChildCallback("strata_semantic_relearn_threshold", {"after"},
                          relearned(&Relearned::threshold_after));
    t->encode_failures_ =
        &metrics
             .Counter("strata_semantic_encode_failures_total",
                      "Requests the semantic tier skipped because the encoder failed or was "
                      "late (the request goes on without it).")
             .With({});
    t->encode_seconds_ = &metrics
                              .Histogram("strata_semantic_encode_seconds",
                                         "Time to embed a request's text for the semantic tier.",
                                         {}, obs::ExponentialBuckets(0.0005, 2, 14))
                              .With({});
  }
  if (options.shared && (t->l1_ || t->l3_ || t->semantic_)) {
    cache::SharedStoreOptions so = *options.shared;
    so.near_dup.bands = options.l3.bands;
    so.near_dup.probe_radius = options.l3.probe_radius;
    so.near_dup.max_candidates = options.l3.max_candidates;
    so.near_dup.min_similarity = options.l3.min_similarity;
    so.near_dup.similarity = options.l3.similarity;
    if (!t->codec_) t->codec_ = std::make_unique<StoredResponseCodec>();
    STRATA_ASSIGN_OR_RETURN(
        t->shared_, cache::SharedStore::Create(so, *t->codec_, clock,
                                               util::Rng(options.l1_seed ^ 0x5348'5244ULL), log));
    STRATA_ASSIGN_OR_RETURN(t->feed_, cache::SharedFeed::Create(so, "invalidations", log));
    if (t->semantic_) {
      // The store appends the keys; the feed skips the ones it appended.
      STRATA_ASSIGN_OR_RETURN(
          t->semantic_feed_,
          cache::SharedFeed::Create(so, "semantic", log, 10'000, t->shared_->id()));
      t->semantic_adopted_ =
          &metrics
               .Counter("strata_semantic_shared_adopted_total",
                        "Semantic entries other instances stored, copied from Redis into this "
                        "instance's index.")
               .With({});
    }
    for (int i = 0; i < 2; ++i) {
      const std::string label = i == 0 ? "l1" : "l3";
      t->remote_hits_[i] = &remote_hits.With({label});
      t->remote_misses_[i] = &remote_misses.With({label});
    }
    // Read at render time; a weak pointer, so the registry never keeps the
    // store (and its thread) alive.
    std::weak_ptr<ResponseTiers> weak = t;
    auto read = [weak](auto field) {
      return [weak, field]() -> double {
        const auto tiers = weak.lock();
        return tiers && tiers->shared_ ? static_cast<double>(field(tiers->shared_->stats())) : 0.0;
      };
    };
    metrics.GaugeCallback("strata_cache_remote_up",
                          "1 while the shared tier (Redis) answers, 0 while it is down.",
                          read([](const cache::SharedStoreStats& s) { return s.up ? 1 : 0; }));
    metrics.CounterCallback("strata_cache_remote_errors_total",
                            "Shared tier transport errors and undecodable entries.",
                            read([](const cache::SharedStoreStats& s) { return s.errors; }));
    metrics.CounterCallback("strata_cache_remote_skipped_total",
                            "Shared tier lookups not sent: Redis down, or no connection free "
                            "within the timeout.",
                            read([](const cache::SharedStoreStats& s) { return s.skipped; }));
    metrics.CounterCallback("strata_cache_remote_writes_total",
                            "Answers written to the shared tier.",
                            read([](const cache::SharedStoreStats& s) { return s.writes; }));
    metrics.CounterCallback(
        "strata_cache_remote_dropped_writes_total",
        "Answers not written to the shared tier: Redis down, the write "
        "queue full, or the write failed.",
        read([](const cache::SharedStoreStats& s) { return s.dropped_writes; }));
  }
  return t;
}

std::optional<cache::ResponseCacheStats> ResponseTiers::l1_stats() const {
  if (!l1_) return std::nullopt;
  return l1_->Stats();
}

std::optional<cache::NearDupStats> ResponseTiers::l3_stats() const {
  if (!l3_) return std::nullopt;
  return l3_->stats();
}

std::optional<cache::SemanticStats> ResponseTiers::semantic_stats() const {
  if (!semantic_) return std::nullopt;
  return semantic_->stats();
}

util::Status ResponseTiers::SaveSemantic(util::FileSystem& fs, const std::string& path) const {
  if (!semantic_) return util::FailedPreconditionError("the semantic tier is off");
  return semantic_->Save(fs, path, *codec_, options_.semantic_encoder->fingerprint());
}

util::StatusOr<size_t> ResponseTiers::LoadSemantic(util::FileSystem& fs, const std::string& path) {
  if (!semantic_) return util::FailedPreconditionError("the semantic tier is off");
  return semantic_->Load(fs, path, *codec_, options_.semantic_encoder->fingerprint());
}

std::optional<cache::SharedStoreStats> ResponseTiers::shared_stats() const {
  if (!shared_) return std::nullopt;
  return shared_->stats();
}

bool ResponseTiers::FlushShared(std::chrono::milliseconds timeout) {
  return !shared_ || shared_->Flush(timeout);
}

util::Status ResponseTiers::Reconfigure(const GatewayLiveOptions& live) {
  if (!l3_ && live.l3_mode != L3Mode::kOff) {
    return util::InvalidArgumentError(
        "l3 mode: the L3 tier was off at start; turning it on needs a restart");
  }
  if (!semantic_ && live.semantic_mode != L3Mode::kOff) {
    return util::InvalidArgumentError(
        "semantic mode: the semantic tier was off at start; turning it on needs a restart");
  }
  if (semantic_ && !(live.semantic_min_similarity > options_.semantic.coarse_similarity &&
                     live.semantic_min_similarity <= 1)) {
    return util::InvalidArgumentError(fmt::format("semantic min_similarity {} is outside ({}, 1]",
                                                  live.semantic_min_similarity,
                                                  options_.semantic.coarse_similarity));
  }
  if (live.l3_ttl.count() < 0 || live.l3_ttl > std::chrono::hours(24 * 30)) {
    return util::InvalidArgumentError(
        fmt::format("l3 ttl {} s is outside [0, 30 days]", live.l3_ttl.count()));
  }
  // Every value is checked here, so that neither cache changes unless both
  // can (their own checks below then pass).
  if (!(live.l3_min_similarity > 0 && live.l3_min_similarity <= 1)) {
    return util::InvalidArgumentError(
        fmt::format("l3 min_similarity {} is outside (0, 1]", live.l3_min_similarity));
  }
  if (live.l1_ttl <= std::chrono::milliseconds::zero() ||
      live.l1_ttl > std::chrono::hours(24 * 30) ||
      !(live.l1_ttl_jitter >= 0 && live.l1_ttl_jitter <= 0.9)) {
    return util::InvalidArgumentError(
        fmt::format("l1 ttl {} ms or ttl_jitter {} is outside (0, 30 days] / [0, 0.9]",
                    live.l1_ttl.count(), live.l1_ttl_jitter));
  }
  if (l1_)
    STRATA_RETURN_IF_ERROR(l1_->Reconfigure(live.l1_ttl, live.l1_ttl_jitter, live.admission));
  if (l3_) {
    STRATA_RETURN_IF_ERROR(
        l3_->Reconfigure(live.l3_min_similarity, live.l3_ttl, live.l1_ttl_jitter, live.admission));
  }
  if (semantic_) {
    STRATA_RETURN_IF_ERROR(semantic_->Reconfigure(live.semantic_min_similarity,
                                                  options_.semantic.ttl, live.l1_ttl_jitter));
  }
  return util::OkStatus();
}

bool ResponseTiers::SemanticAllowed(const CompletionRequest& r,
                                    const GatewayLiveOptions& live) const {
  if (!semantic_ || live.semantic_mode == L3Mode::kOff) return false;
  if (r.semantic) return *r.semantic;
  if (live.semantic_mode == L3Mode::kOn) return true;
  return std::find(live.semantic_tenants.begin(), live.semantic_tenants.end(), r.tenant) !=
         live.semantic_tenants.end();
}

bool ResponseTiers::L3Allowed(const CompletionRequest& r, const GatewayLiveOptions& live) const {
  if (!l3_ || live.l3_mode == L3Mode::kOff) return false;
  if (r.l3) return *r.l3;  // the request's own word, in opt-in and on alike
  if (live.l3_mode == L3Mode::kOn) return true;
  return std::find(live.l3_tenants.begin(), live.l3_tenants.end(), r.tenant) !=
         live.l3_tenants.end();
}

ResponseTiers::Plan ResponseTiers::Classify(const CompletionRequest& r, const backend::Backend& b,
                                            const backend::Prepared& p,
                                            const GatewayLiveOptions& live) const {
  Plan plan;
  plan.l1_ttl = live.l1_ttl;
  plan.l3_ttl = live.l3_ttl.count() > 0 ? std::chrono::nanoseconds(live.l3_ttl) : plan.l1_ttl;
  plan.l3_min_similarity = live.l3_min_similarity;
  plan.fingerprint = b.fingerprint();
  plan.model = b.name();
  plan.epoch = invalidations_.load();
  plan.n_prompt = p.prompt_tokens;
  // Only deterministic requests are cached or coalesced: greedy, or sampled
  // with a seed the client chose (choice i then uses seed + i).
  const bool deterministic = r.sampling.temperature == 0.0f || r.fixed_seed;
  plan.use_l1 = r.response_cache && deterministic && l1_ != nullptr;
  plan.use_coalesce = r.response_cache && deterministic && live.coalesce;
  // L3 and the semantic tiers need a text with words to compare; the same
  // rule as L1 otherwise.
  const bool l3 = deterministic && L3Allowed(r, live);
  const bool semantic = deterministic && SemanticAllowed(r, live);
  if (l3 || semantic) {
    if (auto n = MakeNearDupRequest(r, plan.fingerprint, p.stops, options_.l3.prepare,
                                    /*remote=*/p.tokens.empty())) {
      auto view = std::make_shared<const NearDupRequest>(std::move(*n));
      if (l3) plan.near = view;
      if (semantic) {
        plan.semantic = view;
        plan.vector = std::make_shared<std::vector<float>>();
        plan.verify = std::make_shared<Plan::Verification>();
        plan.semantic_min_similarity = live.semantic_min_similarity;
      }
    }
  }
  if (plan.any()) plan.key = ResponseKey(r, b, p);
  return plan;
}

namespace {

// The single-flight key of a run that reports only its whole answer
// (Prepared::whole): apart from the streaming runs of the same request, so
// that a streaming client never waits for the end to see its first token.
// Its answer is stored under the request's own key.
cache::CacheKey WholeRunKey(const cache::CacheKey& key) {
  cache::CacheKey k{key.bytes + std::string("\0whole-run", 10), 0};
  k.hash = key.hash ^ 0x77686f6c652d7275ULL;  // "whole-ru"
  return k;
}

}  // namespace

cache::CacheKey ResponseTiers::KeyOf(const CompletionRequest& r, const backend::Backend& b,
                                     const backend::Prepared& p) const {
  return ResponseKey(r, b, p);
}

std::shared_ptr<const NearDupRequest> ResponseTiers::NearViewOf(const CompletionRequest& r,
                                                                const backend::Backend& b,
                                                                const backend::Prepared& p) const {
  auto n = MakeNearDupRequest(r, b.fingerprint(), p.stops, options_.l3.prepare,
                              /*remote=*/p.tokens.empty());
  return n ? std::make_shared<const NearDupRequest>(std::move(*n)) : nullptr;
}

ResponseTiers::Admission ResponseTiers::Admit(const CompletionRequest& r,
                                              const backend::Backend& backend,
                                              const backend::Prepared& prepared,
                                              const GatewayLiveOptions& live) {
  Admission a;
  const Plan plan = Classify(r, backend, prepared, live);
  const auto now = clock_.Now();
  if (!plan.any()) {
    a.flight = std::make_shared<Flight>(r.n, std::nullopt, now, Flight::Hook());
    return a;
  }
  a.answer = FindCached(r, plan, &a.refresh);
  if (a.answer) return a;
  const Flight::Hook on_complete = StoreHook(r, plan);
  if (!plan.use_coalesce) {
    a.flight = std::make_shared<Flight>(r.n, plan.key, now, on_complete);
    return a;
  }
  const cache::CacheKey join_key = prepared.whole ? WholeRunKey(plan.key) : plan.key;
  std::shared_ptr<const cache::CachedValue> stored_meanwhile;
  auto make_flight = [&]() -> std::shared_ptr<Flight> {
    // Under the single-flight lock: an identical request may have finished
    // (and stored its answer) since the lookup above.
    if (plan.use_l1 && !a.refresh) {
      stored_meanwhile = l1_->Peek(plan.key);
      if (stored_meanwhile) return nullptr;
    }
    return std::make_shared<Flight>(r.n, join_key, now, on_complete);
  };
  obs::Span join = LookupSpan(r, clock_, "coalesce", join_key.hash, {});
  auto joined = flights_.Join(join_key, make_flight);
  join.SetBool("cache.hit", joined.role == cache::SingleFlight<Flight>::Role::kFollower);
  join.End();
  switch (joined.role) {
    case cache::SingleFlight<Flight>::Role::kNone:
      a.answer = std::make_unique<ReplayGeneration>(
          std::static_pointer_cast<const StoredResponse>(stored_meanwhile));
      return a;
    case cache::SingleFlight<Flight>::Role::kFollower:
      coalesced_->Inc();
      log_.Debug("[{}] tenant={} coalesced with an identical request in flight", r.request_id,
                 r.tenant);
      a.answer = std::make_unique<FlightGeneration>(joined.flight, shared_from_this(),
                                                    plan.n_prompt, CacheOutcome::kCoalesced,
                                                    backend.defers_stream_head());
      return a;
    case cache::SingleFlight<Flight>::Role::kLeader:
      break;
  }
  a.flight = std::move(joined.flight);
  a.registered = true;
  return a;
}

void ResponseTiers::Abort(const Admission& a, const util::Status& why) {
  a.flight->Fail(why);  // followers that joined meanwhile get this error
  if (a.registered) flights_.Leave(a.flight->key(), a.flight.get());
}

bool ResponseTiers::Leave(const Flight& flight) { return flights_.Leave(flight.key(), &flight); }

std::unique_ptr<Generation> ResponseTiers::FindCached(const CompletionRequest& r, const Plan& plan,
                                                      bool* refresh) {
  const cache::SharedScope scope{r.tenant, plan.fingerprint};
  // The request's TTLs (a reload may have changed the tiers' since).
  const std::chrono::nanoseconds l3_ttl = plan.l3_ttl;
  if (plan.use_l1) {
    obs::Span l1_span = LookupSpan(r, clock_, "l1", plan.key.hash, plan.l1_ttl);
    const cache::Lookup found = l1_->Find(plan.key);
    l1_span.SetBool("cache.hit", found.kind == cache::Lookup::Kind::kHit);
    if (found.kind == cache::Lookup::Kind::kRefresh) l1_span.SetBool("cache.early_refresh", true);
    l1_span.End();
    if (found.kind == cache::Lookup::Kind::kHit) {
      log_.Debug("[{}] tenant={} L1 hit", r.request_id, r.tenant);
      return std::make_unique<ReplayGeneration>(
          std::static_pointer_cast<const StoredResponse>(found.value));
    }
    *refresh = found.kind == cache::Lookup::Kind::kRefresh;
    // Another instance may have it. (Redis I/O on this request's thread,
    // bounded by the shared tier's timeout.) The copy keeps Redis's TTL.
    if (!*refresh && shared_) {
      obs::Span shared_span = LookupSpan(r, clock_, "shared.l1", plan.key.hash, {});
      auto hit = shared_->GetExact(scope, plan.key);
      shared_span.SetBool("cache.hit", hit.has_value());
      if (hit) shared_span.SetInt("cache.ttl.ms", hit->ttl_left.count());
      shared_span.End();
      if (hit) {
        remote_hits_[0]->Inc();
        l1_->Insert(plan.key, hit->value, std::chrono::nanoseconds::zero(), hit->ttl_left);
        log_.Debug("[{}] tenant={} L1 hit in the shared tier", r.request_id, r.tenant);
        return std::make_unique<ReplayGeneration>(
            std::static_pointer_cast<const StoredResponse>(hit->value));
      }
      remote_misses_[0]->Inc();
    }
  }
  const NearDupRequest* near = plan.near.get();
  if (near && !*refresh) {
    obs::Span l3_span = LookupSpan(r, clock_, "l3", plan.key.hash, l3_ttl);
    auto match = l3_->Lookup(near->ns, near->text, plan.l3_min_similarity);
    const bool l3_hit = match && match->value;
    l3_span.SetBool("cache.hit", l3_hit);
    if (l3_hit) l3_span.SetDouble("cache.similarity", match->similarity);
    l3_span.End();
    if (l3_hit) {
      log_.Debug("[{}] tenant={} L3 hit, similarity {:.3f}", r.request_id, r.tenant,
                 match->similarity);
      return std::make_unique<ReplayGeneration>(
          std::static_pointer_cast<const StoredResponse>(match->value), match->similarity,
          plan.n_prompt);
    }
    if (shared_) {
      obs::Span shared_span = LookupSpan(r, clock_, "shared.l3", plan.key.hash, {});
      auto hit = shared_->FindNear(scope, near->scope, near->text, plan.l3_min_similarity);
      shared_span.SetBool("cache.hit", hit.has_value());
      if (hit) {
        shared_span.SetInt("cache.ttl.ms", hit->ttl_left.count());
        shared_span.SetDouble("cache.similarity", hit->similarity);
      }
      shared_span.End();
      if (hit) {
        remote_hits_[1]->Inc();
        (void)l3_->Insert(near->ns, near->text, plan.key.hash, hit->value);
        log_.Debug("[{}] tenant={} L3 hit in the shared tier, similarity {:.3f}", r.request_id,
                   r.tenant, hit->similarity);
        return std::make_unique<ReplayGeneration>(
            std::static_pointer_cast<const StoredResponse>(hit->value), hit->similarity,
            plan.n_prompt);
      }
      remote_misses_[1]->Inc();
    }
  }
  if (plan.semantic && !*refresh) return FindSemantic(r, plan);
  return nullptr;
}

std::unique_ptr<Generation> ResponseTiers::FindSemantic(const CompletionRequest& r,
                                                        const Plan& plan) {
  const NearDupRequest& view = *plan.semantic;
  const auto started = clock_.Now();
  backend::EmbeddingRequest er;
  er.request_id = r.request_id;
  er.tenant = r.tenant;
  er.model = options_.semantic_encoder->name();
  er.texts = {view.raw};
  // Backends take deadlines on the steady clock (the injected clock may be another).
  auto embedded = options_.semantic_encoder->Embed(
      er, std::chrono::steady_clock::now() + options_.semantic_encode_timeout);
  encode_seconds_->Observe(util::SecondsBetween(started, clock_.Now()));
  if (!embedded.ok() || embedded->embeddings.size() != 1) {
    // Never fails the request: it goes on without the semantic tier (and
    // its answer is not stored there).
    encode_failures_->Inc();
    log_.Debug("[{}] tenant={} semantic tier skipped: the encoder answered {}", r.request_id,
               r.tenant, embedded.ok() ? "no vector" : embedded.status().ToString());
    return nullptr;
  }
  *plan.vector = std::move(embedded->embeddings[0]);
  obs::Span span = LookupSpan(r, clock_, "semantic", plan.key.hash, {});
  const std::string ns = cache::SemanticNamespace(view.tenant, view.scope);
  auto found = semantic_->Lookup(ns, *plan.vector, &view.text, plan.semantic_min_similarity);
  if (!found.ok()) {  // a vector of another width: the encoder changed under the tier
    encode_failures_->Inc();
    log_.Warn("[{}] semantic tier skipped: {}", r.request_id, found.status().ToString());
    plan.vector->clear();
    span.End();
    return nullptr;
  }
  bool hit = found->match && found->match->value;
  if (hit) {
    // Verify a sampled share of would-be hits (all of them while the
    // threshold is being learned); serve only at the learned threshold.
    const double share = false_hits_->VerifyShare();
    bool verify = false;
    {
      std::lock_guard lock(verify_mu_);
      verify = verify_rng_.Uniform() < share;
    }
    if (verify) {
      plan.verify->similarity = found->match->similarity;
      plan.verify->stored = std::static_pointer_cast<const StoredResponse>(found->match->value);
      span.SetBool("cache.verify", true);
      hit = false;
    } else if (found->match->similarity < false_hits_->threshold()) {
      hit = false;  // above the operator's floor, below what the checks allow
    }
  }
  span.SetBool("cache.hit", hit);
  span.SetInt("cache.candidates", static_cast<int64_t>(found->screened));
  if (hit) span.SetDouble("cache.similarity", found->match->similarity);
  span.End();
  RecordSemanticLookup(hit);
  if (!hit) return nullptr;
  log_.Debug("[{}] tenant={} semantic hit, similarity {:.3f} ({} candidates)", r.request_id,
             r.tenant, found->match->similarity, found->screened);
  return std::make_unique<ReplayGeneration>(
      std::static_pointer_cast<const StoredResponse>(found->match->value), found->match->similarity,
      plan.n_prompt, CacheOutcome::kSemantic);
}

Flight::Hook ResponseTiers::StoreHook(const CompletionRequest& r, const Plan& plan) {
  // Runs on the thread that finishes the flight. In this order: a request
  // that finds no flight under the single-flight table's lock then finds the
  // answer in L1. With a shared tier, the answer is also queued for Redis
  // (never blocking: the shared store's writer thread writes it).
  const std::chrono::nanoseconds l1_ttl = plan.l1_ttl;
  const std::chrono::nanoseconds l3_ttl = plan.l3_ttl;
  return [tiers = shared_from_this(), key = plan.key, n_choices = r.n, n_prompt = plan.n_prompt,
          use_l1 = plan.use_l1, near = plan.near, semantic = plan.semantic, vector = plan.vector,
          verify = plan.verify, scope = cache::SharedScope{r.tenant, plan.fingerprint}, l1_ttl,
          l3_ttl, epoch = plan.epoch,
          origin = AnswerOrigin{r.tenant, plan.model, plan.fingerprint, PromptText(r)}](
             const Flight& f, bool succeeded, const std::vector<Event>& log) {
    // An invalidation since this request was admitted may have meant its
    // answer (a changed document, a retired model): not stored.
    const bool current = tiers->invalidations_.load() == epoch;
    if (succeeded && current && (use_l1 || near || semantic)) {
      // A remote backend learns the prompt's size from its usage.
      int32_t prompt = n_prompt;
      for (const Event& e : log) {
        if (e.kind == Event::Kind::kFinish) prompt = std::max(prompt, e.usage.prompt_tokens);
      }
      auto stored = std::make_shared<StoredResponse>(log, n_choices, prompt, origin);
      if (use_l1) {
        tiers->l1_->Insert(key, stored, tiers->clock_.Now() - f.started());
        if (tiers->shared_) tiers->shared_->PutExact(scope, key, stored, l1_ttl);
      }
      if (near) {
        // Too large for the L3 budget: not stored (ResourceExhausted), nothing else changes.
        (void)tiers->l3_->Insert(near->ns, near->text, key.hash, stored);
        if (tiers->shared_) {
          tiers->shared_->PutNear(scope, near->scope,
                                  std::shared_ptr<const cache::NearDupText>(near, &near->text),
                                  stored, l3_ttl);
        }
      }
      if (verify && verify->stored) tiers->Verify(verify->similarity, *verify->stored, log);
      if (semantic && vector && !vector->empty()) {
        const std::string ns = cache::SemanticNamespace(semantic->tenant, semantic->scope);
        (void)tiers->semantic_->Insert(ns, *vector, &semantic->text, key.hash, stored);
        if (tiers->shared_) {
          // The other instances copy it into their own index (its key on the
          // semantic stream).
          const auto ttl = tiers->options_.semantic.ttl.count() > 0
                               ? std::chrono::nanoseconds(tiers->options_.semantic.ttl)
                               : l1_ttl;
          tiers->shared_->PutSemantic(
              scope, tiers->options_.semantic_encoder->fingerprint(),
              {.ns = ns,
               .payload = key.hash,
               .vector = *vector,
               .text = std::shared_ptr<const cache::NearDupText>(semantic, &semantic->text),
               .value = stored,
               .ttl_left = {}},
              ttl);
        }
      }
    }
    tiers->flights_.Finish(f.key(), &f);
  };
}

}  // namespace strata::gateway
