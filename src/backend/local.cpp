#include "backend/local.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "backend/internal/embedding_inputs.h"
#include "backend/internal/embedding_sink.h"
#include "backend/internal/stored_tokens.h"
#include "backend/stop_matcher.h"
#include "backend/tool_calls.h"
#include "grammar/json_schema.h"
#include "util/hash.h"
#include "util/random.h"
#include "util/utf8.h"

namespace strata::backend {
namespace {

using Clock = std::chrono::steady_clock;

// What Prepare learns beyond the common fields: the grammar every choice's
// text must follow, when one constrains it.
struct LocalPrepared final : Prepared {
  std::shared_ptr<const grammar::GrammarTokenMask> constraint;
};

// The request offers the model tools it may call (a chat whose tool_choice
// is not "none").
bool OffersTools(const Request& r) {
  return !r.tools.empty() && r.tool_choice.mode != ToolChoice::Mode::kNone && !r.completion();
}

// The scheduler requests of one run.
class LocalRun final : public Run {
 public:
  explicit LocalRun(engine::Scheduler& sched) : sched_(sched) {}
  void Add(engine::RequestId id) {
    std::lock_guard<std::mutex> lock(mu_);
    ids_.push_back(id);
  }
  void Cancel() override {
    std::vector<engine::RequestId> ids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ids = ids_;
    }
    for (engine::RequestId id : ids) sched_.Cancel(id);  // no-op for finished ones
  }

 private:
  engine::Scheduler& sched_;
  std::mutex mu_;
  std::vector<engine::RequestId> ids_;  // guarded by mu_
};

// A finished choice's engine phases as spans under the request's root span:
// waiting for a sequence (queue_wait), the prompt up to the first token
// (prefill) and the tokens after it (decode), each with the choice's index
// and, under the RT-Switcher, the level and sampling tier it ran at. A phase
// that did not happen (a choice cancelled while waiting) has no span.
void RecordEnginePhases(obs::RequestTrace& trace, const Event& e, const Governor::Terms& terms) {
  const Timing& t = e.timing;
  const Clock::time_point none{};
  const auto start = [&](const char* name, Clock::time_point from) {
    obs::Span s = trace.StartSpan(name, obs::SpanKind::kInternal, from);
    s.SetInt("strata.choice.index", e.index);
    if (terms.level >= 0) {
      s.SetInt("strata.rt.level", terms.level);
      s.SetString("strata.sampling.tier", sampling::SamplingTierName(terms.sampling_tier));
    }
    return s;
  };
  if (t.submitted != none) {
    obs::Span wait = start("queue_wait", t.submitted);
    wait.End(t.admitted != none ? t.admitted : t.finished);
  }
  if (t.admitted != none) {
    obs::Span prefill = start("prefill", t.admitted);
    prefill.SetInt("gen_ai.usage.input_tokens", e.usage.prompt_tokens);
    prefill.SetInt("strata.usage.cached_tokens", e.usage.cached_tokens);
    if (e.usage.preemptions > 0) prefill.SetInt("strata.preemptions", e.usage.preemptions);
    if (e.usage.max_tokens_cut > 0) {
      prefill.SetInt("strata.max_tokens_cut", e.usage.max_tokens_cut);
    }
    if (!e.status.ok() && t.first_token == none) prefill.SetError(e.status.message());
    prefill.End(t.first_token != none ? t.first_token : t.finished);
  }
  if (t.first_token != none) {
    obs::Span decode = start("decode", t.first_token);
    decode.SetInt("gen_ai.usage.output_tokens", e.usage.completion_tokens);
    decode.SetString("strata.finish_reason", FinishReasonLabel(e.finish));
    if (!e.status.ok()) decode.SetError(e.status.message());
    decode.End(t.finished);
  }
}

// One choice: samples, detokenizes, matches stop strings and reports events.
// Runs on the scheduler thread.
class ChoiceSink final : public engine::RequestSink {
 public:
  // `json`: when set, the choice is one JSON object, decoded under that mask.
  // `tools`: when set, the text is read for tool calls in that syntax.
  // `grammar`: when set, the choice is a sentence of its grammar; `eog` are
  // the tokens that may end it once the text is one.
  ChoiceSink(int32_t index, const sampling::SamplingParams& params, const text::Tokenizer& tok,
             std::vector<std::string> stops, size_t n_user_stops, int32_t top_logprobs,
             int32_t max_tokens, std::shared_ptr<Sink> sink, Governor* governor,
             const util::Clock& clock, const grammar::JsonTokenMask* json,
             std::optional<ToolCallParser::Options> tools,
             std::shared_ptr<const grammar::GrammarTokenMask> grammar,
             const std::vector<int32_t>& eog, std::shared_ptr<obs::RequestTrace> trace)
      : json_(json),
        tools_(tools ? std::optional<ToolCallParser>(std::in_place, std::move(*tools))
                     : std::nullopt),
        grammar_(std::move(grammar)),
        eog_(eog),
        index_(index),
        params_(params),
        sampler_(params),
        tok_(tok),
        detok_(tok),
        user_stops_(stops.begin(), stops.begin() + static_cast<std::ptrdiff_t>(n_user_stops)),
        stop_(std::move(stops)),
        top_logprobs_(top_logprobs),
        max_tokens_(max_tokens),
        sink_(std::move(sink)),
        governor_(governor),
        clock_(clock),
        trace_(std::move(trace)),
        start_(clock.Now()) {}

