// net/http_server.h — an event-driven HTTP/1.1 server: a few I/O threads
// serve any number of connections.
//
// Promise: a slow or hostile client costs a bounded buffer, never a thread.
// Every limit is enforced while reading, before the handler sees anything:
// the request line (414), header bytes and field count (431), the body after
// decompression, fixed-length and chunked alike (413, also for a
// decompression ratio beyond the cap), an unknown Content-Encoding (415),
// and per-phase deadlines (408 for headers and body; an idle kept-alive
// connection is closed). The handler sees a request's head before its body
// and may answer at once (a 401 for a missing key, say) without reading the
// body. Keep-alive and pipelining are supported: responses go out in request
// order. A response is written whole or streamed (chunked); output is
// buffered up to HttpLimits::max_buffered_output per connection, the handler
// is told when the client has drained it (OnWritable), and a client that
// accepts no bytes for write_stall_timeout is dropped. When the client goes
// away — a failed write, a reset, the server stopping — the exchange's cancel
// callback runs once. A client that half-closes after sending still gets its
// answer: on end-of-input during a request the server sends one interim
// "100 Continue" (HTTP/1.1 clients must skip 1xx responses), which a closed
// peer answers with a reset that then cancels the request.
// Connections are capped in total and per client address; at the cap, a new
// connection displaces the oldest one still waiting for a request's headers
// (a slow-header flood cannot lock out new clients), or is refused with 503
// when there is none. Listening fails loudly when the address is in use
// (SO_REUSEPORT only when asked for); IPv4 and IPv6 addresses both work.
//
// Threading: Start/Stop/SetDraining from one owner thread (never an I/O
// thread). The handler is
// called on the I/O thread that owns the connection and must not block: it
// hands work elsewhere and answers later through the Exchange. An Exchange's
// methods are called on its connection's I/O thread only; Post() is the one
// thread-safe entry, for work finished elsewhere.
//
// Usage:
//   class MyHandler : public net::HttpHandler { ... };
//   STRATA_ASSIGN_OR_RETURN(auto srv, net::HttpServer::Create(opts, handler, log));
//   STRATA_ASSIGN_OR_RETURN(int port, srv->Start());
//   ...
//   srv->Stop();  // closes every connection, joins the I/O threads
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "net/event_loops.h"
#include "net/http.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::net {

