// server/internal/handler.h — serving one API request, apart from the HTTP
// library: admit it (draining, loading, API key), parse it, start its
// generation, and answer whole or as a stream of SSE frames. server.cpp adapts
// net::HttpServer to these types: it reads an ApiCall from the request, runs
// the handler on a worker thread, and writes the ApiReply back (pumping its
// Responder on the connection's I/O thread).
//
// Promise: every call gets a reply in its API's shape; an error reply's
// status, body and Retry-After come from MapError (server/api.h). Each reply
// carries X-Request-ID (and, for the Anthropic API, request-id). Every
// request's outcome is counted in strata_http_requests_total and, for the
// generation and embedding endpoints, logged in one access line prefixed
// "req=ID". Nothing here waits on a generation: Complete returns once the
// generation has started, and its Responder reads events only when told
// they are readable.
//
// Threading: ApiHandler is thread-safe (worker threads call it
// concurrently). A Responder belongs to the one thread that writes its
// response.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/gateway.h"
#include "obs/metrics.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/internal/audit_hook.h"
#include "server/internal/request_span.h"
#include "server/internal/session_turns.h"
#include "server/server.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/random.h"
#include "util/status.h"
#include "util/work_queue.h"

namespace strata::server {

class ApiHandler;
class Responder;

// One request as the transport read it.
struct ApiCall {
  std::string method;         // "POST"
  std::string path;           // "/v1/chat/completions"
  std::string query = {};     // what followed '?' in the target ("limit=10&after=s1"), or ""
  std::string if_match = {};  // If-Match: a session's expected number of turns ("3" or "\"3\"")
  std::string_view body;      // borrowed until the handler returns
  std::string request_id;     // from ApiHandler::RequestId
  std::string api_key;        // x-api-key, else the Bearer token of Authorization; empty if none
  // Every traceparent and tracestate field's value (W3C Trace Context), in
  // order; borrowed like `body`.
  std::vector<std::string_view> traceparent = {};
  std::vector<std::string_view> tracestate = {};
};

// A reply: a JSON body, or, with `responder`, a response that comes from a
// running generation (a stream, or a whole body once it ends).
struct ApiReply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type
  std::string body;                                          // unused with `responder`
  std::string content_type;                                  // "" = application/json
  std::shared_ptr<Responder> responder;                      // set: the generation answers
};

// One started generation turned into its API's response, event by event,
// without ever waiting: the transport calls Pump when WhenReady says events
// are readable (or its client drained output) and writes what Pump returns.
// A whole response is assembled until the generation ends; a stream gives
// its SSE frames as they come.
//
// Threading: WhenReady's callback runs on whatever thread makes an event
// readable (the scheduler thread) and must only hand off; every other method
// is called by the one thread that owns the response (the connection's I/O
// thread).
class Responder {
 public:
  struct Context {
    ApiKind kind = ApiKind::kOpenAIChat;
    const char* endpoint = "";
    bool stream = false;
    ResponseMeta meta;
    bool include_usage = false;
    bool logprobs = false;
    std::string method, path, request_id, tenant, session_note;
    std::chrono::steady_clock::time_point t0, deadline;
    std::chrono::seconds timeout{0};
    // A stream's head waits for the first event: a run that fails before
    // it (a remote backend down) answers as a whole error response.
    bool defer_head = false;
    bool tools = false;     // the request offered tools
    RequestSpan span = {};  // the request's root span, ended with the response
    RequestAudit audit;     // its audit record and watermark (server/compliance.h)
  };
  // What to send now.
  struct Output {
    std::string frames;  // a stream's SSE bytes (the terminator or an error frame included)
    bool done = false;   // the response is complete; `reply` is a whole response's answer
    bool more = false;   // Pump stopped at its byte budget: events are still readable
    // A stream whose head never went out failed: `reply` is its whole answer
    // (status and error body in the API's shape).
    bool whole = false;
    ApiReply reply;
  };
  Responder(std::unique_ptr<gateway::Generation> gen, Context context, ApiReply reply,
            ApiHandler& handler, const util::Clock& clock, util::Logger& log);
  ~Responder();

  bool streaming() const { return c_.stream; }
  // The stream's head (status, headers) waits for its first frames.
  bool defers_head() const { return c_.stream && c_.defer_head; }
  // The reply whose status and headers start a stream (200, text/event-stream).
  const ApiReply& head() const { return reply_; }
  std::chrono::steady_clock::time_point deadline() const { return c_.deadline; }

  // `ready` runs once the next Pump has an event to read (at once if it has).
  void WhenReady(std::function<void()> ready) { gen_->NotifyWhenReady(std::move(ready)); }
  // Reads the events readable now, stopping once `max_bytes` of frames are due.
  Output Pump(size_t max_bytes = SIZE_MAX);
  // The request's deadline passed: the generation is cancelled; a whole
  // response becomes its API's 504, a stream ends with an error frame.
  Output Expire();
  // The client went away (`why`): the generation is cancelled, the outcome logged.
  void Abandon(std::string_view why);

