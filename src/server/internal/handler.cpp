#include "server/internal/handler.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "server/internal/multi_prompt.h"
#include "server/internal/session_turns.h"
#include "server/internal/snapshot_tap.h"
#include "server/internal/wire.h"

namespace strata::server {
namespace {

bool SaneRequestId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

const char* EndpointLabel(ApiKind k) {
  switch (k) {
    case ApiKind::kOpenAIChat:
      return "/v1/chat/completions";
    case ApiKind::kOpenAICompletion:
      return "/v1/completions";
    case ApiKind::kAnthropicMessages:
      return "/v1/messages";
  }
  return "?";
}

constexpr const char* kEmbeddingsEndpoint = "/v1/embeddings";

// The endpoints whose requests are audited (server/compliance.h).
bool Audited(std::string_view endpoint) {
  return endpoint == EndpointLabel(ApiKind::kOpenAIChat) ||
         endpoint == EndpointLabel(ApiKind::kOpenAICompletion) ||
         endpoint == EndpointLabel(ApiKind::kAnthropicMessages) || endpoint == kEmbeddingsEndpoint;
}

int64_t UnixMillis(const util::Clock& clock) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock.WallNow().time_since_epoch())
      .count();
}

int64_t UnixSeconds(const util::Clock& clock) {
  return std::chrono::duration_cast<std::chrono::seconds>(clock.WallNow().time_since_epoch())
      .count();
}

// "reason: message", or the message alone, for access lines.
std::string Describe(const util::Status& st) {
  if (st.reason() == util::ErrorReason::kNone) return st.message();
  return fmt::format("{}: {}", util::ErrorReasonName(st.reason()), st.message());
}

}  // namespace

// The Anthropic SDKs read the id from 'request-id' (what api.anthropic.com
// sends), the OpenAI SDKs from 'x-request-id'.
ApiReply ApiHandler::NewReply(ApiKind kind, const std::string& request_id) {
  ApiReply reply;
  reply.headers.emplace_back("X-Request-ID", request_id);
  if (kind == ApiKind::kAnthropicMessages) reply.headers.emplace_back("request-id", request_id);
  return reply;
}

ApiHandler::ApiHandler(const ServerOptions& options, ApiKeys keys, obs::MetricsRegistry& metrics,
                       const util::Clock& clock, util::Logger& log)
    : options_(options),
      keys_(std::make_shared<const ApiKeys>(std::move(keys))),
      request_timeout_ms_(
          std::chrono::duration_cast<std::chrono::milliseconds>(options.request_timeout).count()),
      clock_(clock),
      log_(log),
      requests_(metrics.Counter("strata_http_requests_total",
                                "HTTP requests by endpoint and status.", {"endpoint", "status"})),
      tenant_requests_(metrics.Counter(
          "strata_tenant_requests_total",
          "Generation requests that ended, by tenant, result (ok, error, cancelled) and how the "
          "cache served them.",
          {"tenant", "result", "cache"})),
      tenant_tokens_(metrics.Counter("strata_tenant_tokens_total",
                                     "Tokens of the generation requests that ended, by tenant and "
                                     "kind (prompt, completion).",
                                     {"tenant", "kind"})),
      id_rng_(options.request_id_seed) {
  if (options.sessions != nullptr) {
    // Four: a turn's store is mostly waiting (on the disk or the network),
    // and turns of different sessions proceed in parallel in both stores.
    session_workers_ = std::make_unique<util::WorkQueue>(4, options.max_queued_requests);
  }
}

bool ApiHandler::CompletesQuickly(size_t body_bytes) const {
  // 4 KiB of JSON (a typical chat turn, ~1000 tokens) renders and tokenizes
  // in about 0.2 ms (docs/benchmarks.md, "L1 hit latency").
  constexpr size_t kQuickBodyBytes = 4u << 10;
  const gateway::Gateway* g = gateway_.load();
  return g != nullptr && body_bytes <= kQuickBodyBytes && g->StartIsCpuBound();
}

std::string ApiHandler::RequestId(std::string_view given) {
  if (SaneRequestId(given)) return std::string(given);
  std::lock_guard<std::mutex> lock(id_mu_);
  return fmt::format("{:016x}", id_rng_.Next());
}