  // The Governor's terms in force now are this choice's to the end.
  int32_t OnAdmit() override {
    admitted_ = clock_.Now();
    if (governor_ == nullptr) return 0;
    terms_ = governor_->Admit();
    const sampling::SamplingParams p = sampling::ApplyTier(params_, terms_.sampling_tier);
    const bool simpler = p.top_k != params_.top_k || p.typical_p != params_.typical_p ||
                         p.target_entropy != params_.target_entropy ||
                         p.mirostat != params_.mirostat;
    const bool shorter = terms_.max_tokens_cap > 0 && terms_.max_tokens_cap < max_tokens_;
    // The answer is then not what the request asked for: serve it, don't store it.
    if (simpler || shorter) sink_->DoNotStore();
    if (simpler) sampler_ = sampling::Sampler(p);
    return terms_.max_tokens_cap;
  }

  util::StatusOr<int32_t> Choose(std::span<const float> logits) override {
    if (json_ != nullptr) {
      // Only what keeps the text a prefix of a JSON object may be chosen.
      const std::shared_ptr<const std::vector<int32_t>> allowed_ptr =
          json_->AllowedCached(machine_);
      const std::vector<int32_t>& allowed = *allowed_ptr;
      if (allowed.empty()) {
        return util::InternalError("the JSON constraint allows no next token");
      }
      masked_.assign(logits.size(), -std::numeric_limits<float>::infinity());
      for (const int32_t id : allowed) {
        if (static_cast<size_t>(id) < logits.size()) {
          masked_[static_cast<size_t>(id)] = logits[static_cast<size_t>(id)];
        }
      }
      logits = masked_;
    } else if (grammar_ != nullptr) {
      STRATA_RETURN_IF_ERROR(MaskByGrammar(logits));
      logits = masked_;
    }
    STRATA_ASSIGN_OR_RETURN(int32_t token, sampler_.Sample(logits));
    if (top_logprobs_ >= 0) pending_lp_ = Logprobs(logits, token);
    return token;
  }

  bool OnToken(int32_t token) override {
    const auto now = clock_.Now();
    token_ids_.push_back(token);
    if (n_tokens_++ == 0) {
      first_ = now;
      sink_->OnFirstToken(now - start_);
      if (governor_ != nullptr) governor_->ObserveTtft(now - start_);
    }
    Event e;
    e.index = index_;
    e.text = stop_.Push(detok_.Push(token));
    if (tools_) {
      // The text as the client sees it: tool markup becomes the calls.
      std::string seen;
      tools_->Push(e.text, &seen, &e.tool_calls);
      e.text = std::move(seen);
    }
    if (top_logprobs_ >= 0 && !tok_.IsEog(token) && pending_lp_) {
      e.logprobs.push_back(std::move(*pending_lp_));
    }
    pending_lp_.reset();
    if (!e.text.empty() || !e.logprobs.empty() || !e.tool_calls.empty()) {
      sink_->Push(std::move(e));
    }
    // Parallel calls refused: the first call is the whole answer.
    if (tools_ && tools_->done()) return false;
    if (json_ != nullptr) {
      // The token was allowed, so its bytes are accepted; the object's
      // last byte ends the choice (an end of turn).
      if (!machine_.FeedAll(tok_.Piece(token)) || machine_.complete()) return false;
    }
    if (grammar_ != nullptr && !tok_.IsEog(token)) {
      // Allowed, so taken, unless a bound of the matcher's state refuses it:
      // then the next Choose fails the choice.
      if (!matcher_->FeedAll(tok_.Piece(token))) {
        grammar_failed_ = true;
        return true;
      }
      // A whole sentence that nothing can extend ends the choice.
      if (matcher_->accepting() && !matcher_->can_continue()) return false;
    }
    return !stop_.stopped();
  }

