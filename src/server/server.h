// server — strata's HTTP front end: the OpenAI and Anthropic APIs over the
// gateway, plus /health and /metrics.
//
// Promise: every request gets an answer in its API's own shape: success, or
// an HTTP status with a JSON error body that says what was wrong (400 naming
// the field, 401 bad key, 404 unknown model, 413 body too large, 429 with
// Retry-After when the queue is full, 503 while loading or draining). Nothing
// a client sends can crash the server. Every response carries X-Request-ID
// (the client's, if it sent a sane one), and every log line of a request
// starts with it. Streams are Server-Sent Events exactly as each API sends
// them; a client that disconnects is cancelled at once.
//
// Threading: HTTP connections are served by a pool of threads; each request
// runs on one of them and talks to the gateway, which is thread-safe.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto srv, HttpServer::Create(opts, std::move(keys), metrics, clock,
//   log)); STRATA_ASSIGN_OR_RETURN(int port, srv->Start());   // serving; /health says 503
//   srv->SetGateway(gateway.get());                     // model loaded: 200
//   ...
//   srv->StartDraining(); scheduler->Drain(grace); srv->Stop();
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gateway/gateway.h"
#include "obs/metrics.h"
#include "server/auth.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0 = any free port (tests)
  size_t max_body_bytes = 4u << 20;  // larger bodies get 413
  int http_threads = 128;            // [2, 4096] connections served at once
  std::chrono::seconds request_timeout{
      600};                                // a request still running after this is cancelled (504)
  std::vector<std::string> model_aliases;  // "model" values accepted besides the served name
  uint64_t request_id_seed = 0;            // seeds generated request ids
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
  // New API requests get 503; requests already running continue.
  void StartDraining();
  // Stops listening and waits for the serving thread.
  void Stop();

 private:
  class Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::server
