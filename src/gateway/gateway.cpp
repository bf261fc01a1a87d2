#include "gateway/gateway.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "gateway/internal/embedding_sink.h"
#include "gateway/internal/flight.h"
#include "gateway/internal/near_dup_request.h"
#include "gateway/internal/stored_codec.h"
#include "gateway/rt_control.h"
#include "gateway/stop_matcher.h"
#include "util/hash.h"
#include "util/utf8.h"

namespace strata::gateway {

using util::InvalidArgumentError;

std::string_view CacheOutcomeName(CacheOutcome outcome) {
  switch (outcome) {
    case CacheOutcome::kMiss:
      return "miss";
    case CacheOutcome::kL1:
      return "l1";
    case CacheOutcome::kL3:
      return "l3";
    case CacheOutcome::kCoalesced:
      return "coalesced";
  }
  return "miss";
}

std::string_view L3ModeName(L3Mode mode) {
  switch (mode) {
    case L3Mode::kOff:
      return "off";
    case L3Mode::kOptIn:
      return "opt-in";
    case L3Mode::kOn:
      return "on";
  }
  return "off";
}

std::optional<L3Mode> ParseL3Mode(std::string_view name) {
  for (L3Mode m : {L3Mode::kOff, L3Mode::kOptIn, L3Mode::kOn}) {
    if (name == L3ModeName(m)) return m;
  }
  return std::nullopt;
}

namespace {

std::string_view ReasonLabel(FinishReason r) {
  switch (r) {
    case FinishReason::kEndOfTurn:
      return "end_of_turn";
    case FinishReason::kStopString:
      return "stop_string";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "cancelled";
}

}  // namespace

struct GatewayMetrics {
  explicit GatewayMetrics(obs::MetricsRegistry& reg)
      : ttft(reg.Histogram("strata_time_to_first_token_seconds",
                           "Time from request submission to its first generated token.", {},
                           obs::ExponentialBuckets(0.005, 2, 14))
                 .With({})),
        tpot(reg.Histogram("strata_time_per_output_token_seconds",
                           "Mean time between generated tokens of a request after the first.", {},
                           obs::ExponentialBuckets(0.001, 2, 14))
                 .With({})),
        e2e(reg.Histogram("strata_request_duration_seconds",
                          "Time from submission to the last token of a request.", {},
                          obs::ExponentialBuckets(0.01, 2, 16))
                .With({})),
        prompt_tokens(
            reg.Counter("strata_prompt_tokens_total", "Prompt tokens of requests.").With({})),
        generated_tokens(
            reg.Counter("strata_generated_tokens_total", "Tokens generated.").With({})),
        finished(reg.Counter("strata_generations_finished_total",
                             "Generated choices by how they ended.", {"reason"})),
        cache_hits(reg.Counter("strata_cache_hits_total",
                               "Requests answered from a response cache tier.", {"tier"})),
        cache_misses(reg.Counter("strata_cache_misses_total",
                                 "Lookups of cacheable requests that a tier could not answer.",
                                 {"tier"})),
        cache_early_refreshes(reg.Counter(
            "strata_cache_early_refreshes_total",
            "Hits near expiry chosen to regenerate (probabilistic early refresh).", {"tier"})),
        cache_evictions(
            reg.Counter("strata_cache_evictions_total", "Entries removed to make room.", {"tier"})),
        cache_expirations(reg.Counter("strata_cache_expirations_total",
                                      "Entries removed because their TTL ran out.", {"tier"})),
        cache_bytes(reg.Gauge("strata_cache_bytes", "Bytes held by a cache tier.", {"tier"})),
        cache_entries(reg.Gauge("strata_cache_entries", "Entries held by a cache tier.", {"tier"})),
        cache_coalesced(reg.Counter("strata_cache_coalesced_total",
                                    "Requests that shared the generation of an identical "
                                    "request in flight (single flight).")
                            .With({})),
        traced(reg.Counter("strata_traced_choices_total",
                           "Generated choices that logged their timing line (trace sampling).")
                   .With({})),
        remote_hits(reg.Counter("strata_cache_remote_hits_total",
                                "Local misses answered by the shared tier (Redis).", {"tier"})),
        remote_misses(reg.Counter("strata_cache_remote_misses_total",
                                  "Local misses the shared tier did not answer (absent, or "
                                  "Redis down or slow).",
                                  {"tier"})) {}
  obs::HistogramValue& ttft;
  obs::HistogramValue& tpot;
  obs::HistogramValue& e2e;
  obs::CounterValue& prompt_tokens;
  obs::CounterValue& generated_tokens;
  obs::Family<obs::CounterValue>& finished;
  // Response cache tiers, by "tier" label ("l1"; "l3" when that tier reports).
  obs::Family<obs::CounterValue>& cache_hits;
  obs::Family<obs::CounterValue>& cache_misses;
  obs::Family<obs::CounterValue>& cache_early_refreshes;
  obs::Family<obs::CounterValue>& cache_evictions;
  obs::Family<obs::CounterValue>& cache_expirations;
  obs::Family<obs::GaugeValue>& cache_bytes;
  obs::Family<obs::GaugeValue>& cache_entries;
  obs::CounterValue& cache_coalesced;
  obs::CounterValue& traced;
  // The shared tier (Redis), by "tier" label ("l1", "l3").
  obs::Family<obs::CounterValue>& remote_hits;
  obs::Family<obs::CounterValue>& remote_misses;
};

namespace {

// One tier's events as Prometheus series. The label children are resolved
// once here, so each event is a lock-free atomic update (the cache calls this
// with its mutex held).
class TierMetrics final : public cache::TierObserver {
 public:
  TierMetrics(GatewayMetrics& m, const std::string& tier)
      : hits_(m.cache_hits.With({tier})),
        misses_(m.cache_misses.With({tier})),
        early_refreshes_(m.cache_early_refreshes.With({tier})),
        evictions_(m.cache_evictions.With({tier})),
        expirations_(m.cache_expirations.With({tier})),
        bytes_(m.cache_bytes.With({tier})),
        entries_(m.cache_entries.With({tier})) {}
  void OnHit() override { hits_.Inc(); }
  void OnMiss() override { misses_.Inc(); }
  void OnEarlyRefresh() override { early_refreshes_.Inc(); }
  void OnStore(uint64_t bytes) override {
    bytes_.Add(static_cast<double>(bytes));
    entries_.Add(1);
  }
  void OnRemove(uint64_t bytes, cache::RemoveReason reason) override {
    bytes_.Add(-static_cast<double>(bytes));
    entries_.Add(-1);
    if (reason == cache::RemoveReason::kEvicted) evictions_.Inc();
    if (reason == cache::RemoveReason::kExpired) expirations_.Inc();
  }