  void OnFinish(engine::FinishReason reason, const util::Status& status,
                const engine::Usage& usage) override {
    Event tail;
    tail.index = index_;
    tail.text = stop_.Push(detok_.Finish());
    tail.text += stop_.Finish();
    if (tools_) {
      std::string seen;
      tools_->Push(tail.text, &seen, &tail.tool_calls);
      tools_->Finish(&seen, &tail.tool_calls);
      tail.text = std::move(seen);
    }
    if (!tail.text.empty() || !tail.tool_calls.empty()) sink_->Push(std::move(tail));
    const auto now = clock_.Now();
    if (n_tokens_ > 1 && governor_ != nullptr) {
      governor_->ObserveTpot((now - first_) / (n_tokens_ - 1));
    }
    Event e;
    e.kind = Event::Kind::kFinish;
    e.index = index_;
    e.status = status;
    e.usage = Usage{.prompt_tokens = usage.prompt_tokens,
                    .cached_tokens = usage.cached_tokens,
                    .cache_write_tokens = 0,
                    .completion_tokens = usage.completion_tokens,
                    .preemptions = usage.preemptions,
                    .max_tokens_cut = usage.max_tokens_cut};
    e.timing = Timing{.submitted = start_,
                      .admitted = admitted_,
                      .first_token = n_tokens_ > 0 ? first_ : Clock::time_point{},
                      .finished = now,
                      .tokens = n_tokens_};
    e.terms = terms_.describe;
    e.traced = terms_.traced;
    e.seed = params_.seed;
    e.token_ids = std::move(token_ids_);
    // The engine ends the turn or stops on our matcher; which string matched
    // is ours to say (FinishReason).
    if (!status.ok() || reason == engine::FinishReason::kCancelled) {
      e.finish = FinishReason::kCancelled;
    } else if (reason == engine::FinishReason::kLength) {
      e.finish = FinishReason::kLength;
    } else if (stop_.stopped() && std::find(user_stops_.begin(), user_stops_.end(),
                                            stop_.matched()) != user_stops_.end()) {
      e.finish = FinishReason::kStopString;
      e.stop_sequence = stop_.matched();
    } else if (tools_ && tools_->calls() > 0) {
      e.finish = FinishReason::kToolCalls;  // the turn ended in (or after) its calls
    } else {
      e.finish = FinishReason::kEndOfTurn;
    }
    if (trace_ != nullptr) RecordEnginePhases(*trace_, e, terms_);
    sink_->Push(std::move(e));
  }