void ApiHandler::Count(const char* endpoint, int http_status) {
  requests_.With({endpoint, std::to_string(http_status)}).Inc();
}

void ApiHandler::CountTenant(const std::string& tenant, const char* result,
                             gateway::CacheOutcome cache, int64_t prompt_tokens,
                             int64_t completion_tokens) {
  tenant_requests_.With({tenant, result, std::string(gateway::CacheOutcomeName(cache))}).Inc();
  tenant_tokens_.With({tenant, "prompt"}).Inc(static_cast<double>(prompt_tokens));
  tenant_tokens_.With({tenant, "completion"}).Inc(static_cast<double>(completion_tokens));
}

// --- errors -----------------------------------------------------------------

ApiReply ApiHandler::ErrorReply(ApiKind kind, const util::Status& status, ApiReply reply) {
  const ErrorMapping& m = MapError(status);
  reply.status = m.http_status;
  reply.body = RenderError(kind, status);
  reply.responder.reset();
  if (m.retry_after) reply.headers.emplace_back("Retry-After", std::to_string(kRetryAfterSeconds));
  return reply;
}

util::Status ApiHandler::TransportError(int http_status, std::string_view method,
                                        std::string_view path, const util::Status& why) const {
  if (http_status == 404) {
    return util::NotFoundError(fmt::format("no route for {} {}", method, path))
        .WithReason(util::ErrorReason::kNoRoute);
  }
  util::ErrorReason reason = util::ErrorReason::kMalformedHttp;
  std::string message = fmt::format("HTTP {}", http_status);
  switch (http_status) {
    case 408:
      reason = util::ErrorReason::kClientTimeout;
      break;
    case 413:
      reason = util::ErrorReason::kBodyTooLarge;
      message = fmt::format("the request body exceeds the limit of {} bytes",
                            options_.limits.max_body_bytes);
      break;
    case 414:
      reason = util::ErrorReason::kRequestLineTooLong;
      break;
    case 415:
      reason = util::ErrorReason::kUnsupportedEncoding;
      break;
    case 431:
      reason = util::ErrorReason::kHeadersTooLarge;
      break;
    case 501:
      reason = util::ErrorReason::kUnsupportedFraming;
      break;
    case 503:
      reason = util::ErrorReason::kTooManyConnections;
      break;
    case 505:
      reason = util::ErrorReason::kHttpVersion;
      break;
    default:
      break;
  }
  if (why.ok()) return util::InvalidArgumentError(std::move(message)).WithReason(reason);
  return util::Status(why.code(), why.message()).WithReason(reason);
}

ApiReply ApiHandler::Fail(const Scope& scope, ApiReply reply, const util::Status& status) {
  reply = ErrorReply(scope.kind, status, std::move(reply));
  scope.span.AddHeaders(reply);
  scope.span.End(reply.status, status, 0, 0);
  Count(scope.endpoint, reply.status);
  scope.log.Info("{} {} {}{} ({}) {:.1f} ms", scope.call.method, scope.call.path, reply.status,
                 scope.session_note, Describe(status),
                 util::SecondsBetween(scope.t0, clock_.Now()) * 1e3);
  return reply;
}

// --- admit and parse ----------------------------------------------------------

util::StatusOr<std::string> ApiHandler::Authenticate(std::string_view api_key) const {
  const std::shared_ptr<const ApiKeys> keys = keys_.load();
  if (keys->empty()) return std::string("default");
  if (api_key.empty()) {
    return util::UnauthenticatedError(
               "missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'")
        .WithReason(util::ErrorReason::kMissingApiKey);
  }
  return keys->Authenticate(api_key);
}

void ApiHandler::SetBroken(util::Status why) {
  std::lock_guard<std::mutex> lock(broken_mu_);
  broken_why_ = std::move(why);
  broken_.store(true);
}

std::optional<ApiReply> ApiHandler::Screen(ApiKind kind, const char* endpoint, const ApiCall& call,
                                           bool check_draining) {
  auto admitted = Admit(check_draining, call.api_key);
  if (admitted.ok()) return std::nullopt;
  Scope scope(kind, endpoint, call, clock_.Now(), log_);
  scope.span = RequestSpan::Start(call, endpoint, options_.tracer.get(), gateway_.load(), scope.t0);
  ApiReply reply = Fail(scope, NewReply(kind, call.request_id), admitted.status());
  if (Audited(endpoint)) {  // refused from its head: no body read, none hashed
    RequestAudit(options_.compliance, clock_, call.request_id, endpoint, std::nullopt, scope.t0)
        .Record(reply.status, admitted.status(), false, 0, 0);
  }
  return reply;
}

