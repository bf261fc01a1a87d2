// net/http_client.h — an event-driven HTTP/1.1 client on the server's I/O
// model: a request waiting seconds on a remote model holds no thread. It
// speaks http:// and https:// (TLS 1.2 or later, over OpenSSL).
//
// Promise: every request has deadlines for connecting, for the response's
// first byte, for each gap between body bytes and in total, and a bound on
// the response head (and, for Fetch, the body); hitting one ends the request
// with DeadlineExceeded or ResourceExhausted naming it, never a hang. A
// failure's reason says how far it got: kUpstreamUnavailable when nothing
// was sent (the name did not resolve, the connection was refused or did not
// open in time, the TLS handshake failed or the server's certificate did
// not verify: safe to send elsewhere), kUpstreamTimeout for a deadline
// after that, kUpstreamProtocol for a malformed response, kUpstreamError for
// a connection that broke. The
// body reaches the caller as it arrives (chunked framing removed), and a
// caller that cannot keep up Pauses reading, which stops the bytes at the
// socket (TCP flow control) instead of buffering them. Kept-alive
// connections are pooled per host and reused; a request that fails on a
// reused connection before any response byte arrived is retried once on a
// fresh one (the server may have closed it idle). Cancel ends a request at
// once. Every request ends with exactly one on_done.
//
// TLS: the server's certificate must chain to the system's trust store (or
// to `ca_file`) and be for the URL's host (its DNS name, or its IP address
// when the URL has one); the name goes out as SNI. The connect deadline
// covers the handshake. A handshake or verification failure is Unavailable
// naming the host and OpenSSL's reason. Connections are pooled per scheme,
// host and port, and behave as plain ones do (reuse, retry, Pause, Cancel).
// Create reads the system trust store once (tens of milliseconds), so no
// I/O thread ever does.
//
// Shared loops (net/event_loops.h): a client created over a server's loops
// runs a call started on one of their threads on that thread, with a pool of
// kept-alive connections per loop, so the server's connection and its
// upstream call never change threads. Calls started anywhere else, Fetch,
// After and their timers run on the client's own io_threads, as without.
// Stop cancels the calls on shared loops too, and returns once that is done.
//
// Threading: Start, Fetch and a ClientCall's methods are thread-safe; the
// callbacks run on the call's I/O thread (the caller's, for a call started
// on a shared loop) and must not block. Fetch blocks its caller and must
// not be called from a callback.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto client, net::HttpClient::Create({}, log));
//   ClientRequest r{.method = "POST", .url = "http://127.0.0.1:8000/v1/chat/completions",
//                   .body = json};
//   auto call = client->Start(r, {.on_head = ..., .on_body = ..., .on_done = ...});
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "net/event_loops.h"
#include "net/http.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::net {

struct HttpClientOptions {
  int io_threads = 1;  // [1, 64] the client's own (besides shared loops)
  std::chrono::milliseconds connect_timeout{10'000};      // name lookup, TCP connect, TLS handshake
  std::chrono::milliseconds first_byte_timeout{120'000};  // request sent to response head
  std::chrono::milliseconds idle_timeout{60'000};         // between body bytes
  std::chrono::milliseconds total_timeout{600'000};       // the whole exchange
  size_t max_response_header_bytes = 64u << 10;           // [1 KiB, 16 MiB]
  size_t max_fetch_body_bytes = 64u << 20;                // what Fetch buffers
  int32_t max_idle_per_host = 32;                         // pooled kept-alive connections
  std::chrono::milliseconds pool_idle_timeout{30'000};    // a pooled connection is closed after
  // https: a PEM file of extra certificates to trust (a private CA) besides
  // the system's; "" = the system's only. Create fails if it cannot be read.
  std::string ca_file;
  // https: false accepts any certificate for any name (tests, or an explicit
  // opt-out; Create logs a warning). Never for traffic that matters.
  bool tls_verify = true;
};

struct ClientRequest {
  std::string method = "GET";
  std::string url;  // "http[s]://host[:port]/path?query" (host may be [IPv6])
  Headers headers;  // Host, Content-Length and Connection are set by the client
  std::string body;
  // Overrides of the client's deadlines for this request.
  std::optional<std::chrono::milliseconds> first_byte_timeout;
  std::optional<std::chrono::milliseconds> total_timeout;
};

struct ClientResponseHead {
  int status = 0;
  Headers headers;
};

struct ClientCallbacks {
  std::function<void(const ClientResponseHead&)> on_head;  // once, before any body
  std::function<void(std::string_view)> on_body;           // body bytes as they arrive
  std::function<void(const util::Status&)> on_done;        // once, last: OK after the whole body
};

// One request in flight.
class ClientCall {
 public:
  virtual ~ClientCall() = default;
  // Ends the request now: on_done gets Cancelled (unless it already ran).
  virtual void Cancel() = 0;
  // Stops / restarts reading the response body (backpressure). The idle
  // deadline does not run while paused; the total one does.
  virtual void Pause() = 0;
  virtual void Resume() = 0;
};

struct ClientResponse {
  int status = 0;
  Headers headers;
  std::string body;
};

struct HttpClientStats {
  int64_t requests = 0;
  int64_t connections_opened = 0;
  int64_t connections_reused = 0;
  int64_t retries = 0;
};

class HttpClient {
 public:
  // `log` is borrowed and must outlive the client; so must `loops` (shared
  // loops, see above; null = none), which must also keep running until the
  // client has stopped.
  static util::StatusOr<std::unique_ptr<HttpClient>> Create(const HttpClientOptions& options,
                                                            util::Logger& log,
                                                            EventLoops* loops = nullptr);
  virtual ~HttpClient() = default;

  // Starts `request`; InvalidArgument (through on_done) for a malformed URL.
  virtual std::shared_ptr<ClientCall> Start(ClientRequest request, ClientCallbacks callbacks) = 0;
  // Start, waiting for the whole response (at most max_fetch_body_bytes).
  virtual util::StatusOr<ClientResponse> Fetch(ClientRequest request) = 0;
  virtual HttpClientStats Stats() const = 0;
  // Runs `fn(false)` on an I/O thread once `delay` has passed (a retry's
  // backoff, a health check's schedule), or `fn(true)` when the client stops
  // first. `fn` must not block.
  virtual void After(std::chrono::nanoseconds delay, std::function<void(bool stopped)> fn) = 0;
  // Cancels everything in flight and joins the I/O threads (also on
  // destruction). Never from an I/O thread of the client or its shared loops.
  virtual void Stop() = 0;
};

}  // namespace strata::net
