#include "gateway/gateway.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "gateway/internal/flight.h"
#include "gateway/internal/response_tiers.h"
#include "gateway/rt_control.h"
#include "sampling/tiers.h"
#include "util/hash.h"

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
    case CacheOutcome::kSemantic:
      return "semantic";
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

GatewayLiveOptions LiveOptionsOf(const GatewayOptions& o) {
  return {.max_tokens_cap = o.max_tokens_cap,
          .coalesce = o.coalesce,
          .l1_ttl = o.l1.ttl,
          .l1_ttl_jitter = o.l1.ttl_jitter,
          .l3_mode = o.l3_mode,
          .l3_tenants = o.l3_tenants,
          .l3_ttl = o.l3.ttl,
          .l3_min_similarity = o.l3.min_similarity,
          .semantic_mode = o.semantic_mode,
          .semantic_tenants = o.semantic_tenants,
          .semantic_min_similarity = o.semantic.min_similarity,
          .admission = o.l1.admission.enabled || o.l3.admission.enabled,
          .rt_fallback_model = o.rt_fallback_model};
}

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
        traced(reg.Counter("strata_traced_choices_total",
                           "Generated choices that logged their timing line (trace sampling).")
                   .With({})) {}
  obs::HistogramValue& ttft;
  obs::HistogramValue& tpot;
  obs::HistogramValue& e2e;
  obs::CounterValue& prompt_tokens;
  obs::CounterValue& generated_tokens;
  obs::Family<obs::CounterValue>& finished;
  obs::CounterValue& traced;
};

// The RT-Switcher as the backends see it: the policy in force when a choice
// starts becomes its terms.
class RtGovernor final : public backend::Governor {
 public:
  explicit RtGovernor(RtControl& rt) : rt_(rt) {}
  Terms Admit() override {
    RtControl::Admission a = rt_.Admit();
    return Terms{.sampling_tier = a.policy->sampling_tier,
                 .max_tokens_cap = a.policy->max_tokens_cap,
                 .traced = a.traced,
                 .describe = fmt::format(
                     " rt_level={} sampling={} max_tokens_cap={}", a.policy->level,
                     sampling::SamplingTierName(a.policy->sampling_tier), a.policy->max_tokens_cap),
                 .level = a.policy->level};
  }
  void ObserveTtft(std::chrono::nanoseconds ttft) override { rt_.ObserveTtft(ttft); }
  void ObserveTpot(std::chrono::nanoseconds tpot) override { rt_.ObserveTpot(tpot); }

 private:
  RtControl& rt_;
};

namespace {

// A run's events on their way into its flight: each finished choice is
// counted in the latency and token metrics and, when traced, logs its timing
// line. Runs on the backend's threads.
class ReportingSink final : public backend::Sink {
 public:
  ReportingSink(std::shared_ptr<Flight> flight, std::shared_ptr<GatewayMetrics> metrics,
                util::Logger& log, std::string request_id, std::string session_id,
                int32_t max_tokens, bool prompt_from_usage)
      : flight_(std::move(flight)),
        metrics_(std::move(metrics)),
        log_(log),
        request_id_(std::move(request_id)),
        session_id_(std::move(session_id)),
        max_tokens_(max_tokens),
        prompt_from_usage_(prompt_from_usage) {}

  void Push(Event&& e) override {
    if (e.kind == Event::Kind::kFinish) Report(e);
    flight_->Push(std::move(e));
  }
  void PushAll(std::vector<Event>&& events) override {
    for (const Event& e : events) {
      if (e.kind == Event::Kind::kFinish) Report(e);
    }
    flight_->PushAll(std::move(events));
  }
  void DoNotStore() override { flight_->DoNotStore(); }
  void OnFirstToken(std::chrono::nanoseconds ttft) override {
    metrics_->ttft.Observe(std::chrono::duration<double>(ttft).count());
  }

 private:
  void Report(const Event& e) {
    using TimePoint = std::chrono::steady_clock::time_point;
    const backend::Timing& t = e.timing;
    const bool first = t.first_token != TimePoint{};
    if (t.finished != TimePoint{}) {
      metrics_->e2e.Observe(util::SecondsBetween(t.submitted, t.finished));
      if (first && t.tokens > 1) {
        metrics_->tpot.Observe(util::SecondsBetween(t.first_token, t.finished) /
                               static_cast<double>(t.tokens - 1));
      }
    }
    metrics_->generated_tokens.Inc(e.usage.completion_tokens);
    // A remote prompt's size is known from the upstream's usage (once per request).
    if (prompt_from_usage_ && e.index == 0) metrics_->prompt_tokens.Inc(e.usage.prompt_tokens);
    metrics_->finished.With({std::string(backend::FinishReasonLabel(e.finish))}).Inc();
    if (e.traced) Trace(e);
  }