util::StatusOr<ApiHandler::Admitted> ApiHandler::Admit(bool check_draining,
                                                       std::string_view api_key) const {
  if (broken_.load()) {
    std::lock_guard<std::mutex> lock(broken_mu_);
    return broken_why_;
  }
  if (check_draining && draining_.load()) {
    return util::UnavailableError("the server is shutting down")
        .WithReason(util::ErrorReason::kShuttingDown);
  }
  gateway::Gateway* g = gateway_.load();
  if (g == nullptr) {
    return util::UnavailableError("the model is loading; retry shortly")
        .WithReason(util::ErrorReason::kModelLoading);
  }
  STRATA_ASSIGN_OR_RETURN(std::string tenant, Authenticate(api_key));
  return Admitted{g, std::move(tenant)};
}

util::StatusOr<std::string> ApiHandler::ResolveModel(const gateway::Gateway& g,
                                                     const std::string& model) const {
  if (g.Find(model) != nullptr && !model.empty()) return model;
  if (std::find(options_.model_aliases.begin(), options_.model_aliases.end(), model) !=
      options_.model_aliases.end()) {
    return g.model_name();
  }
  const std::vector<std::string> names = g.model_names();
  // Local tools that hard-code a model id ("gpt-3.5-turbo") reach the one
  // model there is.
  if (options_.accept_any_model && names.size() == 1) return names.front();
  std::string served;
  for (const std::string& n : names) served += (served.empty() ? "'" : ", '") + n + "'";
  return util::NotFoundError(
             fmt::format("model '{}' does not exist; this server serves {}", model, served))
      .WithReason(util::ErrorReason::kModelNotFound);
}

util::StatusOr<ParsedRequest> ApiHandler::Parse(ApiKind kind, const ApiCall& call,
                                                const Admitted& admitted) const {
  STRATA_ASSIGN_OR_RETURN(ParsedRequest parsed, ParseRequest(kind, call.body));
  STRATA_ASSIGN_OR_RETURN(parsed.request.model, ResolveModel(*admitted.gateway, parsed.model));
  if (kind == ApiKind::kAnthropicMessages && parsed.request.n != 1) {
    return util::InvalidFieldError("n", "'n' is not part of the messages API");
  }
  parsed.request.request_id = call.request_id;
  parsed.request.tenant = admitted.tenant;
  return parsed;
}

// --- start and respond ----------------------------------------------------------

util::StatusOr<std::unique_ptr<gateway::Generation>> ApiHandler::Start(gateway::Gateway& g,
                                                                       const ParsedRequest& parsed,
                                                                       ApiReply& reply) const {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<gateway::Generation> gen, g.Start(parsed.request));
  if (!parsed.more_prompts.empty()) {
    // An array of prompts: one generation each, read as one response.
    std::vector<std::unique_ptr<gateway::Generation>> parts;
    parts.push_back(std::move(gen));
    for (const PromptInput& p : parsed.more_prompts) {
      gateway::CompletionRequest r = parsed.request;
      r.prompt = p.text;
      r.prompt_ids = p.ids;
      auto part = g.Start(r);
      if (!part.ok()) {
        for (auto& started : parts) started->Cancel();
        return part.status();
      }
      parts.push_back(std::move(part).value());
    }
    gen = CombinePromptGenerations(std::move(parts), parsed.request.n);
  }
  // How this response is served: miss, l1, l3 or coalesced (docs/api.md);
  // a near-duplicate's answer also says how similar the request was.
  reply.headers.emplace_back("x-strata-cache",
                             std::string(gateway::CacheOutcomeName(gen->cache_outcome())));
  if (const auto similarity = gen->cache_similarity()) {
    reply.headers.emplace_back("x-strata-cache-similarity", fmt::format("{:.3f}", *similarity));
  }
  return gen;
}

