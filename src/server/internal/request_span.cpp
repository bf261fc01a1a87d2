#include "server/internal/request_span.h"

#include <fmt/format.h>

#include "gateway/rt_control.h"
#include "server/internal/handler.h"

namespace strata::server {
namespace {

// gen_ai.operation.name of an endpoint; nullptr: not traced.
const char* OperationOf(std::string_view endpoint) {
  if (endpoint == "/v1/chat/completions" || endpoint == "/v1/messages") return "chat";
  if (endpoint == "/v1/completions") return "text_completion";
  if (endpoint == "/v1/embeddings") return "embeddings";
  return nullptr;
}

// gen_ai.provider.name of a backend kind: strata itself for its own engine.
std::string_view ProviderOf(std::string_view backend_kind) {
  return backend_kind == "local" ? "strata" : backend_kind;
}

// A finish reason as the request's API words it.
std::string FinishReasonWord(gateway::FinishReason f, ApiKind kind) {
  const bool anthropic = kind == ApiKind::kAnthropicMessages;
  switch (f) {
    case gateway::FinishReason::kEndOfTurn:
      return anthropic ? "end_turn" : "stop";
    case gateway::FinishReason::kStopString:
      return anthropic ? "stop_sequence" : "stop";
    case gateway::FinishReason::kLength:
      return anthropic ? "max_tokens" : "length";
    case gateway::FinishReason::kToolCalls:
      return anthropic ? "tool_use" : "tool_calls";
    case gateway::FinishReason::kCancelled:
      return "cancelled";
  }
  return "stop";
}

bool FromUpstream(util::ErrorReason r) {
  switch (r) {
    case util::ErrorReason::kUpstreamRejected:
    case util::ErrorReason::kUpstreamRateLimited:
    case util::ErrorReason::kUpstreamOverloaded:
    case util::ErrorReason::kUpstreamUnavailable:
    case util::ErrorReason::kUpstreamBusy:
    case util::ErrorReason::kUpstreamTimeout:
    case util::ErrorReason::kUpstreamError:
    case util::ErrorReason::kUpstreamProtocol:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string SpanErrorMessage(const util::Status& status) {
  std::string_view m = status.message();
  if (status.reason() == util::ErrorReason::kMalformedJson) {
    // "malformed JSON at byte 17: ... (near '...')": the excerpt is the body's.
    m = m.substr(0, m.find(" (near '"));
  }
  if (FromUpstream(status.reason()) || m.find(" upstream ") != std::string_view::npos) {
    // "the openai upstream answered HTTP 400 'type': 'its message'": strata's
    // words end where the upstream's begin.
    m = m.substr(0, m.find(": "));
  }
  return std::string(m);
}

RequestSpan RequestSpan::Start(const ApiCall& call, const char* endpoint, obs::Tracer* tracer,
                               const gateway::Gateway* g,
                               std::chrono::steady_clock::time_point t0) {
  RequestSpan rs;
  const char* operation = OperationOf(endpoint);
  if (operation == nullptr) return rs;
  // No header and no tracer: nothing to carry (the common case costs this).
  if (tracer == nullptr && call.traceparent.empty()) return rs;
  const std::optional<obs::SpanContext> parent = obs::ParseTraceparentFields(call.traceparent);
  // A tracestate without a valid traceparent is not parsed (W3C).
  std::string state = parent ? obs::ParseTracestate(call.tracestate) : std::string();
  if (tracer == nullptr) {
    if (parent) rs.trace_ = obs::RequestTrace::PassThrough(*parent, std::move(state));
    return rs;
  }
  const gateway::RtControl* rt = g != nullptr ? g->rt_control() : nullptr;
  rs.tracer_ = tracer;
  rs.trace_ =
      tracer->StartRequest(parent, std::move(state), rt != nullptr ? rt->trace_sample_rate() : 1.0);
  rs.operation_ = operation;
  rs.span_ = rs.trace_->StartRoot(operation, obs::SpanKind::kServer, t0);
  if (!rs.span_.recording()) return rs;
  obs::Span& s = rs.span_;
  s.SetString("gen_ai.operation.name", operation);
  s.SetString("http.request.method", call.method);
  s.SetString("http.route", endpoint);
  s.SetString("url.path", call.path);
  s.SetString("strata.request.id", call.request_id);
  const obs::SamplingDecision& d = rs.trace_->decision();
  s.SetString("strata.trace.sampled_by", obs::SampledByName(d.by));
  if (d.by == obs::SampledBy::kRate) s.SetDouble("strata.trace.sample_rate", d.rate);
  if (rt != nullptr) s.SetInt("strata.rt.level", rt->level());
  return rs;
}

void RequestSpan::AddHeaders(ApiReply& reply) const {
  if (trace_ == nullptr || !trace_->participating()) return;
  reply.headers.emplace_back("traceresponse", trace_->Traceresponse());
}

void RequestSpan::OnParsed(const ParsedRequest& parsed, const gateway::Gateway& g,
                           const std::string& tenant) {
  if (!span_.recording()) return;
  const gateway::CompletionRequest& r = parsed.request;
  span_.SetName(fmt::format("{} {}", operation_, r.model));
  span_.SetString("gen_ai.request.model", parsed.model);
  if (const backend::Backend* b = g.Find(r.model)) {
    span_.SetString("gen_ai.provider.name", ProviderOf(b->kind()));
  }
  if (r.max_tokens) span_.SetInt("gen_ai.request.max_tokens", *r.max_tokens);
  if (r.sampling_set.temperature) {
    span_.SetDouble("gen_ai.request.temperature", r.sampling.temperature);
  }
  if (r.sampling_set.top_p) span_.SetDouble("gen_ai.request.top_p", r.sampling.top_p);
  if (r.sampling_set.top_k) span_.SetInt("gen_ai.request.top_k", r.sampling.top_k);
  if (r.fixed_seed) span_.SetInt("gen_ai.request.seed", static_cast<int64_t>(r.sampling.seed));
  if (r.n != 1) span_.SetInt("gen_ai.request.choice.count", r.n);
  span_.SetString("strata.tenant", tenant);
  span_.SetBool("strata.stream", parsed.stream);
}

void RequestSpan::OnParsedEmbedding(const std::string& model, const gateway::Gateway& g,
                                    const std::string& tenant, size_t inputs) {
  if (!span_.recording()) return;
  span_.SetName(fmt::format("{} {}", operation_, model));
  span_.SetString("gen_ai.request.model", model);
  if (const backend::Backend* b = g.Find(model)) {
    span_.SetString("gen_ai.provider.name", ProviderOf(b->kind()));
  }
  span_.SetInt("strata.embeddings.inputs", static_cast<int64_t>(inputs));
  span_.SetString("strata.tenant", tenant);
}

void RequestSpan::OnStarted(const gateway::Generation& gen, const ResponseMeta& meta) {
  const std::string_view cache = gateway::CacheOutcomeName(gen.cache_outcome());
  if (tracer_ != nullptr) tracer_->CountByCache(cache, span_.recording());
  if (!span_.recording()) return;
  span_.SetString("strata.cache.outcome", cache);
  span_.SetString("gen_ai.response.id", meta.id);
  span_.SetString("gen_ai.response.model", meta.model);
}

void RequestSpan::OnFinish(const gateway::Event& finish, ApiKind kind) {
  if (!span_.recording()) return;
  finish_reasons_.push_back(FinishReasonWord(finish.finish, kind));
}

void RequestSpan::End(int http_status, const util::Status& status, int32_t prompt_tokens,
                      int32_t completion_tokens) {
  if (!span_.recording()) return;
  span_.SetInt("http.response.status_code", http_status);
  if (prompt_tokens > 0) span_.SetInt("gen_ai.usage.input_tokens", prompt_tokens);
  if (operation_ != "embeddings" && (completion_tokens > 0 || status.ok())) {
    span_.SetInt("gen_ai.usage.output_tokens", completion_tokens);
  }
  if (!finish_reasons_.empty()) {
    span_.SetStrings("gen_ai.response.finish_reasons", std::move(finish_reasons_));
  }
  if (!status.ok()) {
    const std::string_view type = status.reason() != util::ErrorReason::kNone
                                      ? util::ErrorReasonName(status.reason())
                                      : util::StatusCodeName(status.code());
    span_.SetString("error.type", type);
    span_.SetError(SpanErrorMessage(status));
  }
  span_.End();
}

}  // namespace strata::server