 private:
  // masked_ = `logits` with only what the grammar allows next; the
  // end-of-generation tokens too when the text is a whole sentence.
  util::Status MaskByGrammar(std::span<const float> logits) {
    if (grammar_failed_) {
      return util::InternalError(
          "the grammar's parse state passed a bound (too many parse stacks or too deep)");
    }
    const auto allowed = grammar_->AllowedCached(*matcher_);
    const bool accepting = matcher_->accepting();
    if (allowed->empty() && !accepting) {
      return util::InternalError(
          matcher_->bound_exceeded()
              ? "the grammar allows no next token: its parse state passed a bound"
              : "the grammar allows no next token (no token of the vocabulary continues it)");
    }
    masked_.assign(logits.size(), -std::numeric_limits<float>::infinity());
    for (const int32_t id : *allowed) {
      if (static_cast<size_t>(id) < logits.size()) {
        masked_[static_cast<size_t>(id)] = logits[static_cast<size_t>(id)];
      }
    }
    if (accepting) {
      for (const int32_t id : eog_) {
        if (static_cast<size_t>(id) < logits.size()) {
          masked_[static_cast<size_t>(id)] = logits[static_cast<size_t>(id)];
        }
      }
    }
    return util::OkStatus();
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
    lp.id = token;
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

  const grammar::JsonTokenMask* const json_;  // null: unconstrained
  std::optional<ToolCallParser> tools_;       // set: the request offered tools
  grammar::JsonMachine machine_;              // json_: the text so far
  // null: no grammar; else the text so far in matcher_ (which borrows the
  // mask's grammar, kept alive by grammar_).
  const std::shared_ptr<const grammar::GrammarTokenMask> grammar_;
  const std::vector<int32_t> eog_;  // the vocabulary's end-of-generation tokens
  std::optional<grammar::GrammarMatcher> matcher_ =
      grammar_ ? std::optional<grammar::GrammarMatcher>(grammar_->grammar()) : std::nullopt;
  bool grammar_failed_ = false;
  std::vector<float> masked_;  // json_: the step's logits, disallowed at -inf
  const int32_t index_;
  const sampling::SamplingParams params_;  // as the request asked
  sampling::Sampler sampler_;              // params_, or their Governor tier from OnAdmit
  const text::Tokenizer& tok_;
  text::Detokenizer detok_;
  const std::vector<std::string> user_stops_;  // the request's own stop strings
  StopMatcher stop_;
  const int32_t top_logprobs_;
  const int32_t max_tokens_;  // as submitted
  std::shared_ptr<Sink> sink_;
  Governor* const governor_;  // may be null
  const util::Clock& clock_;
  const std::shared_ptr<obs::RequestTrace> trace_;  // recording, or null
  const Clock::time_point start_;                   // submitted
  Clock::time_point admitted_{};                    // first got a sequence
  Governor::Terms terms_;                           // taken at admission
  Clock::time_point first_;
  int32_t n_tokens_ = 0;
  std::vector<int32_t> token_ids_;  // every token generated, for the finish event
  std::optional<TokenLogprob> pending_lp_;
};

}  // namespace

LocalBackend::LocalBackend(const model::Model& model, engine::Scheduler& scheduler,
                           const LocalOptions& options, const util::Clock& clock, util::Logger& log)
    : model_(model),
      scheduler_(scheduler),
      options_(options),
      clock_(clock),
      log_(log),
      n_ctx_(scheduler.n_ctx()),
      max_tokens_cap_(options.max_tokens_cap),
      max_embedding_inputs_(options.max_embedding_inputs) {}

util::Status LocalBackend::SetLimits(int32_t max_tokens_cap, int32_t max_embedding_inputs) {
  if (max_tokens_cap < 1 || max_tokens_cap > n_ctx_) {
    return util::InvalidArgumentError(
        fmt::format("max_tokens_cap {} is outside [1, {}] (the context)", max_tokens_cap, n_ctx_));
  }
  if (max_embedding_inputs < 1 || max_embedding_inputs > 65536) {
    return util::InvalidArgumentError(
        fmt::format("max_embedding_inputs {} is outside [1, 65536]", max_embedding_inputs));
  }
  max_tokens_cap_.store(max_tokens_cap);
  max_embedding_inputs_.store(max_embedding_inputs);
  return util::OkStatus();
}

void ExportSchedulerMetrics(obs::MetricsRegistry& metrics,
                            std::function<engine::SchedulerStats()> read) {
  auto gauge = [&metrics, &read](const char* name, const char* help, auto field) {
    metrics.GaugeCallback(name, help, [read, field] { return static_cast<double>(field(read())); });
  };
  auto counter = [&metrics, &read](const char* name, const char* help, auto field) {
    metrics.CounterCallback(name, help,
                            [read, field] { return static_cast<double>(field(read())); });
  };
  using Stats = engine::SchedulerStats;
  gauge("strata_queue_depth", "Requests waiting for a sequence slot.",
        [](const Stats& st) { return st.waiting; });
  gauge("strata_running_sequences", "Requests prefilling or decoding.",
        [](const Stats& st) { return st.running; });
  gauge("strata_kv_blocks_used", "KV cache blocks in use.",
        [](const Stats& st) { return st.kv_blocks_used; });
  gauge("strata_kv_blocks_free", "KV cache blocks free.",
        [](const Stats& st) { return st.kv_blocks_total - st.kv_blocks_used; });
  counter("strata_preemptions_total", "Sequences preempted to free KV blocks.",
          [](const Stats& st) { return st.preemptions; });
  counter("strata_kv_capped_requests_total",
          "Requests granted fewer tokens than they asked, admitted under KV pressure.",
          [](const Stats& st) { return st.kv_capped; });
  counter("strata_kv_admission_waits_total",
          "Admissions held back for KV blocks the running requests will need.",
          [](const Stats& st) { return st.kv_waits; });
  counter("strata_engine_steps_total", "Forward passes run by the scheduler.",
          [](const Stats& st) { return st.steps; });
}

util::StatusOr<std::unique_ptr<LocalBackend>> LocalBackend::Create(
    const model::Model& model, engine::Scheduler& scheduler, const LocalOptions& options,
    obs::MetricsRegistry& metrics, const util::Clock& clock, util::Logger& log) {
  if (options.max_tokens_cap < 1 || options.max_embedding_inputs < 1 ||
      options.max_embedding_inputs > 65536) {
    return util::InvalidArgumentError("local backend options out of range");
  }
  std::unique_ptr<LocalBackend> b(new LocalBackend(model, scheduler, options, clock, log));
  if (options.export_metrics) {
    // The scheduler must outlive any render of `metrics` (the server stops
    // serving /metrics before it goes).
    engine::Scheduler* s = &scheduler;
    ExportSchedulerMetrics(metrics, [s] { return s->Stats(); });
  }
  for (int32_t id = 0; id < model.tokenizer().n_vocab(); ++id) {
    if (model.tokenizer().IsEog(id)) b->eog_ids_.push_back(id);
  }
  const auto tpl = model.gguf().GetStringOr("tokenizer.chat_template", "");
  const int32_t eos = model.tokenizer().eos();
  const std::string eos_text = eos >= 0 ? std::string(model.tokenizer().TokenText(eos)) : "</s>";
  b->style_ = text::DetectChatStyle(tpl.ok() ? *tpl : "", eos_text);
  if (options.chat_format) b->style_.format = *options.chat_format;
  log.Info("chat format: {}{}", text::ChatFormatName(b->style_.format),
           options.chat_format         ? " (set by option)"
           : tpl.ok() && !tpl->empty() ? " (from the model's template)"
                                       : " (the model has no template)");
  return b;
}

uint64_t LocalBackend::fingerprint() const { return model_.fingerprint(); }

uint64_t LocalBackend::CacheNamespace(const std::string& tenant) const {
  util::Hasher h(0x7374726174614e53ULL);  // "strataNS"
  h.UpdatePod(model_.fingerprint());
  h.Update(tenant);
  const uint64_t v = h.Digest();
  return v == 0 ? 1 : v;
}

util::StatusOr<std::vector<int32_t>> LocalBackend::Tokenize(const Request& r) const {
  const text::Tokenizer& tok = model_.tokenizer();
  if (!r.prompt_ids.empty()) {
    for (size_t i = 0; i < r.prompt_ids.size(); ++i) {
      if (!tok.IsValid(r.prompt_ids[i])) {
        return util::InvalidFieldError(
            "prompt", fmt::format("'prompt' token {} at index {} is outside the vocabulary "
                                  "(ids 0 to {})",
                                  r.prompt_ids[i], i, tok.n_vocab() - 1));
      }
    }
    return r.prompt_ids;
  }
  if (r.prompt) {
    return tok.Encode(*r.prompt,
                      {.add_special = true, .parse_special = options_.prompt_special_tokens});
  }
  // Tools the model may not call are not offered (tool_choice "none").
  const std::span<const ToolDefinition> tools =
      OffersTools(r) ? std::span<const ToolDefinition>(r.tools) : std::span<const ToolDefinition>();
  STRATA_ASSIGN_OR_RETURN(auto segments, text::RenderChat(style_, r.messages, true, tools));
  std::vector<text::TextSegment> parts;
  parts.reserve(segments.size());
  for (const auto& s : segments) parts.push_back({s.text, s.special});
  std::vector<int32_t> plain = tok.EncodeSegments(parts, /*add_special=*/true);
  // A session's stored tokens that the conversation's own encoding already
  // starts with need nothing; others may stand in for the text they encode.
  const std::vector<int32_t>& stored = r.prefix_tokens;
  const bool starts_so =
      plain.size() >= stored.size() && std::equal(stored.begin(), stored.end(), plain.begin());
  if (!stored.empty() && !starts_so) {
    if (auto spliced = internal::SpliceStoredTokens(tok, parts, plain, stored)) return *spliced;
  }
  return plain;
}

util::StatusOr<std::vector<int32_t>> LocalBackend::EncodeText(std::string_view text,
                                                              bool add_special,
                                                              bool parse_special) const {
  return model_.tokenizer().Encode(text,
                                   {.add_special = add_special, .parse_special = parse_special});
}

util::StatusOr<std::string> LocalBackend::DecodeTokens(std::span<const int32_t> ids) const {
  const text::Tokenizer& tok = model_.tokenizer();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!tok.IsValid(ids[i])) {
      return util::InvalidFieldError(
          "tokens", fmt::format("'tokens[{}]' is {}: outside the vocabulary [0, {})", i, ids[i],
                                tok.n_vocab()));
    }
  }
  return tok.Decode(ids, {.render_special = true});
}