ResponseMeta ApiHandler::Meta(ApiKind kind, const Scope& scope, const ParsedRequest& parsed,
                              const gateway::Generation& gen) const {
  ResponseMeta meta;
  meta.id = (kind == ApiKind::kAnthropicMessages ? "msg_"
             : kind == ApiKind::kOpenAIChat      ? "chatcmpl-"
                                                 : "cmpl-") +
            scope.call.request_id;
  meta.model = parsed.request.model;  // the served id, whichever alias the client used
  meta.created = UnixSeconds(clock_);
  meta.prompt_tokens = gen.prompt_tokens();
  meta.fingerprint = "strata";
  return meta;
}

ApiReply ApiHandler::Complete(ApiKind kind, const ApiCall& call) {
  Scope scope(kind, EndpointLabel(kind), call, clock_.Now(), log_);
  scope.span =
      RequestSpan::Start(call, scope.endpoint, options_.tracer.get(), gateway_.load(), scope.t0);
  ApiReply reply = NewReply(kind, call.request_id);
  RequestAudit audit(options_.compliance, clock_, call.request_id, scope.endpoint, call.body,
                     scope.t0);
  auto fail = [&](const util::Status& st) {
    ApiReply r = Fail(scope, std::move(reply), st);
    audit.Record(r.status, st, false, 0, 0);
    return r;
  };
  auto admitted = Admit(/*check_draining=*/true, call.api_key);
  if (!admitted.ok()) return fail(admitted.status());
  audit.SetTenant(admitted->tenant);
  if (util::Status st = RequestAudit::Admit(options_.compliance); !st.ok()) return fail(st);
  auto parsed = Parse(kind, call, *admitted);
  if (!parsed.ok()) return fail(parsed.status());
  parsed->request.trace = scope.span.trace();
  scope.span.OnParsed(*parsed, *admitted->gateway, admitted->tenant);
  const backend::Backend* backend = admitted->gateway->Find(parsed->request.model);
  audit.SetModel(parsed->request.model, backend);
  audit.SetStream(parsed->stream);
  if (options_.compliance.audit_tokens && options_.compliance.audit_log != nullptr &&
      backend != nullptr && backend->kind() == "local" && parsed->request.top_logprobs < 0) {
    // Token-level audit: the local engine reports each token's id and
    // logprob; the response shows them only where the client asked.
    parsed->request.top_logprobs = 0;
  }
  // The session (a client-chosen, checked name) comes back so a proxy can
  // see it, and labels this request's log lines.
  if (const std::string& session = parsed->request.session_id; !session.empty()) {
    reply.headers.emplace_back("x-strata-session-id", session);
    scope.session_note = " session=" + session;
  }
  // Durable sessions: a chat answered on the stored conversation, its turn
  // stored before the client sees the end of the answer.
  std::optional<SessionTurn> turn;
  if (options_.sessions != nullptr && !parsed->request.session_id.empty() &&
      !parsed->request.completion()) {
    auto planned = PlanSession(*parsed, admitted->tenant, call);
    if (!planned.ok()) return fail(planned.status());
    turn = std::move(*planned);
  }
  auto gen = Start(*admitted->gateway, *parsed, reply);
  if (!gen.ok()) return fail(gen.status());
  if (turn) {
    *gen = TapForSession(std::move(*gen), *options_.sessions, std::move(*turn),
                         session_workers_.get());
  }
  if (options_.snapshots != nullptr) {  // request snapshots (server/snapshots.h)
    *gen = TapForSnapshot(std::move(*gen), *options_.snapshots, kind, scope.endpoint, *parsed,
                          UnixMillis(clock_));
  }
  audit.SetGeneration(**gen);
  ResponseMeta meta = Meta(kind, scope, *parsed, **gen);
  scope.span.OnStarted(**gen, meta);
  return Respond(scope, std::move(reply), std::move(gen).value(), std::move(meta), *parsed,
                 admitted->tenant, std::move(audit));
}