  // The choice's timing line (queue wait, prefill, decode, TTFT) and the terms it ran on.
  void Trace(const Event& e) {
    metrics_->traced.Inc();
    if (!log_.Enabled(util::LogLevel::kInfo)) return;  // the line's numbers are costly to format
    using TimePoint = std::chrono::steady_clock::time_point;
    const backend::Timing& t = e.timing;
    auto ms = [](auto a, auto b) {
      return fmt::format("{:.1f}", util::SecondsBetween(a, b) * 1e3);
    };
    const bool admitted = t.admitted != TimePoint{};
    const bool first = t.first_token != TimePoint{};
    const TimePoint end = t.finished != TimePoint{} ? t.finished : t.submitted;
    log_.Info(
        "[{}] trace choice={} queue_wait_ms={} prefill_ms={} decode_ms={} ttft_ms={} total_ms={} "
        "prompt_tokens={} cached_tokens={} completion_tokens={} preemptions={} max_tokens={}{}{}{}",
        request_id_, e.index, admitted ? ms(t.submitted, t.admitted) : "-",
        admitted && first ? ms(t.admitted, t.first_token) : "-",
        first ? ms(t.first_token, end) : "-", first ? ms(t.submitted, t.first_token) : "-",
        ms(t.submitted, end), e.usage.prompt_tokens, e.usage.cached_tokens,
        e.usage.completion_tokens, e.usage.preemptions, max_tokens_, e.terms,
        e.usage.max_tokens_cut > 0 ? fmt::format(" kv_pressure_cut={}", e.usage.max_tokens_cut)
                                   : std::string(),
        session_id_.empty() ? std::string() : " session=" + session_id_);
  }

  const std::shared_ptr<Flight> flight_;
  const std::shared_ptr<GatewayMetrics> metrics_;
  util::Logger& log_;
  const std::string request_id_;
  const std::string session_id_;
  const int32_t max_tokens_;
  const bool prompt_from_usage_;  // Prepare did not know the prompt's size
};

}  // namespace

util::StatusOr<std::unique_ptr<Gateway>> Gateway::Create(
    const model::Model& model, engine::Scheduler& scheduler, obs::MetricsRegistry& metrics,
    const GatewayOptions& options, const util::Clock& clock, util::Logger& log) {
  STRATA_ASSIGN_OR_RETURN(auto local, backend::LocalBackend::Create(
                                          model, scheduler,
                                          {.name = options.model_name,
                                           .max_tokens_cap = options.max_tokens_cap,
                                           .max_embedding_inputs = options.max_embedding_inputs,
                                           .prompt_special_tokens = options.prompt_special_tokens,
                                           .prefix_cache = options.prefix_cache,
                                           .chat_format = options.chat_format,
                                           .unseeded_seed_base = options.unseeded_seed_base},
                                          metrics, clock, log));
  STRATA_ASSIGN_OR_RETURN(auto g, Create({local.get()}, metrics, options, clock, log));
  g->owned_local_ = std::move(local);
  return g;
}

