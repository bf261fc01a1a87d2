// server — strata's HTTP front end: the OpenAI and Anthropic APIs over the
// gateway (the OpenAI paths also without /v1), Anthropic's token counting,
// llama.cpp's /tokenize and /detokenize, plus /health and /metrics.
//
// Promise: every request gets an answer in its API's own shape: success, or
// an HTTP status with a JSON error body that says what was wrong (400 naming
// the field, 401 bad key, 404 unknown model or route, 405 with Allow for a
// known path's wrong method, 413 body too large, 429 with
// Retry-After when the queue is full, 503 while loading or draining). Nothing
// a client sends can crash the server. Every response carries X-Request-ID
// (the client's, if it sent a sane one), and every log line of a request
// starts with it. Streams are Server-Sent Events exactly as each API sends
// them; a client that disconnects is cancelled at once. Limits hold before
// anything is parsed (net/http_server.h): 414/431 for the request line and
// headers, 413 for a body past the limit after decompression, 408 for a slow
// client; the API key, draining and loading are checked from the headers,
// before a body byte is read. With CORS origins set, a preflight from one of
// them is answered 204 without a key, and every answer to one carries the
// CORS headers; other origins get none. /health and /metrics are answered
// on the I/O thread from the head alone, so no backlog of API work delays
// them. A request cut at the end of the shutdown grace period ends with an
// error (a 503 body, or an error event in a stream), never as a normal stop.
//
// Threading: a few I/O threads (net::HttpServer) serve every connection and
// never block; a pool of worker threads parses, tokenizes and starts each
// API request (and waits out embeddings and relayed token counts) — a
// small generation request without a network-bound tier is started on the
// I/O thread itself, being well under a millisecond of CPU; a streaming or
// whole response is then fed from its generation on the connection's I/O
// thread as events become readable, so a request waiting on the model holds
// no thread. The gateway is thread-safe.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto srv, HttpServer::Create(opts, std::move(keys), metrics, clock,
//   log)); STRATA_ASSIGN_OR_RETURN(int port, srv->Start());   // serving; /health says 503
//   srv->SetGateway(gateway.get());                     // model loaded: 200
//   ...
//   srv->StartDraining(); scheduler->Drain(grace); srv->Stop(std::chrono::seconds(1));
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gateway/gateway.h"
#include "net/http_server.h"
#include "obs/metrics.h"
#include "obs/tracer.h"
#include "server/auth.h"
#include "server/compliance.h"
#include "server/snapshots.h"
#include "session/session.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::server {

struct ServerOptions {
  std::string host = "127.0.0.1";  // an IPv4 or IPv6 address
  int port = 8080;                 // 0 = any free port (tests)
  bool reuse_port = false;         // SO_REUSEPORT: share the port with other processes
  int io_threads = 2;              // [1, 256] threads serving connections; not used with `loops`
  // Borrowed, must outlive the server: serve connections on these loops
  // (shared with the upstream HTTP client, net/event_loops.h) instead of
  // io_threads of the server's own.
  net::EventLoops* loops = nullptr;
  int http_threads = 8;  // [1, 4096] workers that parse and start requests, and run embeddings
  size_t max_queued_requests = 1024;  // [1, 1e6] read requests waiting for a worker: more get 503
  // Every limit of the request reader (header, body, connections, timeouts);
  // max_body_bytes is the body after decompression.
  net::HttpLimits limits;
  std::chrono::seconds request_timeout{
      600};  // a request still running after this is cancelled (504)
  // "model" values that name the default model besides its own id; each is
  // listed by /v1/models after it. Responses name the served id.
  std::vector<std::string> model_aliases;
  // With exactly one model served, a request naming any other model is
  // served by it (responses name the served id); with several, it has no
  // effect (`strata serve` refuses the combination).
  bool accept_any_model = false;
  // Origins whose browser requests may read the answers (CORS); "*" = any.
  // Empty = CORS off: no CORS headers, and OPTIONS is a 405.
  std::vector<std::string> cors_origins;
  uint64_t request_id_seed = 0;  // seeds generated request ids
  // OpenTelemetry: every generation and embeddings request is traced by it
  // (server/internal/request_span.h). Null: nothing is recorded, and an
  // incoming traceparent is passed on to remote backends unchanged.
  std::shared_ptr<obs::Tracer> tracer;
  ComplianceOptions compliance;  // audit log and watermark (server/compliance.h)
  // Borrowed, must outlive the server: record completed generations as
  // request snapshots and serve GET /v1/snapshots/{id} (server/snapshots.h).
  // nullptr = off (that route answers 404).
  const SnapshotRecorder* snapshots = nullptr;
  // Borrowed, must outlive the server: durable sessions (L6). A chat
  // request with a session_id is answered on the stored conversation and
  // its turn stored (server/internal/session_turns.h), and /v1/sessions
  // reads and deletes them. nullptr = off: session_id only labels.
  session::SessionStore* sessions = nullptr;
};