util::StatusOr<SessionTurn> ApiHandler::PlanSession(ParsedRequest& parsed,
                                                    const std::string& tenant,
                                                    const ApiCall& call) {
  backend::Request& r = parsed.request;
  SessionTurn turn{.tenant = tenant,
                   .session_id = r.session_id,
                   .request_id = call.request_id,
                   .depends_on = 0,
                   .expected_turns = std::nullopt,
                   .added = {}};
  if (!call.if_match.empty()) {
    std::string_view v = call.if_match;
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    uint64_t n = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || end != v.data() + v.size() || v.empty()) {
      return util::InvalidFieldError("If-Match",
                                     "must be the session's number of turns, as GET "
                                     "/v1/sessions/{id} gives it in its ETag");
    }
    turn.expected_turns = n;
  }
  std::vector<backend::ChatMessage> stored;
  auto session = options_.sessions->Read(tenant, r.session_id);
  if (session.ok()) {
    STRATA_ASSIGN_OR_RETURN(stored, StoredMessages(*session));
    turn.depends_on = session->clock;
    turn.stored_tokens = session::ConversationTokens(*session);
  } else if (session.status().code() != util::StatusCode::kNotFound) {
    return session.status();
  }
  const uint64_t turns = session.ok() ? session->turns.size() : 0;
  if (turn.expected_turns && *turn.expected_turns != turns) {
    return SessionError(
        util::AbortedError(fmt::format("session '{}' has {} turns, If-Match expected {}",
                                       r.session_id, turns, *turn.expected_turns)));
  }
  STRATA_ASSIGN_OR_RETURN(TurnPlan plan, PlanTurn(r.session_id, stored, r.messages));
  r.messages = std::move(plan.full);
  r.prefix_tokens = turn.stored_tokens;  // the local engine's KV blocks of the earlier turns
  turn.added = std::move(plan.added);
  return turn;
}

ApiReply ApiHandler::Respond(Scope& scope, ApiReply reply, std::unique_ptr<gateway::Generation> gen,
                             ResponseMeta meta, const ParsedRequest& parsed,
                             const std::string& tenant, RequestAudit audit) {
  // The timeout in force when the request arrived, whatever a reload does later.
  const auto timeout = std::chrono::duration_cast<std::chrono::seconds>(
      std::chrono::milliseconds(request_timeout_ms_.load()));
  scope.span.AddHeaders(reply);
  Responder::Context c{.kind = scope.kind,
                       .endpoint = scope.endpoint,
                       .stream = parsed.stream,
                       .meta = std::move(meta),
                       .include_usage = parsed.include_usage,
                       .logprobs = parsed.logprobs,
                       .method = scope.call.method,
                       .path = scope.call.path,
                       .request_id = scope.call.request_id,
                       .tenant = tenant,
                       .session_note = scope.session_note,
                       .t0 = scope.t0,
                       .deadline = scope.t0 + timeout,
                       .timeout = timeout,
                       .defer_head = gen->defers_stream_head(),
                       .tools = !parsed.request.tools.empty(),
                       .span = std::move(scope.span),
                       .audit = std::move(audit)};
  if (parsed.stream) {
    // Everything from here on travels inside the 200 response.
    reply.headers.emplace_back("Cache-Control", "no-cache");
    reply.headers.emplace_back("X-Accel-Buffering", "no");
    if (!c.defer_head) Count(scope.endpoint, 200);
  }
  ApiReply head;
  head.status = reply.status;
  head.headers = reply.headers;
  head.responder = std::make_shared<Responder>(std::move(gen), std::move(c), std::move(reply),
                                               *this, clock_, log_);
  return head;
}

// --- responder --------------------------------------------------------------------

Responder::Responder(std::unique_ptr<gateway::Generation> gen, Context context, ApiReply reply,
                     ApiHandler& handler, const util::Clock& clock, util::Logger& log)
    : gen_(std::move(gen)),
      c_(std::move(context)),
      reply_(std::move(reply)),
      handler_(handler),
      clock_(clock),
      log_(log),
      results_(static_cast<size_t>(gen_->n_choices())) {}

Responder::~Responder() {
  if (!ended_) Abandon("abandoned");
}

void Responder::Log(std::string_view note) {
  util::PrefixLogger slog(log_, "req=" + c_.request_id);
  const double ms = util::SecondsBetween(c_.t0, clock_.Now()) * 1e3;
  const std::string_view cache = gateway::CacheOutcomeName(gen_->cache_outcome());
  if (c_.stream) {
    slog.Info("{} {} 200 stream tenant={}{} prompt={} completion={} cache={} {} {:.1f} ms",
              c_.method, c_.path, c_.tenant, c_.session_note, c_.meta.prompt_tokens, completion_,
              cache, note, ms);
    return;
  }
  slog.Info("{} {} 200 tenant={}{} prompt={} completion={} cache={} {:.1f} ms", c_.method, c_.path,
            c_.tenant, c_.session_note, c_.meta.prompt_tokens, completion_, cache, ms);
}

