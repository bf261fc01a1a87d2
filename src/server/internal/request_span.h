// server/internal/request_span.h — one API request's trace: its context,
// taken from the traceparent and tracestate headers (W3C Trace Context), and
// its root SERVER span with the OpenTelemetry GenAI attributes.
//
// Promise: every generation and embeddings request gets a context when a
// tracer is configured (sampled parent-based, else at the tracer's rate
// times the RT-Switcher's trace rate) or when it came with a valid
// traceparent (passed on unchanged); an invalid header starts a new trace
// and is never an error. The answer carries `traceresponse` (the root
// span's context) when strata takes part. The root span is named
// "{gen_ai.operation.name} {model}" and holds the request's parameters, the
// response's id, model, finish reasons and token usage, how the cache served
// it, the tenant, the RT-Switcher level and the sampling decision; a failure
// sets status ERROR, error.type (the reason) and a message that never quotes
// the request body. Nothing of the prompt, the answer or a key is recorded.
// An unrecorded request's RequestSpan does nothing but carry its context.
//
// Threading: thread-compatible; the request's worker (or I/O) thread makes
// it, then the Responder's thread owns it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/gateway.h"
#include "obs/tracer.h"
#include "server/api.h"

namespace strata::server {

struct ApiCall;
struct ApiReply;

class RequestSpan {
 public:
  RequestSpan() = default;  // no trace: every call is a no-op

  // The trace of the request `call` to `endpoint` (a generation or
  // embeddings endpoint; others get none), started at `t0`. `tracer` may be
  // null (contexts pass through only); `g` (may be null) gives the
  // RT-Switcher's trace rate.
  static RequestSpan Start(const ApiCall& call, const char* endpoint, obs::Tracer* tracer,
                           const gateway::Gateway* g, std::chrono::steady_clock::time_point t0);

  // The context the request's work runs under (null: none).
  const std::shared_ptr<obs::RequestTrace>& trace() const { return trace_; }
  bool recording() const { return span_.recording(); }

  // `traceresponse` on `reply`, when strata takes part in the trace.
  void AddHeaders(ApiReply& reply) const;
  // What the parsed request asked: model, parameters, tenant, stream.
  void OnParsed(const ParsedRequest& parsed, const gateway::Gateway& g, const std::string& tenant);
  void OnParsedEmbedding(const std::string& model, const gateway::Gateway& g,
                         const std::string& tenant, size_t inputs);
  // The generation started: how the cache served it, the response's id and model;
  // the request is counted by cache outcome and traced or not (with a tracer).
  void OnStarted(const gateway::Generation& gen, const ResponseMeta& meta);
  // A choice finished (in `kind`'s words for its finish reason).
  void OnFinish(const gateway::Event& finish, ApiKind kind);
  // Ends the span: the HTTP status answered (or 499 for a client gone),
  // the outcome, the token usage (0: not known). Later calls do nothing.
  void End(int http_status, const util::Status& status, int32_t prompt_tokens,
           int32_t completion_tokens);

 private:
  std::shared_ptr<obs::RequestTrace> trace_;
  obs::Tracer* tracer_ = nullptr;  // the server's (it outlives every request); null: off
  obs::Span span_;
  std::string operation_;  // gen_ai.operation.name
  std::vector<std::string> finish_reasons_;
};

// The message a span may record for `status`: its own, except where it
// could quote what the client or an upstream sent (a malformed body's
// excerpt, an upstream's error text), which is cut to strata's own words.
std::string SpanErrorMessage(const util::Status& status);

}  // namespace strata::server