util::StatusOr<std::string> LocalBackend::TokenBytes(int32_t id) const {
  const text::Tokenizer& tok = model_.tokenizer();
  if (!tok.IsValid(id)) {
    return util::InvalidArgumentError(fmt::format("token {} is outside the vocabulary", id));
  }
  return std::string(tok.Piece(id, /*render_special=*/true));
}

util::StatusOr<int32_t> LocalBackend::PromptTokens(const Request& r) const {
  STRATA_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, Tokenize(r));
  return static_cast<int32_t>(tokens.size());
}

util::StatusOr<std::shared_ptr<const Prepared>> LocalBackend::Prepare(const Request& r) const {
  if (!r.sampling.logit_bias.empty()) {
    const int32_t id = r.sampling.logit_bias.back().first;  // sorted: the largest
    const int32_t n_vocab = model_.tokenizer().n_vocab();
    if (id >= n_vocab) {
      return util::InvalidFieldError(
          "logit_bias", fmt::format("'logit_bias' names token {}; the model's vocabulary has "
                                    "ids 0 to {}",
                                    id, n_vocab - 1));
    }
  }
  if (OffersTools(r) && r.response_format != ResponseFormat::kText) {
    return util::InvalidFieldError(
        "response_format",
        "'response_format' other than text cannot be combined with tools on the local engine "
        "(a tool's parameters already constrain its arguments)");
  }
  if (OffersTools(r) && !r.grammar.empty()) {
    return util::InvalidFieldError("grammar",
                                   "'grammar' cannot be combined with tools on the local engine");
  }
  auto p = std::make_shared<LocalPrepared>();
  if (OffersTools(r) && (r.tool_choice.mode == ToolChoice::Mode::kRequired ||
                         r.tool_choice.mode == ToolChoice::Mode::kNamed)) {
    // The model must call: its answer is held to calls of the tools, in
    // its template's syntax, with arguments that follow their schemas.
    STRATA_ASSIGN_OR_RETURN(const std::string gbnf, ToolCallGrammar(style_.tools, r));
    STRATA_ASSIGN_OR_RETURN(p->constraint, GrammarMask(gbnf));
  }
  STRATA_ASSIGN_OR_RETURN(p->tokens, Tokenize(r));
  const int32_t n_prompt = static_cast<int32_t>(p->tokens.size());
  if (n_prompt == 0) return util::InvalidArgumentError("the prompt is empty");
  // Both quantities a client can act on: the context this server gives a
  // request (--ctx) and the model's own, which a larger --ctx could reach.
  const int32_t n_train = model_.config().n_ctx_train;
  if (n_prompt >= n_ctx_) {
    return util::OutOfRangeError(
               fmt::format("context length exceeded: the prompt ({} tokens) leaves no room to "
                           "generate in the context of {} tokens (the model's: {})",
                           n_prompt, n_ctx_, n_train))
        .WithReason(util::ErrorReason::kContextLengthExceeded);
  }
  const int32_t room = n_ctx_ - n_prompt;
  p->max_tokens = std::min(room, max_tokens_cap_.load(std::memory_order_relaxed));
  if (r.max_tokens) {
    if (*r.max_tokens > room) {
      return util::OutOfRangeError(
                 fmt::format("context length exceeded: the prompt ({} tokens) plus max_tokens ({}) "
                             "exceeds the context of {} tokens (the model's: {})",
                             n_prompt, *r.max_tokens, n_ctx_, n_train))
          .WithReason(util::ErrorReason::kContextLengthExceeded);
    }
    p->max_tokens = *r.max_tokens;
  }
  p->prompt_tokens = n_prompt;
  p->stops = r.stop;
  // A JSON answer ends at its closing brace, and the end-of-turn tokens are
  // masked until then: a turn end's text ("<|im_end|>") inside one of its
  // strings is content, and must not cut the object short.
  if (p->constraint == nullptr) {
    // A schema or a grammar that does not compile is the client's error,
    // here, before anything runs.
    STRATA_ASSIGN_OR_RETURN(p->constraint, GrammarFor(r));
  }
  if (!r.completion() && r.response_format == ResponseFormat::kText && p->constraint == nullptr) {
    for (auto& s : text::TurnEndStrings(style_)) p->stops.push_back(std::move(s));
  }
  return std::shared_ptr<const Prepared>(std::move(p));
}