Responder::Output Responder::Finish(Output out, const util::Status& status) {
  ended_ = true;
  out.done = true;
  out.more = false;
  handler_.CountTenant(c_.tenant, status.ok() ? "ok" : "error", gen_->cache_outcome(),
                       c_.meta.prompt_tokens, completion_);
  // A deferred stream that never started answers whole, like a non-stream.
  const bool head_pending = defers_head() && !started_;
  if (head_pending && !status.ok()) out.whole = true;
  // A stream that went out answered 200, whatever happened in it.
  const bool streamed = c_.stream && !out.whole;
  c_.span.End(status.ok() || streamed ? 200 : MapError(status).http_status, status,
              c_.meta.prompt_tokens, completion_);
  if (c_.stream && !out.whole) {
    if (status.ok()) {
      // The watermark comes after the last text, where a header cannot go:
      // an SSE comment, which every client ignores (server/compliance.h).
      if (const std::string mark = c_.audit.Watermark(); !mark.empty()) {
        out.frames += ": x-strata-watermark: " + mark + "\n\n";
      }
      out.frames += RenderStreamEnd(c_.kind, c_.meta, completion_, c_.include_usage);
      Log("done");
    } else {
      out.frames += RenderStreamError(c_.kind, status);
      Log(status.reason() == util::ErrorReason::kTimeout ? "timed out"
                                                         : "failed: " + Describe(status));
    }
    c_.audit.Record(200, status, false, c_.meta.prompt_tokens, completion_);
    return out;
  }
  if (!status.ok()) {
    const ApiCall call{.method = c_.method,
                       .path = c_.path,
                       .body = {},
                       .request_id = c_.request_id,
                       .api_key = {}};
    ApiHandler::Scope scope(c_.kind, c_.endpoint, call, c_.t0, log_);
    scope.session_note = c_.session_note;
    out.reply = handler_.Fail(scope, std::move(reply_), status);
    c_.audit.Record(out.reply.status, status, false, c_.meta.prompt_tokens, completion_);
    return out;
  }
  out.reply = std::move(reply_);
  out.reply.body = RenderResponse(c_.kind, c_.meta, results_, c_.logprobs);
  if (const std::string mark = c_.audit.Watermark(); !mark.empty()) {
    out.reply.headers.emplace_back("x-strata-watermark", mark);
  }
  handler_.Count(c_.endpoint, 200);
  c_.audit.Record(200, status, false, c_.meta.prompt_tokens, completion_);
  Log("");
  return out;
}

Responder::Output Responder::Pump(size_t max_bytes) {
  Output out;
  if (ended_) {
    out.done = true;
    return out;
  }
  if (c_.stream && !started_ && !c_.defer_head) StartStream(out);
  const auto now = std::chrono::steady_clock::time_point::min();  // never wait
  while (true) {
    if (out.frames.size() >= max_bytes) {
      out.more = true;
      return out;
    }
    auto e = gen_->Next(now);
    if (!e.ok()) {
      // OutOfRange once every choice finished; DeadlineExceeded: nothing readable yet.
      if (e.status().code() == util::StatusCode::kOutOfRange) {
        return Finish(std::move(out), util::OkStatus());
      }
      return out;
    }
    if (c_.stream && !started_) {
      // A deferred head: the first event decides between a stream and a
      // whole error answer.
      const bool failed = e->kind == gateway::Event::Kind::kFinish &&
                          (!e->status.ok() || e->finish == gateway::FinishReason::kCancelled);
      if (!failed) {
        Absorb(*e);
        StartStream(out);
      }
    }
    if (e->kind == gateway::Event::Kind::kDelta) {
      c_.audit.OnDelta(*e);
      if (c_.stream) {
        // A delta of logprobs alone (token-level audit) shows nothing to a
        // client that did not ask for them.
        if (c_.logprobs || !e->text.empty() || !e->tool_calls.empty()) {
          AppendStreamDelta(out.frames, c_.kind, c_.meta, *e, c_.logprobs, &stream_);
        }
      } else {
        ChoiceResult& c = results_[static_cast<size_t>(e->index)];
        c.text += e->text;
        for (auto& lp : e->logprobs) c.logprobs.push_back(std::move(lp));
        backend::AppendToolCallDeltas(c.tool_calls, e->tool_calls);
      }
      continue;
    }
    util::Status status = e->status;
    if (status.ok() && e->finish == gateway::FinishReason::kCancelled) {
      // A cut that nobody explained still must not read as a normal end.
      status = util::UnavailableError("the generation was cancelled before it finished")
                   .WithReason(util::ErrorReason::kShuttingDown);
    }
    if (!status.ok()) {
      gen_->Cancel();
      return Finish(std::move(out), status);
    }
    completion_ += e->usage.completion_tokens;
    Absorb(*e);
    c_.span.OnFinish(*e, c_.kind);
    if (c_.stream) {
      out.frames += RenderStreamFinish(c_.kind, c_.meta, *e, &stream_);
    } else {
      ChoiceResult& c = results_[static_cast<size_t>(e->index)];
      c.finish = e->finish;
      c.stop_sequence = e->stop_sequence;
      c.completion_tokens = e->usage.completion_tokens;
    }
  }
}