 private:
  Output Finish(Output out, const util::Status& status);
  void Log(std::string_view note);
  // A deferred stream's first event arrived: its start frames go out now.
  void StartStream(Output& out);
  // What a finish event tells the response's usage (prompt, cached tokens).
  void Absorb(const gateway::Event& e);

  std::unique_ptr<gateway::Generation> gen_;
  Context c_;
  ApiReply reply_;
  ApiHandler& handler_;
  const util::Clock& clock_;
  util::Logger& log_;
  std::vector<ChoiceResult> results_;  // a whole response's choices so far
  StreamState stream_;                 // a stream's frames so far
  int32_t completion_ = 0;             // a stream's completion tokens so far
  bool started_ = false;               // a stream's first frame went out
  bool ended_ = false;                 // done: every later call is a no-op
};

class ApiHandler {
 public:
  ApiHandler(const ServerOptions& options, ApiKeys keys, obs::MetricsRegistry& metrics,
             const util::Clock& clock, util::Logger& log);

  // Until a gateway is set, API requests and /health answer 503 (loading).
  void SetGateway(gateway::Gateway* gateway) { gateway_.store(gateway); }
  // The gateway set last; nullptr while the model loads.
  const gateway::Gateway* gateway() const { return gateway_.load(); }
  // The same, for the admin API's changes to it (cache invalidation).
  gateway::Gateway* admin_gateway() const { return gateway_.load(); }
  // New generation and embedding requests get 503 (shutting down).
  void StartDraining() { draining_.store(true); }
  // Live changes (a reload): requests authenticated or started from now on
  // see them. Thread-safe.
  void SetApiKeys(ApiKeys keys) { keys_.store(std::make_shared<const ApiKeys>(std::move(keys))); }
  void SetRequestTimeout(std::chrono::milliseconds timeout) {
    request_timeout_ms_.store(timeout.count());
  }
  // Whether API keys are configured (requests then need one).
  bool has_api_keys() const { return !keys_.load()->empty(); }
  // From now on /health answers 503 naming `why`, and every API request gets
  // `why` (the served model file changed under the server). Thread-safe.
  void SetBroken(util::Status why);

  // The checks a request passes on its head alone, before its body is read:
  // draining, loading, a broken model, the API key. The error reply (counted
  // and logged) when one fails, else nullopt.
  std::optional<ApiReply> Screen(ApiKind kind, const char* endpoint, const ApiCall& call,
                                 bool check_draining);

  // Whether Complete on a body of `body_bytes` is short CPU work (parse,
  // tokenize, an L1/L3 lookup, a submit) that an I/O thread may run itself
  // rather than hand to a worker: small bodies, and no tier that waits on
  // the network.
  bool CompletesQuickly(size_t body_bytes) const;

  // The client's X-Request-ID when it is 1-128 of [A-Za-z0-9._-], else a new one.
  std::string RequestId(std::string_view given);

  // POST /v1/chat/completions, /v1/completions, /v1/messages.
  ApiReply Complete(ApiKind kind, const ApiCall& call);
  // POST /v1/embeddings.
  ApiReply Embed(const ApiCall& call);
  // GET /v1/models.
  ApiReply ListModels(const ApiCall& call);
  // POST /v1/messages/count_tokens (Anthropic): {"input_tokens": N}, the
  // prompt exactly as /v1/messages renders and tokenizes it on the local
  // engine; relayed to an Anthropic upstream; 400 kUnsupportedByBackend on
  // an OpenAI one. Waits on the upstream: call it on a worker thread.
  ApiReply CountTokens(const ApiCall& call);
  // POST /tokenize and /detokenize (llama.cpp's server shapes) on the local
  // model's vocabulary; 400 kUnsupportedByBackend for a remote model.
  ApiReply Tokenize(const ApiCall& call);
  ApiReply Detokenize(const ApiCall& call);
  // GET /health: 200 ok, or 503 loading / draining.
  ApiReply Health() const;
  // GET /v1/snapshots/{request_id}: the caller's tenant's request snapshot
  // (server/snapshots.h); 400 for an id that cannot be a request id, 404 when
  // there is none for this tenant or snapshots are off. Reads a file: call
  // it on a worker thread. In internal/snapshot_read.cpp.
  ApiReply ReadSnapshot(const ApiCall& call);
  // Durable sessions (session/session.h), the caller's tenant's only:
  // GET /v1/sessions?limit=N&after=ID, GET and DELETE /v1/sessions/{id}.
  // 404 when sessions are off or the tenant has no such session. Read and
  // write the store: call them on a worker thread. In internal/session_api.cpp.
  ApiReply ListSessions(const ApiCall& call);
  ApiReply ReadSession(const ApiCall& call);
  ApiReply DeleteSession(const ApiCall& call);