util::StatusOr<std::shared_ptr<Run>> LocalBackend::Start(const Request& r,
                                                         std::shared_ptr<const Prepared> prepared,
                                                         std::shared_ptr<Sink> sink,
                                                         Governor* governor) {
  // A request without a seed gets a fresh one (when the server gives a seed
  // stream): the same prompt must not sample the same text every time.
  uint64_t base = r.sampling.seed;
  if (!r.fixed_seed && options_.unseeded_seed_base) {
    uint64_t x =
        *options_.unseeded_seed_base + unseeded_count_.fetch_add(1, std::memory_order_relaxed);
    base = util::Rng::SplitMix64(x);
  }
  const grammar::JsonTokenMask* json = nullptr;
  if (r.response_format == ResponseFormat::kJsonObject) {
    std::call_once(json_once_, [this] {
      json_mask_ = std::make_unique<const grammar::JsonTokenMask>(model_.tokenizer());
    });
    json = json_mask_.get();
  }
  // Compiled by Prepare (a forced tool call's grammar, a schema's, the
  // request's own).
  const std::shared_ptr<const grammar::GrammarTokenMask>& constrained =
      static_cast<const LocalPrepared&>(*prepared).constraint;
  auto run = std::make_shared<LocalRun>(scheduler_);
  for (int32_t i = 0; i < r.n; ++i) {
    sampling::SamplingParams p = r.sampling;
    p.seed = base + static_cast<uint64_t>(i);  // distinct choices, reproducible
    engine::SchedulerRequest sr;
    sr.prompt = prepared->tokens;
    sr.max_tokens = prepared->max_tokens;
    sr.stop_at_eog = !r.ignore_eos;
    std::optional<ToolCallParser::Options> tools;
    if (OffersTools(r)) {
      tools = ToolCallParser::Options{
          .syntax = style_.tools,
          .parallel = r.parallel_tool_calls,
          .id_seed = fmt::format("{}", p.seed),
          .calls_only = static_cast<const LocalPrepared&>(*prepared).constraint != nullptr};
    }
    sr.sink = std::make_shared<ChoiceSink>(i, p, model_.tokenizer(), prepared->stops, r.stop.size(),
                                           r.top_logprobs, prepared->max_tokens, sink, governor,
                                           clock_, json, std::move(tools), constrained, eog_ids_,
                                           r.trace && r.trace->recording() ? r.trace : nullptr);
    if (options_.prefix_cache && r.prefix_cache) sr.cache_namespace = CacheNamespace(r.tenant);
    auto id = scheduler_.Submit(std::move(sr));
    if (!id.ok()) {
      run->Cancel();
      return id.status();
    }
    run->Add(*id);
  }
  return std::shared_ptr<Run>(std::move(run));
}