util::StatusOr<std::unique_ptr<Gateway>> Gateway::Create(std::vector<backend::Backend*> backends,
                                                         obs::MetricsRegistry& metrics,
                                                         const GatewayOptions& options,
                                                         const util::Clock& clock,
                                                         util::Logger& log) {
  if (options.max_tokens_cap < 1 || options.max_choices < 1 || options.max_choices > 128 ||
      options.max_top_logprobs < 0 || options.max_top_logprobs > 20 ||
      options.max_stop_strings < 0 || options.max_stop_strings > 64) {
    return InvalidArgumentError("gateway options out of range");
  }
  if (backends.empty()) return InvalidArgumentError("the gateway needs at least one backend");
  for (size_t i = 0; i < backends.size(); ++i) {
    if (backends[i] == nullptr) return InvalidArgumentError("a backend is null");
    for (size_t j = 0; j < i; ++j) {
      if (backends[j]->name() == backends[i]->name()) {
        return InvalidArgumentError(fmt::format(
            "two backends are named '{}': each model id must be distinct", backends[i]->name()));
      }
    }
  }
  std::unique_ptr<Gateway> g(new Gateway(std::move(backends), options, log));
  g->metrics_ = std::make_shared<GatewayMetrics>(metrics);
  if (options.rt_control != nullptr) {
    g->governor_ = std::make_unique<RtGovernor>(*options.rt_control);
  }
  if (!options.rt_fallback_model.empty() && g->Find(options.rt_fallback_model) == nullptr) {
    return InvalidArgumentError(fmt::format("the RT-Switcher's fallback model '{}' is not served",
                                            options.rt_fallback_model));
  }
  g->fallbacks_ = &metrics
                       .Counter("strata_rt_fallback_total",
                                "Requests the RT-Switcher sent to the fallback model instead of "
                                "the one they named.")
                       .With({});
  STRATA_ASSIGN_OR_RETURN(g->tiers_, ResponseTiers::Create(options, metrics, clock, log));
  g->clock_ = &clock;
  auto policies = std::make_shared<LivePolicies>();
  policies->current = std::make_shared<const GatewayLiveOptions>(LiveOptionsOf(options));
  g->live_.store(std::move(policies));
  auto& policy_requests = metrics.Counter(
      "strata_policy_requests_total",
      "Requests by the live options they started on: current, or previous while a policy "
      "migration ramps (Gateway::Reconfigure with a ramp).",
      {"policy"});
  g->policy_requests_[0] = &policy_requests.With({"current"});
  g->policy_requests_[1] = &policy_requests.With({"previous"});
  metrics.GaugeCallback("strata_policy_ramp_progress",
                        "Share of new requests on the newest live options (1 when no policy "
                        "migration ramps).",
                        [gw = g.get()] { return gw->policy_ramp_progress(); });
  auto& invalidated = metrics.Counter(
      "strata_cache_invalidated_total",
      "Entries removed by invalidations (DELETE /v1/cache, or another instance's), by tier "
      "(l2: prefix blocks; shared: Redis entries).",
      {"tier"});
  const char* tier_names[5] = {"l1", "l3", "semantic", "l2", "shared"};
  for (int i = 0; i < 5; ++i) g->invalidated_[i] = &invalidated.With({tier_names[i]});
  g->invalidation_requests_ =
      &metrics
           .Counter("strata_cache_invalidations_total",
                    "Invalidations applied (this instance's and those other instances announced).")
           .With({});
  // Other instances' invalidations; the watcher stops in ~Gateway, before
  // anything it uses goes.
  if (cache::SharedFeed* feed = g->tiers_->feed()) {
    Gateway* raw = g.get();
    feed->Listen([raw](std::string_view message) { raw->ApplyRemoteInvalidation(message); });
  }
  // Other instances' semantic entries: what Redis holds now, then each new
  // one as its key comes on the stream.
  if (cache::SharedFeed* feed = g->tiers_->semantic_feed()) {
    ResponseTiers* tiers = g->tiers_.get();
    std::vector<uint64_t> models;
    for (const backend::Backend* b : g->backends_) models.push_back(b->fingerprint());
    feed->Listen([tiers](std::string_view key) { tiers->AdoptSemantic(key); },
                 std::chrono::milliseconds(250),
                 [tiers, models] { tiers->AdoptStoredSemantic(models); });
  }
  return g;
}

Gateway::Gateway(std::vector<backend::Backend*> backends, const GatewayOptions& options,
                 util::Logger& log)
    : backends_(std::move(backends)), options_(options), log_(log) {}

Gateway::~Gateway() {
  if (tiers_ != nullptr) {
    if (cache::SharedFeed* feed = tiers_->feed()) feed->StopListening();
    if (cache::SharedFeed* feed = tiers_->semantic_feed()) feed->StopListening();
  }
}

const std::string& Gateway::model_name() const { return backends_.front()->name(); }

std::vector<std::string> Gateway::model_names() const {
  std::vector<std::string> names;
  for (const backend::Backend* b : backends_) names.push_back(b->name());
  return names;
}

backend::Backend* Gateway::Find(std::string_view model) const {
  if (model.empty()) return backends_.front();
  for (backend::Backend* b : backends_) {
    if (b->name() == model) return b;
  }
  return nullptr;
}

int32_t Gateway::n_ctx() const { return backends_.front()->n_ctx(); }

