// backend/internal/remote_state.h — what remote.cpp (the backend, its
// health checks) and remote_run.cpp (a request in flight) share: the
// backend's state, a prepared request, how an outcome bears on a replica's
// health, and the start of a run (private to backend/).
//
// Threading: State is immutable once created but for its router
// (thread-safe), its live options (an atomic snapshot) and its counters.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/remote.h"
#include "obs/tracer.h"

namespace strata::backend {

// Everything a backend's runs and health checks share; immutable but for
// the router (thread-safe) and the counters.
struct RemoteBackend::State {
  // A replica as a CLIENT span names it (server.address, server.port).
  struct Address {
    std::string host;
    int port = 0;
  };
  RemoteOptions options;  // as created; the live fields are read from `live`
  // Replaced whole by Reconfigure; a run keeps the one it started with.
  std::atomic<std::shared_ptr<const RemoteLiveOptions>> live;
  std::vector<std::string> bases;  // each replica's base URL, normalised
  std::vector<Address> addresses;  // each replica's host and port
  net::HttpClient& client;
  const util::Clock& clock;
  util::Logger& log;
  std::unique_ptr<Router> router;
  uint64_t fingerprint = 0;
  obs::CounterValue* retries = nullptr;
  obs::Family<obs::CounterValue>* failures = nullptr;
  obs::CounterValue* prompt_tokens = nullptr;
  obs::CounterValue* cached_tokens = nullptr;
  obs::CounterValue* cache_write_tokens = nullptr;

  State(RemoteOptions o, net::HttpClient& c, const util::Clock& k, util::Logger& l)
      : options(std::move(o)), client(c), clock(k), log(l) {}

  // The auth and version headers of every upstream request (the credential
  // of `live`); `stream`: the answer is asked for as a stream.
  net::Headers Headers(const RemoteLiveOptions& l, bool json_body, bool stream) const {
    net::Headers h;
    if (json_body) h.Set("Content-Type", "application/json");
    h.Set("Accept", stream ? "text/event-stream" : "application/json");
    if (options.api == upstream::Api::kAnthropic) {
      h.Set("anthropic-version", options.anthropic_version);
      if (!l.credential.empty()) h.Set("x-api-key", l.credential);
    } else if (!l.credential.empty()) {
      h.Set("Authorization", "Bearer " + l.credential);
    }
    return h;
  }

  // One call to a replica on behalf of a request traced by `trace` (may be
  // null): a CLIENT span (empty unless the trace records) named for the
  // operation and the upstream model, and the trace context for `h`: the
  // span as the upstream's parent, the request's tracestate as it came.
  obs::Span StartCall(const obs::RequestTrace* trace, const char* operation, int32_t replica,
                      net::Headers& h) const {
    obs::Span span;
    if (trace == nullptr) return span;
    span = trace->StartSpan(fmt::format("{} {}", operation, options.upstream_model),
                            obs::SpanKind::kClient, clock.Now());
    if (span.recording()) {
      const Address& a = addresses[static_cast<size_t>(replica)];
      span.SetString("gen_ai.operation.name", operation);
      span.SetString("gen_ai.provider.name", upstream::ApiName(options.api));
      span.SetString("gen_ai.request.model", options.upstream_model);
      span.SetString("server.address", a.host);
      span.SetInt("server.port", a.port);
      span.SetString("strata.backend", options.name);
    }
    h.Set("traceparent", trace->OutgoingTraceparent(span.id()));
    if (!trace->tracestate().empty()) h.Set("tracestate", trace->tracestate());
    return span;
  }
};

namespace internal {

// What Prepare learned: the upstream request and where it goes.
struct RemotePrepared final : Prepared {
  upstream::Call call;
  RouteKey route;
  bool chat = true;
  // A JSON answer asked of an Anthropic upstream as a forced tool call: the
  // call's input is the answer's text, its tool_use stop an end of turn.
  bool answer_in_tool = false;
};

// How an upstream HTTP status bears on its replica's health.
Outcome OutcomeOfHttp(int status);
// How a finished call's status does: a failure of the request itself (its
// own 4xx, a cancellation) is neutral.
Outcome OutcomeOf(const util::Status& st);

// Sends `body` (the prepared call's, or one rendered with a capped
// max_tokens) through the replicas and pushes what comes back to `sink`:
// the Run that RemoteBackend::Start returns (remote.h has the promise).
std::shared_ptr<Run> StartRemoteRun(std::shared_ptr<RemoteBackend::State> state,
                                    std::shared_ptr<const RemotePrepared> prepared,
                                    std::string body, int32_t n_choices,
                                    std::vector<std::string> stops, std::shared_ptr<Sink> sink,
                                    std::string terms, bool traced, std::string request_id,
                                    std::shared_ptr<obs::RequestTrace> trace);

}  // namespace internal
}  // namespace strata::backend