util::StatusOr<std::shared_ptr<const grammar::GrammarTokenMask>> LocalBackend::GrammarFor(
    const Request& r) const {
  const bool schema = r.response_format == ResponseFormat::kJsonSchema;
  if (!schema && r.grammar.empty()) return std::shared_ptr<const grammar::GrammarTokenMask>();
  std::string key = schema ? "s" + r.json_schema.schema : "g" + r.grammar;
  {
    std::lock_guard<std::mutex> lock(grammar_mu_);
    for (auto it = grammars_.begin(); it != grammars_.end(); ++it) {
      if (it->first != key) continue;
      grammars_.splice(grammars_.begin(), grammars_, it);
      return it->second;
    }
  }
  // Compiled outside the lock (a large vocabulary's walks take a while);
  // two requests with one new text may both compile it, to equal masks.
  std::string text = r.grammar;
  if (schema) {
    auto compiled = grammar::CompileJsonSchema(r.json_schema.schema);
    if (!compiled.ok()) {
      return util::InvalidFieldError(
          "response_format.json_schema.schema",
          fmt::format("'response_format.json_schema.schema': {}", compiled.status().message()));
    }
    text = std::move(*compiled);
  }
  auto g = grammar::Grammar::Parse(text);
  if (!g.ok()) {
    const char* field = schema ? "response_format.json_schema.schema" : "grammar";
    return util::InvalidFieldError(field, fmt::format("'{}': {}", field, g.status().message()));
  }
  std::call_once(vocab_once_, [this] {
    vocab_ = std::make_shared<const grammar::VocabIndex>(model_.tokenizer());
  });
  auto mask = std::make_shared<const grammar::GrammarTokenMask>(*g, vocab_);
  std::lock_guard<std::mutex> lock(grammar_mu_);
  grammars_.emplace_front(std::move(key), mask);
  if (grammars_.size() > kGrammarCacheEntries) grammars_.pop_back();
  return mask;
}