void Responder::StartStream(Output& out) {
  started_ = true;
  stream_.lazy_text = c_.tools;
  out.frames = RenderStreamStart(c_.kind, c_.meta, gen_->n_choices(), &stream_) + out.frames;
  if (c_.defer_head) handler_.Count(c_.endpoint, 200);
}

void Responder::Absorb(const gateway::Event& e) {
  // A remote backend learns the prompt's size from the upstream's usage: at
  // the finish, or on the first delta when the upstream said it earlier.
  c_.meta.prompt_tokens = std::max(c_.meta.prompt_tokens, e.usage.prompt_tokens);
  c_.meta.cached_tokens = std::max(c_.meta.cached_tokens, e.usage.cached_tokens);
  c_.meta.cache_write_tokens = std::max(c_.meta.cache_write_tokens, e.usage.cache_write_tokens);
}

Responder::Output Responder::Expire() {
  Output out;
  if (ended_) {
    out.done = true;
    return out;
  }
  gen_->Cancel();
  if (c_.stream && !started_ && !c_.defer_head) StartStream(out);
  return Finish(std::move(out),
                util::DeadlineExceededError(
                    fmt::format("the request did not finish within {} s", c_.timeout.count()))
                    .WithReason(util::ErrorReason::kTimeout));
}

void Responder::Abandon(std::string_view why) {
  if (ended_) return;
  ended_ = true;
  gen_->Cancel();
  handler_.CountTenant(c_.tenant, "cancelled", gen_->cache_outcome(), c_.meta.prompt_tokens,
                       completion_);
  c_.span.End(499, util::CancelledError(fmt::format("the client went away ({})", why)),
              c_.meta.prompt_tokens, completion_);
  c_.audit.Record(c_.stream ? 200 : 499, util::OkStatus(), /*cancelled=*/true,
                  c_.meta.prompt_tokens, completion_);
  if (c_.stream) {
    Log(fmt::format("client disconnected ({})", why));
    return;
  }
  handler_.Count(c_.endpoint, 499);  // the client closed the request (nginx's code)
  util::PrefixLogger slog(log_, "req=" + c_.request_id);
  slog.Info("{} {} 499 client disconnected ({}) tenant={}{} {:.1f} ms", c_.method, c_.path, why,
            c_.tenant, c_.session_note, util::SecondsBetween(c_.t0, clock_.Now()) * 1e3);
}

// --- embeddings, models, health ---------------------------------------------------