// What a reload did (POST /admin/reload answers it as JSON; `strata serve`
// logs it on SIGHUP).
struct ReloadReport {
  // Not OK: nothing changed, and this says why (an invalid file: every
  // problem with its line).
  util::Status status;
  std::string source;  // the configuration file read ("" = flags only)
  struct Change {
    std::string key;       // "l1.ttl"
    std::string from, to;  // as TOML values
  };
  std::vector<Change> applied;           // live knobs now in force
  std::vector<Change> restart_required;  // changed in the file, left as they were
  std::vector<std::string> reread;       // files read again (key files)
};

class HttpServer {
 public:
  static util::StatusOr<std::unique_ptr<HttpServer>> Create(const ServerOptions& options,
                                                            ApiKeys keys,
                                                            obs::MetricsRegistry& metrics,
                                                            const util::Clock& clock,
                                                            util::Logger& log);
  ~HttpServer();

  // Binds and starts serving on a background thread; returns the bound port.
  // Unavailable (naming the address) if it cannot bind.
  util::StatusOr<int> Start();
  // Until this is called, API requests and /health answer 503 (model loading).
  void SetGateway(gateway::Gateway* gateway);
  // From now on /health answers 503 and every API request gets `why` (the
  // model file changed under the server); requests running are not touched.
  void SetBroken(util::Status why);
  // New API requests get 503; requests already running continue.
  void StartDraining();

  // Live changes (a reload); thread-safe. Requests that arrive from now on
  // see them; running ones keep what they started with.
  void SetApiKeys(ApiKeys keys);
  // The admin key (nullopt: none). With one, the admin API (POST
  // /admin/reload) and the dashboard need it, as "Authorization: Bearer
  // KEY" or HTTP Basic with KEY as the password (so a browser can log in);
  // without one, /admin/reload answers 403, and the dashboard is open only
  // while no API keys are configured either (a server with tenants does not
  // show their traffic to anyone who asks).
  void SetAdminKey(std::optional<std::string> key);
  void SetRequestTimeout(std::chrono::seconds timeout);
  // What POST /admin/reload runs (on a worker thread; it may read files),
  // after the admin key was checked. Without one, the endpoint answers 503.
  void SetReloadHook(std::function<ReloadReport()> reload);
  // What GET /admin/canary answers and the dashboard shows of a canary
  // rollout: its state as JSON, read on an I/O thread (it must be quick).
  // Without one, /admin/canary answers 404.
  void SetCanaryStateHook(std::function<std::string()> state);
  // Waits up to `flush` for responses still going out (a drained stream's
  // last frames), then closes every connection and joins every thread.
  void Stop(std::chrono::milliseconds flush = std::chrono::milliseconds(0));
  // The connection counters (open, refused, displaced, rejected by a limit).
  net::HttpServerStats Stats() const;

 private:
  class Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::server