util::StatusOr<EmbeddingResult> LocalBackend::Embed(
    const EmbeddingRequest& r, std::chrono::steady_clock::time_point deadline) {
  STRATA_ASSIGN_OR_RETURN(
      internal::EmbeddingInputs checked,
      internal::CheckedEmbeddingInputs(r, model_.tokenizer(),
                                       max_embedding_inputs_.load(std::memory_order_relaxed),
                                       n_ctx_, "the model's"));
  const std::vector<std::vector<int32_t>>& inputs = checked.tokens;
  EmbeddingResult out;
  out.prompt_tokens = checked.prompt_tokens;
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

util::StatusOr<std::shared_ptr<const grammar::GrammarTokenMask>> LocalBackend::GrammarMask(
    const std::string& gbnf) const {
  const std::string key = "t" + gbnf;
  {
    std::lock_guard<std::mutex> lock(grammar_mu_);
    for (auto it = grammars_.begin(); it != grammars_.end(); ++it) {
      if (it->first != key) continue;
      grammars_.splice(grammars_.begin(), grammars_, it);
      return it->second;
    }
  }
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const grammar::Grammar> g, grammar::Grammar::Parse(gbnf));
  std::call_once(vocab_once_, [this] {
    vocab_ = std::make_shared<const grammar::VocabIndex>(model_.tokenizer());
  });
  // Built outside the lock (it walks the vocabulary); two requests that race
  // on a new grammar may both build it, and one copy stays.
  auto mask = std::make_shared<const grammar::GrammarTokenMask>(std::move(g), vocab_);
  std::lock_guard<std::mutex> lock(grammar_mu_);
  grammars_.emplace_front(key, mask);
  if (grammars_.size() > kGrammarCacheEntries) grammars_.pop_back();
  return std::shared_ptr<const grammar::GrammarTokenMask>(std::move(mask));
}

}  // namespace strata::backend