util::StatusOr<std::vector<int32_t>> Gateway::Tokenize(const CompletionRequest& r) const {
  backend::Backend* b = Find(r.model);
  if (b == nullptr) b = backends_.front();
  STRATA_ASSIGN_OR_RETURN(auto prepared, b->Prepare(r));
  if (prepared->tokens.empty()) {
    return util::FailedPreconditionError(
        fmt::format("backend '{}' ({}) does not tokenize locally", b->name(), b->kind()));
  }
  return prepared->tokens;
}

std::optional<cache::ResponseCacheStats> Gateway::l1_stats() const { return tiers_->l1_stats(); }
std::optional<cache::NearDupStats> Gateway::l3_stats() const { return tiers_->l3_stats(); }
std::optional<cache::SemanticStats> Gateway::semantic_stats() const {
  return tiers_->semantic_stats();
}
util::Status Gateway::SaveSemantic(util::FileSystem& fs, const std::string& path) const {
  return tiers_->SaveSemantic(fs, path);
}
util::StatusOr<size_t> Gateway::LoadSemantic(util::FileSystem& fs, const std::string& path) {
  return tiers_->LoadSemantic(fs, path);
}
std::optional<cache::SharedStoreStats> Gateway::shared_stats() const {
  return tiers_->shared_stats();
}
bool Gateway::FlushShared(std::chrono::milliseconds timeout) {
  return tiers_->FlushShared(timeout);
}
bool Gateway::StartIsCpuBound() const {
  // The shared tier's lookups are network round trips; the semantic tier's
  // encoder runs a forward pass (or calls an embeddings API).
  if (tiers_->has_shared() || tiers_->has_semantic()) return false;
  return std::none_of(backends_.begin(), backends_.end(),
                      [](const backend::Backend* b) { return b->may_block(); });
}

util::Status Gateway::Reconfigure(const GatewayLiveOptions& live, std::chrono::milliseconds ramp) {
  if (ramp.count() < 0 || ramp > std::chrono::hours(24)) {
    return InvalidArgumentError(
        fmt::format("policy ramp {} ms is outside [0, 1 day]", ramp.count()));
  }
  if (live.max_tokens_cap < 1 || live.max_tokens_cap > (1 << 24)) {
    return InvalidArgumentError(
        fmt::format("max_tokens_cap {} is outside [1, 16777216]", live.max_tokens_cap));
  }
  if (!live.rt_fallback_model.empty()) {
    if (options_.rt_control == nullptr) {
      return InvalidArgumentError("a fallback model needs the RT-Switcher, which is off");
    }
    if (Find(live.rt_fallback_model) == nullptr) {
      return InvalidArgumentError(fmt::format("the RT-Switcher's fallback model '{}' is not served",
                                              live.rt_fallback_model));
    }
  }
  std::lock_guard<std::mutex> lock(reconfigure_mu_);
  // The tiers check their own values before anything changes.
  STRATA_RETURN_IF_ERROR(tiers_->Reconfigure(live));
  const std::shared_ptr<const LivePolicies> before = live_.load();
  auto next = std::make_shared<LivePolicies>();
  next->current = std::make_shared<const GatewayLiveOptions>(live);
  if (ramp.count() > 0) {
    const auto now = clock_->Now();
    // A ramp still running starts again from what was fully in force.
    const bool ramping = before->previous != nullptr && before->Progress(now) < 1;
    next->previous = ramping ? before->previous : before->current;
    next->ramp_start = now;
    next->ramp = ramp;
    log_.Info("policy migration: new requests move to the new live options over {:.1f} s{}",
              std::chrono::duration<double>(ramp).count(),
              ramping ? " (the ramp before it restarts from the options it began with)" : "");
  }
  live_.store(std::move(next));
  return util::OkStatus();
}

double Gateway::LivePolicies::Progress(std::chrono::steady_clock::time_point now) const {
  if (previous == nullptr || ramp.count() <= 0) return 1;
  const double p =
      std::chrono::duration<double>(now - ramp_start) / std::chrono::duration<double>(ramp);
  return std::clamp(p, 0.0, 1.0);
}