 private:
  obs::CounterValue& hits_;
  obs::CounterValue& misses_;
  obs::CounterValue& early_refreshes_;
  obs::CounterValue& evictions_;
  obs::CounterValue& expirations_;
  obs::GaugeValue& bytes_;
  obs::GaugeValue& entries_;
};

// What a choice needs besides its sampling: where to report latency and its
// timing line.
struct ChoiceContext {
  std::string request_id;
  std::string session_id;   // "" = none
  int32_t max_tokens = 0;   // as submitted
  RtControl* rt = nullptr;  // nullptr: no RT-Switcher
  util::Logger* log = nullptr;
};

// One choice: samples, detokenizes, matches stop strings and reports events.
// Runs on the scheduler thread.
class ChoiceSink final : public engine::RequestSink {
 public:
  ChoiceSink(int32_t index, const sampling::SamplingParams& params, const text::Tokenizer& tok,
             std::vector<std::string> stops, size_t n_user_stops, int32_t top_logprobs,
             std::shared_ptr<Flight> ch, const util::Clock& clock,
             std::shared_ptr<GatewayMetrics> metrics, ChoiceContext ctx)
      : index_(index),
        params_(params),
        sampler_(params),
        tok_(tok),
        detok_(tok),
        user_stops_(stops.begin(), stops.begin() + static_cast<std::ptrdiff_t>(n_user_stops)),
        stop_(std::move(stops)),
        top_logprobs_(top_logprobs),
        ch_(std::move(ch)),
        clock_(clock),
        metrics_(std::move(metrics)),
        ctx_(std::move(ctx)),
        start_(clock.Now()) {}