ApiReply ApiHandler::Embed(const ApiCall& call) {
  Scope scope(ApiKind::kOpenAIChat, kEmbeddingsEndpoint, call, clock_.Now(), log_);
  scope.span = RequestSpan::Start(call, kEmbeddingsEndpoint, options_.tracer.get(), gateway_.load(),
                                  scope.t0);
  ApiReply reply = NewReply(ApiKind::kOpenAIChat, call.request_id);
  RequestAudit audit(options_.compliance, clock_, call.request_id, kEmbeddingsEndpoint, call.body,
                     scope.t0);
  auto fail = [&](const util::Status& st) {
    ApiReply r = Fail(scope, std::move(reply), st);
    audit.Record(r.status, st, false, 0, 0);
    return r;
  };
  auto admitted = Admit(/*check_draining=*/true, call.api_key);
  if (!admitted.ok()) return fail(admitted.status());
  audit.SetTenant(admitted->tenant);
  if (util::Status st = RequestAudit::Admit(options_.compliance); !st.ok()) return fail(st);
  auto parsed = ParseEmbeddingRequest(call.body);
  if (!parsed.ok()) return fail(parsed.status());
  auto served = ResolveModel(*admitted->gateway, parsed->model);
  if (!served.ok()) return fail(served.status());
  parsed->request.model = std::move(served).value();
  parsed->request.request_id = call.request_id;
  parsed->request.tenant = admitted->tenant;
  parsed->request.trace = scope.span.trace();
  scope.span.OnParsedEmbedding(parsed->request.model, *admitted->gateway, admitted->tenant,
                               parsed->request.texts.size() + parsed->request.token_ids.size());
  audit.SetModel(parsed->request.model, admitted->gateway->Find(parsed->request.model));
  auto result = admitted->gateway->Embed(
      parsed->request, scope.t0 + std::chrono::milliseconds(request_timeout_ms_.load()));
  if (!result.ok()) return fail(result.status());
  reply.body = RenderEmbeddings(parsed->request.model, *result, parsed->base64);
  scope.span.AddHeaders(reply);
  scope.span.End(200, util::OkStatus(), result->prompt_tokens, 0);
  audit.RecordBody(200, reply.body, result->prompt_tokens);
  Count(kEmbeddingsEndpoint, 200);
  scope.log.Info("POST {} 200 tenant={} inputs={} tokens={} {:.1f} ms", kEmbeddingsEndpoint,
                 admitted->tenant, result->embeddings.size(), result->prompt_tokens,
                 util::SecondsBetween(scope.t0, clock_.Now()) * 1e3);
  return reply;
}

ApiReply ApiHandler::ListModels(const ApiCall& call) {
  const char* endpoint = "/v1/models";
  ApiReply reply = NewReply(ApiKind::kOpenAIChat, call.request_id);
  auto admitted = Admit(/*check_draining=*/false, call.api_key);
  if (!admitted.ok()) {
    reply = ErrorReply(ApiKind::kOpenAIChat, admitted.status(), std::move(reply));
    Count(endpoint, reply.status);
    return reply;
  }
  std::string data;
  // The default model, its aliases, then every other served model.
  std::vector<std::string> names = admitted->gateway->model_names();
  size_t at = 1;
  for (const std::string& alias : options_.model_aliases) {
    if (std::find(names.begin(), names.end(), alias) != names.end()) continue;
    names.insert(names.begin() + static_cast<std::ptrdiff_t>(at++), alias);
  }
  for (const std::string& name : names) {
    if (!data.empty()) data += ",";
    // An alias names the default backend.
    const backend::Backend* b = admitted->gateway->Find(name);
    if (b == nullptr) b = admitted->gateway->Find("");
    data += wire::Dump({{"id", name},
                        {"object", "model"},
                        {"created", UnixSeconds(clock_)},
                        {"owned_by", "strata"},
                        // What DELETE /v1/cache's model_version names.
                        {"strata_model_version", fmt::format("{:016x}", b->fingerprint())}});
  }
  reply.body = fmt::format(R"({{"object":"list","data":[{}]}})", data);
  Count(endpoint, 200);
  return reply;
}

ApiReply ApiHandler::Health() const {
  ApiReply reply;
  if (broken_.load()) {
    std::lock_guard<std::mutex> lock(broken_mu_);
    reply.status = 503;
    reply.body = wire::Dump({{"status", std::string(util::ErrorReasonName(broken_why_.reason()))},
                             {"message", broken_why_.message()}});
  } else if (draining_.load()) {
    reply.status = 503;
    reply.body = R"({"status":"draining"})";
  } else if (gateway_.load() == nullptr) {
    reply.status = 503;
    reply.body = R"({"status":"loading"})";
  } else {
    reply.body = R"({"status":"ok"})";
  }
  return reply;
}

}  // namespace strata::server