  // `reply` (its headers kept) turned into the answer for `status` in
  // `kind`'s shape: MapError's HTTP status and Retry-After, RenderError's
  // body. Not logged or counted.
  static ApiReply ErrorReply(ApiKind kind, const util::Status& status, ApiReply reply = {});
  // An empty reply that names the request: X-Request-ID, and for the
  // Anthropic API also request-id (what its SDKs read).
  static ApiReply NewReply(ApiKind kind, const std::string& request_id);
  // What the transport answers on its own, with its reason: no route (404),
  // or a request the reader refused — 408, 413, 414, 415, 431, 501, 505, 503
  // at the connection cap, 400 for anything else malformed. `why` is what the
  // reader found (its message is kept); OK when it said nothing.
  util::Status TransportError(int http_status, std::string_view method, std::string_view path,
                              const util::Status& why = util::OkStatus()) const;

 private:
  struct Admitted {
    gateway::Gateway* gateway = nullptr;
    std::string tenant;
  };
  struct Scope;  // one request's endpoint, start time, logger, session

  util::StatusOr<Admitted> Admit(bool check_draining, std::string_view api_key) const;
  util::StatusOr<std::string> Authenticate(std::string_view api_key) const;
  // The served model id `model` names (itself, or an alias of the default
  // backend, or with accept_any_model and one model served, anything);
  // NotFound with kModelNotFound otherwise.
  util::StatusOr<std::string> ResolveModel(const gateway::Gateway& g,
                                           const std::string& model) const;
  util::StatusOr<ParsedRequest> Parse(ApiKind kind, const ApiCall& call,
                                      const Admitted& admitted) const;
  util::StatusOr<std::unique_ptr<gateway::Generation>> Start(gateway::Gateway& g,
                                                             const ParsedRequest& parsed,
                                                             ApiReply& reply) const;
  ResponseMeta Meta(ApiKind kind, const Scope& scope, const ParsedRequest& parsed,
                    const gateway::Generation& gen) const;
  // A chat request's session_id on a server with sessions: the stored
  // conversation put in front of its messages (server/internal/
  // session_turns.h), and the turn to store when it is answered.
  util::StatusOr<SessionTurn> PlanSession(ParsedRequest& parsed, const std::string& tenant,
                                          const ApiCall& call);
  ApiReply Respond(Scope& scope, ApiReply reply, std::unique_ptr<gateway::Generation> gen,
                   ResponseMeta meta, const ParsedRequest& parsed, const std::string& tenant,
                   RequestAudit audit);
  ApiReply Fail(const Scope& scope, ApiReply reply, const util::Status& status);
  // The backend serving the token endpoints' optional "model" (absent: the
  // default), with the id it is served as.
  util::StatusOr<std::pair<backend::Backend*, std::string>> TokenBackend(
      const gateway::Gateway& g, const std::optional<std::string>& model) const;
  // The most tokens /tokenize answers or /detokenize reads for `b`.
  static size_t TokenCap(const backend::Backend& b);
  void Count(const char* endpoint, int http_status);
  // One generation request of `tenant` that ended (`result` "ok", "error" or
  // "cancelled"), how the cache served it, and its tokens: the per-tenant
  // series (strata_tenant_*). The label set is bounded by the API key file.
  void CountTenant(const std::string& tenant, const char* result, gateway::CacheOutcome cache,
                   int64_t prompt_tokens, int64_t completion_tokens);
  friend class Responder;  // counts and renders the outcome of what it answers

  const ServerOptions options_;
  // The API keys in force: replaced whole by SetApiKeys, read once per request.
  std::atomic<std::shared_ptr<const ApiKeys>> keys_;
  std::atomic<int64_t> request_timeout_ms_;  // options_'s, until SetRequestTimeout
  const util::Clock& clock_;
  util::Logger& log_;
  obs::Family<obs::CounterValue>& requests_;
  obs::Family<obs::CounterValue>& tenant_requests_;  // tenant, result, cache
  obs::Family<obs::CounterValue>& tenant_tokens_;    // tenant, kind (prompt, completion)
  std::atomic<gateway::Gateway*> gateway_{nullptr};
  std::atomic<bool> draining_{false};
  std::atomic<bool> broken_{false};  // set once, with broken_why_
  mutable std::mutex broken_mu_;
  util::Status broken_why_;  // guarded by broken_mu_
  std::mutex id_mu_;
  util::Rng id_rng_;  // guarded by id_mu_
  // With durable sessions: the threads that store answered turns (an fsync,
  // or a round trip to Redis and its replicas), off the I/O threads that
  // read the answers. Declared last: destroyed first, while the store and
  // everything else its jobs touch still exist.
  std::unique_ptr<util::WorkQueue> session_workers_;
};

// One request's access-log context.
struct ApiHandler::Scope {
  Scope(ApiKind k, const char* e, const ApiCall& c, std::chrono::steady_clock::time_point start,
        util::Logger& base)
      : kind(k), endpoint(e), call(c), t0(start), log(base, "req=" + c.request_id) {}
  ApiKind kind;
  const char* endpoint;
  const ApiCall& call;
  std::chrono::steady_clock::time_point t0;
  mutable util::PrefixLogger log;  // logging does not change what the scope says
  std::string session_note;        // " session=ID" once the body named one
  // The request's trace; Fail ends its span, Respond hands it to the Responder.
  mutable RequestSpan span;
};

}  // namespace strata::server