  // The RT-Switcher's policy in force now is this choice's to the end.
  int32_t OnAdmit() override {
    admitted_ = clock_.Now();
    if (ctx_.rt == nullptr) {
      traced_ = true;
      return 0;
    }
    RtControl::Admission a = ctx_.rt->Admit();
    policy_ = a.policy;
    traced_ = a.traced;
    const sampling::SamplingParams p = sampling::ApplyTier(params_, policy_->sampling_tier);
    const bool simpler = p.top_k != params_.top_k || p.typical_p != params_.typical_p ||
                         p.target_entropy != params_.target_entropy ||
                         p.mirostat != params_.mirostat;
    const bool shorter = policy_->max_tokens_cap > 0 && policy_->max_tokens_cap < ctx_.max_tokens;
    // The answer is then not what the L1 key describes: serve it, don't store it.
    if (simpler || shorter) ch_->DoNotStore();
    if (simpler) sampler_ = sampling::Sampler(p);
    return policy_->max_tokens_cap;
  }

  util::StatusOr<int32_t> Choose(std::span<const float> logits) override {
    STRATA_ASSIGN_OR_RETURN(int32_t token, sampler_.Sample(logits));
    if (top_logprobs_ >= 0) pending_lp_ = Logprobs(logits, token);
    return token;
  }

  bool OnToken(int32_t token) override {
    const auto now = clock_.Now();
    if (n_tokens_++ == 0) {
      first_ = now;
      metrics_->ttft.Observe(util::SecondsBetween(start_, now));
      if (ctx_.rt != nullptr) ctx_.rt->ObserveTtft(now - start_);
    }
    Event e;
    e.index = index_;
    e.text = stop_.Push(detok_.Push(token));
    if (top_logprobs_ >= 0 && !tok_.IsEog(token) && pending_lp_) {
      e.logprobs.push_back(std::move(*pending_lp_));
    }
    pending_lp_.reset();
    if (!e.text.empty() || !e.logprobs.empty()) ch_->Push(std::move(e));
    return !stop_.stopped();
  }

  void OnFinish(FinishReason reason, const util::Status& status, const Usage& usage) override {
    Event tail;
    tail.index = index_;
    tail.text = stop_.Push(detok_.Finish());
    tail.text += stop_.Finish();
    if (!tail.text.empty()) ch_->Push(std::move(tail));
    const auto now = clock_.Now();
    metrics_->e2e.Observe(util::SecondsBetween(start_, now));
    if (n_tokens_ > 1) {
      metrics_->tpot.Observe(util::SecondsBetween(first_, now) /
                             static_cast<double>(n_tokens_ - 1));
      if (ctx_.rt != nullptr) ctx_.rt->ObserveTpot((now - first_) / (n_tokens_ - 1));
    }
    if (traced_) Trace(now, usage);
    Event e;
    e.kind = Event::Kind::kFinish;
    e.index = index_;
    e.status = status;
    e.usage = usage;
    // The engine ends the turn or stops on our matcher; which string matched
    // is ours to say (FinishReason).
    if (!status.ok() || reason == FinishReason::kCancelled) {
      e.finish = FinishReason::kCancelled;
    } else if (reason == FinishReason::kLength) {
      e.finish = FinishReason::kLength;
    } else if (stop_.stopped() && std::find(user_stops_.begin(), user_stops_.end(),
                                            stop_.matched()) != user_stops_.end()) {
      e.finish = FinishReason::kStopString;
      e.stop_sequence = stop_.matched();
    } else {
      e.finish = FinishReason::kEndOfTurn;
    }
    metrics_->generated_tokens.Inc(usage.completion_tokens);
    metrics_->finished.With({std::string(ReasonLabel(e.finish))}).Inc();
    ch_->Push(std::move(e));
  }

 private:
  // The choice's timing line (queue wait, prefill, decode, TTFT) and the terms it ran on.
  void Trace(std::chrono::steady_clock::time_point end, const Usage& usage) {
    metrics_->traced.Inc();
    if (ctx_.log == nullptr) return;
    auto ms = [](auto a, auto b) {
      return fmt::format("{:.1f}", util::SecondsBetween(a, b) * 1e3);
    };
    const bool admitted = admitted_ != std::chrono::steady_clock::time_point{};
    const std::string terms =
        policy_ == nullptr
            ? std::string()
            : fmt::format(" rt_level={} sampling={} max_tokens_cap={}", policy_->level,
                          sampling::SamplingTierName(policy_->sampling_tier),
                          policy_->max_tokens_cap);
    ctx_.log->Info(
        "[{}] trace choice={} queue_wait_ms={} prefill_ms={} decode_ms={} ttft_ms={} total_ms={} "
        "prompt_tokens={} cached_tokens={} completion_tokens={} preemptions={} max_tokens={}{}{}",
        ctx_.request_id, index_, admitted ? ms(start_, admitted_) : "-",
        admitted && n_tokens_ > 0 ? ms(admitted_, first_) : "-",
        n_tokens_ > 0 ? ms(first_, end) : "-", n_tokens_ > 0 ? ms(start_, first_) : "-",
        ms(start_, end), usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens,
        usage.preemptions, ctx_.max_tokens, terms,
        ctx_.session_id.empty() ? std::string() : " session=" + ctx_.session_id);
  }

