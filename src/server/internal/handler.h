// server/internal/handler.h — serving one API request, apart from the HTTP
// library: admit it (draining, loading, API key), parse it, start its
// generation, and answer whole or as a stream of SSE frames. server.cpp adapts
// cpp-httplib to these types: it reads an ApiCall from the request, and writes
// the ApiReply back (through a FrameSink for a stream).
//
// Promise: every call gets a reply in its API's shape; an error reply's
// status, body and Retry-After come from MapError (server/api.h). Each reply
// carries X-Request-ID (and, for the Anthropic API, request-id). Every
// request's outcome is counted in strata_http_requests_total and, for the
// generation and embedding endpoints, logged in one access line prefixed
// "req=ID".
//
// Threading: ApiHandler is thread-safe (connections call it concurrently). A
// StreamResponder is run by the one thread that writes its response.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/gateway.h"
#include "obs/metrics.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/server.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/random.h"
#include "util/status.h"

namespace strata::server {

// One request as the transport read it.
struct ApiCall {
  std::string method;      // "POST"
  std::string path;        // "/v1/chat/completions"
  std::string_view body;   // borrowed until the handler returns
  std::string request_id;  // from ApiHandler::RequestId
  std::string api_key;     // x-api-key, else the Bearer token of Authorization; empty if none
};

// Where a streamed response's frames go.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // Sends one frame; false once the client is gone.
  virtual bool Write(std::string_view frame) = 0;
  // False once the client is gone (asked while no frame is due).
  virtual bool Connected() = 0;
};

// The frames of one streamed response, after its 200 and headers went out.
class StreamResponder {
 public:
  struct Context {
    ApiKind kind = ApiKind::kOpenAIChat;
    ResponseMeta meta;
    bool include_usage = false;
    bool logprobs = false;
    std::string method, path, request_id, tenant, session_note;
    std::chrono::steady_clock::time_point t0, deadline;
  };
  StreamResponder(std::unique_ptr<gateway::Generation> gen, Context context,
                  const util::Clock& clock, util::Logger& log)
      : gen_(std::move(gen)), c_(std::move(context)), clock_(clock), log_(log) {}

  // Writes every frame until the generation ends (then the API's terminator),
  // fails or times out (then an error frame), or the client leaves (then the
  // generation is cancelled); logs the outcome. False when the client left:
  // the transport aborts the response rather than ending it.
  bool Run(FrameSink& sink);

 private:
  std::unique_ptr<gateway::Generation> gen_;
  Context c_;
  const util::Clock& clock_;
  util::Logger& log_;
};

// A reply: a JSON body, or a 200 SSE stream whose frames `stream` writes.
struct ApiReply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type
  std::string body;                         // application/json; unused with `stream`
  std::shared_ptr<StreamResponder> stream;  // set: text/event-stream
};

class ApiHandler {
 public:
  ApiHandler(const ServerOptions& options, ApiKeys keys, obs::MetricsRegistry& metrics,
             const util::Clock& clock, util::Logger& log);

  // Until a gateway is set, API requests and /health answer 503 (loading).
  void SetGateway(gateway::Gateway* gateway) { gateway_.store(gateway); }
  // New generation and embedding requests get 503 (shutting down).
  void StartDraining() { draining_.store(true); }

  // The client's X-Request-ID when it is 1-128 of [A-Za-z0-9._-], else a new one.
  std::string RequestId(std::string_view given);

  // POST /v1/chat/completions, /v1/completions, /v1/messages.
  ApiReply Complete(ApiKind kind, const ApiCall& call);
  // POST /v1/embeddings.
  ApiReply Embed(const ApiCall& call);
  // GET /v1/models.
  ApiReply ListModels(const ApiCall& call);
  // GET /health: 200 ok, or 503 loading / draining.
  ApiReply Health() const;

  // `reply` (its headers kept) turned into the answer for `status` in
  // `kind`'s shape: MapError's HTTP status and Retry-After, RenderError's
  // body. Not logged or counted.
  static ApiReply ErrorReply(ApiKind kind, const util::Status& status, ApiReply reply = {});
  // What the transport answers on its own: no route (404), a body over the
  // limit (413), an unreadable request (any other status).
  util::Status TransportError(int http_status, std::string_view method,
                              std::string_view path) const;

 private:
  struct Admitted {
    gateway::Gateway* gateway = nullptr;
    std::string tenant;
  };
  struct Scope;  // one request's endpoint, start time, logger, session

  util::StatusOr<Admitted> Admit(bool check_draining, std::string_view api_key) const;
  util::StatusOr<std::string> Authenticate(std::string_view api_key) const;
  util::Status CheckModel(const gateway::Gateway& g, const std::string& model) const;
  util::StatusOr<ParsedRequest> Parse(ApiKind kind, const ApiCall& call,
                                      const Admitted& admitted) const;
  util::StatusOr<std::unique_ptr<gateway::Generation>> Start(gateway::Gateway& g,
                                                             const ParsedRequest& parsed,
                                                             ApiReply& reply) const;
  ResponseMeta Meta(ApiKind kind, const Scope& scope, const ParsedRequest& parsed,
                    const gateway::Generation& gen) const;
  ApiReply RespondWhole(Scope& scope, ApiReply reply, std::unique_ptr<gateway::Generation> gen,
                        ResponseMeta meta, const ParsedRequest& parsed, const std::string& tenant);
  ApiReply RespondStream(Scope& scope, ApiReply reply, std::unique_ptr<gateway::Generation> gen,
                         ResponseMeta meta, const ParsedRequest& parsed, const std::string& tenant);
  ApiReply Fail(const Scope& scope, ApiReply reply, const util::Status& status);
  void Count(const char* endpoint, int http_status);

  const ServerOptions options_;
  const ApiKeys keys_;
  const util::Clock& clock_;
  util::Logger& log_;
  obs::Family<obs::CounterValue>& requests_;
  std::atomic<gateway::Gateway*> gateway_{nullptr};
  std::atomic<bool> draining_{false};
  std::mutex id_mu_;
  util::Rng id_rng_;  // guarded by id_mu_
};

}  // namespace strata::server