// What the server accepts. Every field has a flag on `strata serve`
// (docs/api.md, "Limits").
struct HttpLimits {
  size_t max_request_line_bytes = 8u << 10;  // [64, 1 MiB] method, target, version: longer is 414
  size_t max_header_bytes = 32u << 10;       // [1 KiB, 16 MiB] request line and fields: more is 431
  int32_t max_header_fields = 100;           // [1, 10000] more fields is 431
  size_t max_body_bytes = 4u << 20;          // [1 KiB, 1 GiB] after decompression: more is 413
  // [1, 1e6] decompressed / compressed bytes, checked once a body has
  // decompressed past 1 MiB (or the body limit, if lower): more is 413.
  double max_inflate_ratio = 100;
  std::chrono::milliseconds header_timeout{10'000};  // first byte to the end of the headers: 408
  std::chrono::milliseconds body_timeout{30'000};  // end of the headers to the end of the body: 408
  std::chrono::milliseconds idle_timeout{30'000};  // a kept-alive connection between requests
  // A response the client does not read: no byte accepted for this long
  // while output waits, the connection is dropped and the request cancelled.
  std::chrono::milliseconds write_stall_timeout{30'000};
  size_t max_buffered_output = 1u << 20;     // [4 KiB, 1 GiB] response bytes queued per connection
  int32_t max_connections = 10000;           // [1, 1e6] open connections in all
  int32_t max_connections_per_client = 256;  // [1, 1e6] open connections of one client address
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // an IPv4 or IPv6 address ("::" listens on both families)
  int port = 8080;                 // 0 = any free port
  int io_threads = 2;              // [1, 256]; not used with `loops`
  // Borrowed, must outlive the server: serve on these loops (shared with an
  // HttpClient, net/event_loops.h) instead of io_threads of the server's own.
  EventLoops* loops = nullptr;
  bool reuse_port = false;  // SO_REUSEPORT: let other processes listen on the same port
  HttpLimits limits;
};

// The request line and header fields, as received.
struct RequestHead {
  std::string method;  // "POST"
  std::string target;  // "/v1/chat/completions?x=1"
  int version = 11;    // 10 or 11
  Headers headers;
  std::string remote;  // the client's address, "127.0.0.1" or "::1"
  bool keep_alive = true;
  // The target without its query.
  std::string_view path() const;
};

// How an exchange ended, for the handler's cancel callback.
enum class CancelReason {
  kClientGone,     // a write failed, or the client reset the connection
  kWriteStalled,   // the client read nothing for write_stall_timeout
  kServerStopped,  // HttpServer::Stop
};
std::string_view CancelReasonName(CancelReason reason);

// One request and its response. Owned by the connection's I/O thread.
class Exchange {
 public:
  virtual ~Exchange() = default;

  // Runs `fn` on the connection's I/O thread. Thread-safe. If the connection
  // is gone `fn` still runs (and every method below is then a no-op), unless
  // the server has stopped.
  virtual void Post(std::function<void()> fn) = 0;

  // The whole response; the exchange is then done.
  virtual void Respond(Response response) = 0;
  // Starts a streamed response (chunked for HTTP/1.1; for HTTP/1.0 the body
  // ends when the connection closes).
  virtual void StartStream(int status, Headers headers) = 0;
  // Appends to a started stream. Bytes beyond max_buffered_output are still
  // queued (nothing is lost), but a handler should wait for OnWritable once
  // congested() says so.
  virtual void Write(std::string data) = 0;
  // Ends a started stream; the exchange is then done.
  virtual void End() = 0;

  // Output queued and not yet accepted by the client, in bytes.
  virtual size_t buffered_bytes() const = 0;
  // buffered_bytes() >= max_buffered_output.
  virtual bool congested() const = 0;
  // `fn` runs (on the I/O thread) each time congested output drains below half
  // the limit. Replaces the previous callback. Both callbacks are dropped
  // when the exchange ends, so they may hold the exchange itself.
  virtual void OnWritable(std::function<void()> fn) = 0;
  // `fn` runs once, on the I/O thread, if the exchange ends without being
  // done: the client went away, stalled, or the server stopped. Set it before
  // handing work elsewhere; if the exchange is already cancelled it runs now.
  virtual void OnCancel(std::function<void(CancelReason)> fn) = 0;
  virtual bool cancelled() const = 0;
  // Calls `fn` on the I/O thread after `timeout` unless the exchange is done
  // or cancelled first. One timeout per exchange; a second call replaces it.
  virtual void SetTimeout(std::chrono::milliseconds timeout, std::function<void()> fn) = 0;
  // The request's head (valid for the exchange's lifetime).
  virtual const RequestHead& head() const = 0;
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // The head is complete and within the limits; no body byte has been read.
  // Return a response to answer now (the body, if any, is not read and the
  // connection closes after the response), or nullopt to read the body.
  // I/O thread; must not block.
  virtual std::optional<Response> OnHead(const RequestHead& head) = 0;
  // The body is complete and decoded (chunked framing and Content-Encoding
  // removed). Answer through `exchange`, now or later. I/O thread; must not
  // block: hand slow work to another thread and Post back.
  virtual void OnRequest(std::shared_ptr<Exchange> exchange, std::string body) = 0;
  // The body of an answer the server gives itself (400, 408, 413, 414, 415,
  // 431, 501, 505, and 503 when refusing a connection): `head` is null when
  // the request line or headers could not be read. The default is
  // {"error": {"message": ..., "type": "invalid_request_error"}}. The server
  // adds "Connection: close". I/O thread; must not block.
  virtual Response LimitResponse(const RequestHead* head, int status, const util::Status& why);
};

// Counters the server keeps; read with Stats() from any thread.
struct HttpServerStats {
  int64_t connections_open = 0;
  int64_t connections_accepted = 0;
  int64_t connections_refused =
      0;  // refused at accept: per-client cap, or full with none displaceable
  int64_t connections_displaced = 0;  // closed to make room (oldest waiting for headers)
  int64_t requests = 0;               // request heads parsed
  int64_t rejected_by_limit = 0;      // answered 408/413/414/415/431/400 by the server itself
};

// One request read from `chunks` (arriving in that order) exactly as a
// connection reads it: the same parser, limits and body decoding, without a
// socket. `status` is 0 when a whole request was read, else the HTTP status
// the server would answer with (and `error` why); 0 with `complete` false
// means the bytes end before the request does. For tests and fuzzing.
struct ParsedHttpRequest {
  bool complete = false;
  int status = 0;
  util::Status error;
  RequestHead head;
  std::string body;
  size_t consumed = 0;  // bytes of the request (a pipelined next one starts here)
};
ParsedHttpRequest ParseHttpRequest(std::span<const std::string_view> chunks,
                                   const HttpLimits& limits);

class HttpServer {
 public:
  // `handler`, `log` and `clock` (for the Date header) are borrowed and must
  // outlive the server. InvalidArgument names an option out of its range.
  static util::StatusOr<std::unique_ptr<HttpServer>> Create(const HttpServerOptions& options,
                                                            HttpHandler& handler, util::Logger& log,
                                                            const util::Clock& clock);
  virtual ~HttpServer() = default;

  // Binds, listens and starts the I/O threads; returns the bound port.
  // Unavailable naming the address when it cannot (in use, not local).
  virtual util::StatusOr<int> Start() = 0;
  // From now on every response says "Connection: close" and idle kept-alive
  // connections are closed; new connections are still accepted (a draining
  // server answers 503 through its handler).
  virtual void SetDraining() = 0;
  // Waits until no connection has a request in progress or output queued
  // (the last frames of drained streams went out), or `timeout` passes;
  // true when quiet. Any thread but an I/O thread.
  virtual bool WaitQuiet(std::chrono::milliseconds timeout) = 0;
  // Stops accepting, cancels every exchange (kServerStopped), closes every
  // connection and joins the I/O threads (with shared loops: returns once
  // that is done on every loop, which keeps running). From then on
  // Exchange::Post drops what it is given. Bounded: nothing waits on a client.
  virtual void Stop() = 0;
  virtual HttpServerStats Stats() const = 0;
};

}  // namespace strata::net