  TokenLogprob Logprobs(std::span<const float> logits, int32_t token) const {
    double mx = -INFINITY;
    for (float l : logits) mx = std::max(mx, static_cast<double>(l));
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
    const double lse = mx + std::log(sum);
    auto describe = [&](int32_t id) {
      const std::string_view piece = tok_.Piece(id, /*render_special=*/true);
      return util::SanitizeUtf8(piece);
    };
    TokenLogprob lp;
    const std::string_view piece = tok_.Piece(token, true);
    lp.text = util::SanitizeUtf8(piece);
    lp.bytes.assign(piece.begin(), piece.end());
    lp.logprob = static_cast<float>(logits[static_cast<size_t>(token)] - lse);
    if (top_logprobs_ > 0) {
      std::vector<int32_t> ids(logits.size());
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
      const size_t k = std::min(ids.size(), static_cast<size_t>(top_logprobs_));
      std::partial_sort(
          ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
          [&](int32_t a, int32_t b) {
            return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
                   (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
          });
      for (size_t i = 0; i < k; ++i) {
        lp.top.emplace_back(describe(ids[i]),
                            static_cast<float>(logits[static_cast<size_t>(ids[i])] - lse));
      }
    }
    return lp;
  }

  const int32_t index_;
  const sampling::SamplingParams params_;  // as the request asked
  sampling::Sampler sampler_;              // params_, or their RT-Switcher tier from OnAdmit
  const text::Tokenizer& tok_;
  text::Detokenizer detok_;
  const std::vector<std::string> user_stops_;  // the request's own stop strings
  StopMatcher stop_;
  const int32_t top_logprobs_;
  std::shared_ptr<Flight> ch_;
  const util::Clock& clock_;
  std::shared_ptr<GatewayMetrics> metrics_;
  const ChoiceContext ctx_;
  const std::chrono::steady_clock::time_point start_;  // submitted
  std::chrono::steady_clock::time_point admitted_{};   // first got a sequence
  std::shared_ptr<const gateway::Policy> policy_;      // taken at admission (RT-Switcher on)
  bool traced_ = false;
  std::chrono::steady_clock::time_point first_;
  int32_t n_tokens_ = 0;
  std::optional<TokenLogprob> pending_lp_;
};

}  // namespace

util::StatusOr<EmbeddingResult> Gateway::Embed(const EmbeddingRequest& r,
                                               std::chrono::steady_clock::time_point deadline) {
  const text::Tokenizer& tok = model_.tokenizer();
  std::vector<std::vector<int32_t>> inputs;
  for (const auto& t : r.texts) inputs.push_back(tok.Encode(t, {.add_special = true}));
  for (const auto& ids : r.token_ids) inputs.push_back(ids);
  if (inputs.empty()) return util::InvalidFieldError("input", "'input' must not be empty");
  if (static_cast<int32_t>(inputs.size()) > options_.max_embedding_inputs) {
    return util::InvalidFieldError(
        "input", fmt::format("'input' has {} items; at most {} are allowed", inputs.size(),
                             options_.max_embedding_inputs));
  }
  EmbeddingResult out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) {
      return util::InvalidFieldError(fmt::format("input[{}]", i),
                                     fmt::format("'input[{}]' is empty", i));
    }
    if (static_cast<int32_t>(inputs[i].size()) > n_ctx_) {
      return util::OutOfRangeError(fmt::format("context length exceeded: input[{}] has {} tokens "
                                               "and the model's context is {}",
                                               i, inputs[i].size(), n_ctx_))
          .WithReason(util::ErrorReason::kContextLengthExceeded);
    }
    for (int32_t id : inputs[i]) {
      if (!tok.IsValid(id)) {
        return util::InvalidFieldError(
            fmt::format("input[{}]", i),
            fmt::format("'input[{}]' holds token id {} outside the vocabulary", i, id));
      }
    }
    out.prompt_tokens += static_cast<int32_t>(inputs[i].size());
  }
  auto batch = std::make_shared<EmbeddingBatch>(inputs.size());
  std::vector<engine::RequestId> ids;
  auto cancel_all = [&] {
    for (engine::RequestId id : ids) scheduler_.Cancel(id);
  };
  // The inputs go in as the scheduler has room: a request of more inputs
  // than its running and queued slots waits for its own earlier inputs to
  // finish rather than failing with queue_full; a queue full of other
  // requests' work still refuses it.
  for (size_t i = 0; i < inputs.size();) {
    engine::SchedulerRequest sr;
    sr.prompt = inputs[i];
    sr.embed = true;
    sr.sink = std::make_shared<EmbeddingSink>(batch, i);
    if (options_.prefix_cache) sr.cache_namespace = CacheNamespace(r.tenant);
    auto id = scheduler_.Submit(std::move(sr));
    if (id.ok()) {
      ids.push_back(*id);
      ++i;
      continue;
    }
    const size_t done = batch->finished();
    if (id.status().reason() != util::ErrorReason::kQueueFull || done == i) {
      cancel_all();
      return id.status();
    }
    if (!batch->WaitFinished(done + 1, deadline)) {
      cancel_all();
      return util::DeadlineExceededError("the embeddings were not ready before the deadline")
          .WithReason(util::ErrorReason::kTimeout);
    }
    if (util::Status failed = batch->status(); !failed.ok()) {
      cancel_all();
      return failed;
    }
  }
  metrics_->prompt_tokens.Inc(out.prompt_tokens);
  if (!batch->Wait(deadline)) {
    for (engine::RequestId id : ids) scheduler_.Cancel(id);
    return util::DeadlineExceededError("the embeddings were not ready before the deadline");
  }
  STRATA_RETURN_IF_ERROR(batch->status());
  out.embeddings = batch->Take();
  log_.Debug("[{}] tenant={} embedded {} inputs, {} tokens", r.request_id, r.tenant,
             out.embeddings.size(), out.prompt_tokens);
  return out;
}

util::StatusOr<std::unique_ptr<Gateway>> Gateway::Create(
    const model::Model& model, engine::Scheduler& scheduler, obs::MetricsRegistry& metrics,
    const GatewayOptions& options, const util::Clock& clock, util::Logger& log) {
  if (options.max_tokens_cap < 1 || options.max_choices < 1 || options.max_choices > 128 ||
      options.max_top_logprobs < 0 || options.max_top_logprobs > 20 ||
      options.max_stop_strings < 0 || options.max_stop_strings > 64) {
    return InvalidArgumentError("gateway options out of range");
  }
  const int32_t n_ctx = scheduler.n_ctx();
  std::unique_ptr<Gateway> g(new Gateway(model, scheduler, options, clock, log, n_ctx));
  g->metrics_ = std::make_shared<GatewayMetrics>(metrics);
  g->tier_ = std::make_shared<ResponseTier>();
  g->tier_->coalesce = options.coalesce;
  g->tier_->coalesced = &g->metrics_->cache_coalesced;
  if (options.l1.max_bytes > 0) {
    g->tier_->observer = std::make_unique<TierMetrics>(*g->metrics_, "l1");
    STRATA_ASSIGN_OR_RETURN(
        g->tier_->l1, cache::ResponseCache::Create(options.l1, clock, util::Rng(options.l1_seed),
                                                   g->tier_->observer.get()));
  }
  if (options.l3_mode != L3Mode::kOff) {
    g->tier_->l3_observer = std::make_unique<TierMetrics>(*g->metrics_, "l3");
    STRATA_ASSIGN_OR_RETURN(
        g->tier_->l3, cache::NearDupIndex::Create(options.l3, clock, util::Rng(options.l3_seed),
                                                  g->tier_->l3_observer.get()));
  }
  if (options.shared && (g->tier_->l1 || g->tier_->l3)) {
    cache::SharedStoreOptions so = *options.shared;
    so.near_dup.bands = options.l3.bands;
    so.near_dup.probe_radius = options.l3.probe_radius;
    so.near_dup.max_candidates = options.l3.max_candidates;
    so.near_dup.min_similarity = options.l3.min_similarity;
    so.near_dup.similarity = options.l3.similarity;
    g->tier_->codec = std::make_unique<StoredResponseCodec>();
    STRATA_ASSIGN_OR_RETURN(
        g->tier_->shared,
        cache::SharedStore::Create(so, *g->tier_->codec, clock,
                                   util::Rng(options.l1_seed ^ 0x5348'5244ULL), log));
    for (int t = 0; t < 2; ++t) {
      const std::string label = t == 0 ? "l1" : "l3";
      g->tier_->remote_hits[t] = &g->metrics_->remote_hits.With({label});
      g->tier_->remote_misses[t] = &g->metrics_->remote_misses.With({label});
    }
    // Read at render time; a weak pointer, so the registry never keeps the
    // store (and its thread) alive.
    std::weak_ptr<ResponseTier> weak = g->tier_;
    auto read = [weak](auto field) {
      return [weak, field]() -> double {
        const auto tier = weak.lock();
        return tier && tier->shared ? static_cast<double>(field(tier->shared->stats())) : 0.0;
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
  // Live engine state, read at render time. The scheduler must outlive any
  // render of `metrics` (the server stops serving /metrics before it goes).
  engine::Scheduler* s = &scheduler;
  metrics.GaugeCallback("strata_queue_depth", "Requests waiting for a sequence slot.",
                        [s] { return static_cast<double>(s->Stats().waiting); });
  metrics.GaugeCallback("strata_running_sequences", "Requests prefilling or decoding.",
                        [s] { return static_cast<double>(s->Stats().running); });
  metrics.GaugeCallback("strata_kv_blocks_used", "KV cache blocks in use.",
                        [s] { return static_cast<double>(s->Stats().kv_blocks_used); });
  metrics.GaugeCallback("strata_kv_blocks_free", "KV cache blocks free.", [s] {
    const auto st = s->Stats();
    return static_cast<double>(st.kv_blocks_total - st.kv_blocks_used);
  });
  metrics.CounterCallback("strata_preemptions_total", "Sequences preempted to free KV blocks.",
                          [s] { return static_cast<double>(s->Stats().preemptions); });
  metrics.CounterCallback("strata_engine_steps_total", "Forward passes run by the scheduler.",
                          [s] { return static_cast<double>(s->Stats().steps); });
  const auto tpl = model.gguf().GetStringOr("tokenizer.chat_template", "");
  const int32_t eos = model.tokenizer().eos();
  const std::string eos_text = eos >= 0 ? std::string(model.tokenizer().TokenText(eos)) : "</s>";
  g->style_ = text::DetectChatStyle(tpl.ok() ? *tpl : "", eos_text);
  if (options.chat_format) g->style_.format = *options.chat_format;
  log.Info("chat format: {}{}", text::ChatFormatName(g->style_.format),
           options.chat_format         ? " (set by option)"
           : tpl.ok() && !tpl->empty() ? " (from the model's template)"
                                       : " (the model has no template)");
  return g;
}

Gateway::Gateway(const model::Model& model, engine::Scheduler& scheduler,
                 const GatewayOptions& options, const util::Clock& clock, util::Logger& log,
                 int32_t n_ctx)
    : model_(model),
      scheduler_(scheduler),
      options_(options),
      clock_(clock),
      log_(log),
      n_ctx_(n_ctx) {}

Gateway::~Gateway() = default;

uint64_t Gateway::CacheNamespace(const std::string& tenant) const {
  util::Hasher h(0x7374726174614e53ULL);  // "strataNS"
  h.UpdatePod(model_.fingerprint());
  h.Update(tenant);
  const uint64_t v = h.Digest();
  return v == 0 ? 1 : v;
}

util::Status Gateway::Validate(const CompletionRequest& r) const {
  if (!r.prompt && r.messages.empty()) {
    return util::InvalidFieldError("messages", "messages must not be empty");
  }
  if (r.n < 1 || r.n > options_.max_choices) {
    return util::InvalidFieldError(
        "n", fmt::format("n {} is outside [1, {}]", r.n, options_.max_choices));
  }
  if (r.max_tokens && (*r.max_tokens < 1 || *r.max_tokens > options_.max_tokens_cap)) {
    return util::InvalidFieldError(
        "max_tokens",
        fmt::format("max_tokens {} is outside [1, {}]", *r.max_tokens, options_.max_tokens_cap));
  }
  if (static_cast<int32_t>(r.stop.size()) > options_.max_stop_strings) {
    return util::InvalidFieldError(
        "stop", fmt::format("stop has {} strings; at most {} are allowed", r.stop.size(),
                            options_.max_stop_strings));
  }
  for (size_t i = 0; i < r.stop.size(); ++i) {
    if (r.stop[i].empty() || static_cast<int32_t>(r.stop[i].size()) > options_.max_stop_length) {
      return util::InvalidFieldError(
          fmt::format("stop[{}]", i),
          fmt::format("stop[{}] must have 1 to {} bytes", i, options_.max_stop_length));
    }
  }
  if (r.top_logprobs > options_.max_top_logprobs) {
    return util::InvalidFieldError("top_logprobs",
                                   fmt::format("top_logprobs {} is outside [0, {}]", r.top_logprobs,
                                               options_.max_top_logprobs));
  }
  return sampling::Validate(r.sampling);
}

util::StatusOr<std::vector<int32_t>> Gateway::Tokenize(const CompletionRequest& r) const {
  const text::Tokenizer& tok = model_.tokenizer();
  if (r.prompt) {
    return tok.Encode(*r.prompt,
                      {.add_special = true, .parse_special = options_.prompt_special_tokens});
  }
  STRATA_ASSIGN_OR_RETURN(auto segments, text::RenderChat(style_, r.messages, true));
  std::vector<text::TextSegment> parts;
  parts.reserve(segments.size());
  for (const auto& s : segments) parts.push_back({s.text, s.special});
  return tok.EncodeSegments(parts, /*add_special=*/true);
}

util::StatusOr<std::unique_ptr<Generation>> Gateway::Start(const CompletionRequest& r) {
  STRATA_RETURN_IF_ERROR(Validate(r));
  STRATA_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, Tokenize(r));
  const int32_t n_prompt = static_cast<int32_t>(tokens.size());
  if (n_prompt == 0) return InvalidArgumentError("the prompt is empty");
  if (n_prompt >= n_ctx_) {
    return util::OutOfRangeError(fmt::format("context length exceeded: the prompt has {} tokens "
                                             "and the model's context is {}",
                                             n_prompt, n_ctx_))
        .WithReason(util::ErrorReason::kContextLengthExceeded);
  }
  const int32_t room = n_ctx_ - n_prompt;
  int32_t max_tokens = std::min(room, options_.max_tokens_cap);
  if (r.max_tokens) {
    if (*r.max_tokens > room) {
      return util::OutOfRangeError(fmt::format("context length exceeded: {} prompt tokens + "
                                               "max_tokens {} > the context of {}",
                                               n_prompt, *r.max_tokens, n_ctx_))
          .WithReason(util::ErrorReason::kContextLengthExceeded);
    }
    max_tokens = *r.max_tokens;
  }
  std::vector<std::string> stops = r.stop;
  if (!r.prompt) {
    for (auto& s : text::TurnEndStrings(style_)) stops.push_back(std::move(s));
  }
  metrics_->prompt_tokens.Inc(n_prompt);

  // Only deterministic requests are cached or coalesced: greedy, or sampled
  // with a seed the client chose (choice i then uses seed + i, below).
  const bool deterministic = r.sampling.temperature == 0.0f || r.fixed_seed;
  const bool use_l1 = r.response_cache && deterministic && tier_->l1 != nullptr;
  const bool use_coalesce = r.response_cache && deterministic && tier_->coalesce;
  // L3 needs a text with words to compare; the same rule as L1 otherwise.
  std::shared_ptr<const NearDupRequest> near;
  if (deterministic && L3Allowed(r)) {
    if (auto n = MakeNearDupRequest(r, model_.fingerprint(), stops, options_.l3.prepare)) {
      near = std::make_shared<const NearDupRequest>(std::move(*n));
    }
  }
  if (!use_l1 && !use_coalesce && !near) {
    auto flight = std::make_shared<Flight>(r.n, std::nullopt, clock_.Now(), Flight::Hook());
    STRATA_RETURN_IF_ERROR(Submit(r, tokens, max_tokens, stops, flight));
    log_.Debug("[{}] tenant={} prompt_tokens={} n={} max_tokens={}", r.request_id, r.tenant,
               n_prompt, r.n, max_tokens);
    return std::unique_ptr<Generation>(
        new FlightGeneration(scheduler_, flight, nullptr, n_prompt, CacheOutcome::kMiss));
  }

  cache::CacheKey key = ResponseKey(r, tokens, max_tokens, stops);
  bool refresh = false;  // L1 chose this request to regenerate an entry near expiry
  std::unique_ptr<Generation> cached = FindCached(r, key, near.get(), use_l1, n_prompt, &refresh);
  if (cached) return cached;
  const Flight::Hook on_complete = StoreHook(r, n_prompt, use_l1, near);
  std::shared_ptr<const cache::CachedValue> stored_meanwhile;
  auto make_flight = [&]() -> std::shared_ptr<Flight> {
    // Under the single-flight lock: an identical request may have finished
    // (and stored its answer) since the lookup above.
    if (use_l1 && !refresh) {
      stored_meanwhile = tier_->l1->Peek(key);
      if (stored_meanwhile) return nullptr;
    }
    return std::make_shared<Flight>(r.n, key, clock_.Now(), on_complete);
  };
  std::shared_ptr<Flight> flight;
  bool registered = false;
  if (use_coalesce) {
    auto joined = tier_->flights.Join(key, make_flight);
    if (joined.role == cache::SingleFlight<Flight>::Role::kNone) {
      return std::unique_ptr<Generation>(
          new ReplayGeneration(std::static_pointer_cast<const StoredResponse>(stored_meanwhile)));
    }
    if (joined.role == cache::SingleFlight<Flight>::Role::kFollower) {
      tier_->coalesced->Inc();
      log_.Debug("[{}] tenant={} coalesced with an identical request in flight", r.request_id,
                 r.tenant);
      return std::unique_ptr<Generation>(new FlightGeneration(scheduler_, joined.flight, tier_,
                                                              n_prompt, CacheOutcome::kCoalesced));
    }
    flight = std::move(joined.flight);
    registered = true;
  } else {
    flight = std::make_shared<Flight>(r.n, key, clock_.Now(), on_complete);
  }
  if (util::Status st = Submit(r, tokens, max_tokens, stops, flight); !st.ok()) {
    flight->Fail(st);  // followers that joined meanwhile get this error
    if (registered) tier_->flights.Leave(flight->key(), flight.get());
    return st;
  }
  log_.Debug("[{}] tenant={} prompt_tokens={} n={} max_tokens={}{}", r.request_id, r.tenant,
             n_prompt, r.n, max_tokens, refresh ? " (L1 early refresh)" : "");
  return std::unique_ptr<Generation>(new FlightGeneration(
      scheduler_, flight, registered ? tier_ : nullptr, n_prompt, CacheOutcome::kMiss));
}

util::Status Gateway::Submit(const CompletionRequest& r, const std::vector<int32_t>& tokens,
                             int32_t max_tokens, const std::vector<std::string>& stops,
                             const std::shared_ptr<Flight>& flight) {
  // A request without a seed gets a fresh one (when the server gives a seed
  // stream): the same prompt must not sample the same text every time.
  uint64_t base = r.sampling.seed;
  if (!r.fixed_seed && options_.unseeded_seed_base) {
    uint64_t x =
        *options_.unseeded_seed_base + unseeded_count_.fetch_add(1, std::memory_order_relaxed);
    base = util::Rng::SplitMix64(x);
  }
  for (int32_t i = 0; i < r.n; ++i) {
    sampling::SamplingParams p = r.sampling;
    p.seed = base + static_cast<uint64_t>(i);  // distinct choices, reproducible
    auto sink = std::make_shared<ChoiceSink>(i, p, model_.tokenizer(), stops, r.stop.size(),
                                             r.top_logprobs, flight, clock_, metrics_,
                                             ChoiceContext{.request_id = r.request_id,
                                                           .session_id = r.session_id,
                                                           .max_tokens = max_tokens,
                                                           .rt = options_.rt_control,
                                                           .log = &log_});
    engine::SchedulerRequest sr;
    sr.prompt = tokens;
    sr.max_tokens = max_tokens;
    sr.stop_at_eog = !r.ignore_eos;
    sr.sink = std::move(sink);
    if (options_.prefix_cache && r.prefix_cache) sr.cache_namespace = CacheNamespace(r.tenant);
    auto id = scheduler_.Submit(std::move(sr));
    if (!id.ok()) {
      flight->CancelEngine(scheduler_);
      return id.status();
    }
    flight->AddRequest(*id);
  }
  return util::OkStatus();
}

}  // namespace strata::gateway