std::shared_ptr<const GatewayLiveOptions> Gateway::LiveFor(const CompletionRequest& r) {
  std::shared_ptr<const LivePolicies> p = live_.load();
  if (p->previous != nullptr) {
    const double progress = p->Progress(clock_->Now());
    if (progress < 1) {
      const uint64_t key = r.session_id.empty()
                               ? util::Hash64(r.request_id, 0x706f6c696379)  // "policy"
                               : util::Hash64(r.session_id, util::Hash64(r.tenant, 0x706f6c696379));
      if (static_cast<double>(key >> 11) * 0x1.0p-53 >= progress) {
        policy_requests_[1]->Inc();
        return p->previous;
      }
    }
  }
  policy_requests_[0]->Inc();
  return p->current;
}

GatewayLiveOptions Gateway::live_options() const { return *live_.load()->current; }

double Gateway::policy_ramp_progress() const { return live_.load()->Progress(clock_->Now()); }

util::Status Gateway::Validate(const CompletionRequest& r, const GatewayLiveOptions& live) const {
  if (!r.completion() && r.messages.empty()) {
    return util::InvalidFieldError("messages", "messages must not be empty");
  }
  if (r.n < 1 || r.n > options_.max_choices) {
    return util::InvalidFieldError(
        "n", fmt::format("n {} is outside [1, {}]", r.n, options_.max_choices));
  }
  if (r.max_tokens && (*r.max_tokens < 1 || *r.max_tokens > live.max_tokens_cap)) {
    return util::InvalidFieldError("max_tokens", fmt::format("max_tokens {} is outside [1, {}]",
                                                             *r.max_tokens, live.max_tokens_cap));
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

util::StatusOr<std::unique_ptr<Generation>> Gateway::Start(const CompletionRequest& r) {
  // This request's options, whatever a reload does while it runs.
  const std::shared_ptr<const GatewayLiveOptions> live = LiveFor(r);
  STRATA_RETURN_IF_ERROR(Validate(r, *live));
  backend::Backend* b = Find(r.model);
  if (b == nullptr) {
    return util::NotFoundError(fmt::format("model '{}' does not exist", r.model))
        .WithReason(util::ErrorReason::kModelNotFound);
  }
  // Under sustained breach the level may send every request to a cheaper
  // model; its answer is that model's (keyed, cached and logged as such).
  if (!live->rt_fallback_model.empty() && options_.rt_control != nullptr &&
      options_.rt_control->RoutesToFallback() && b->name() != live->rt_fallback_model) {
    log_.Debug("[{}] RT-Switcher level {}: '{}' served by the fallback '{}'", r.request_id,
               options_.rt_control->level(), b->name(), live->rt_fallback_model);
    b = Find(live->rt_fallback_model);
    fallbacks_->Inc();
  }
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const backend::Prepared> prepared, b->Prepare(r));
  metrics_->prompt_tokens.Inc(prepared->prompt_tokens);
  ResponseTiers::Admission a = tiers_->Admit(r, *b, *prepared, *live);
  if (a.answer) {
    a.answer->set_provenance({{b, prepared}});
    return std::move(a.answer);
  }
  auto sink = std::make_shared<ReportingSink>(a.flight, metrics_, log_, r.request_id, r.session_id,
                                              prepared->max_tokens, prepared->prompt_tokens == 0);
  auto run = b->Start(r, prepared, std::move(sink), governor_.get());
  if (!run.ok()) {
    tiers_->Abort(a, run.status());
    return run.status();
  }
  a.flight->SetRun(std::move(run).value());
  log_.Debug("[{}] tenant={} backend={} prompt_tokens={} n={} max_tokens={}{}", r.request_id,
             r.tenant, b->name(), prepared->prompt_tokens, r.n, prepared->max_tokens,
             a.refresh ? " (L1 early refresh)" : "");
  auto gen = std::make_unique<FlightGeneration>(a.flight, a.registered ? tiers_ : nullptr,
                                                prepared->prompt_tokens, CacheOutcome::kMiss,
                                                b->defers_stream_head());
  gen->set_provenance({{b, prepared}});
  return std::unique_ptr<Generation>(std::move(gen));
}

util::StatusOr<EmbeddingResult> Gateway::Embed(const EmbeddingRequest& r,
                                               std::chrono::steady_clock::time_point deadline) {
  backend::Backend* b = Find(r.model);
  if (b == nullptr) {
    return util::NotFoundError(fmt::format("model '{}' does not exist", r.model))
        .WithReason(util::ErrorReason::kModelNotFound);
  }
  STRATA_ASSIGN_OR_RETURN(EmbeddingResult out, b->Embed(r, deadline));
  metrics_->prompt_tokens.Inc(out.prompt_tokens);
  return out;
}

}  // namespace strata::gateway
