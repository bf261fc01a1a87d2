#include "net/http_server.h"

#include <sys/socket.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "net/internal/asio.h"
#include "net/internal/connection.h"
#include "net/internal/loop.h"

namespace strata::net {

namespace asio = boost::asio;
using internal::Connection;
using internal::error_code;
using internal::ServerCore;
using internal::ServerLoop;
using internal::tcp;

std::string_view RequestHead::path() const {
  const std::string_view t = target;
  return t.substr(0, t.find('?'));
}

std::string_view CancelReasonName(CancelReason reason) {
  switch (reason) {
    case CancelReason::kClientGone:
      return "client gone";
    case CancelReason::kWriteStalled:
      return "client stopped reading";
    case CancelReason::kServerStopped:
      return "server stopped";
  }
  return "?";
}

Response HttpHandler::LimitResponse(const RequestHead*, int status, const util::Status& why) {
  nlohmann::json body = {
      {"error", {{"message", why.message()}, {"type", "invalid_request_error"}}}};
  return JsonResponse(status, body.dump());
}

ParsedHttpRequest ParseHttpRequest(std::span<const std::string_view> chunks,
                                   const HttpLimits& limits) {
  ParsedHttpRequest out;
  internal::RequestParser parser(limits);
  std::string buffered;
  size_t offset = 0;  // of buffered[0] in the whole input
  auto fail = [&](int status, util::Status why) {
    out.status = status;
    out.error = std::move(why);
    return out;
  };
  for (std::string_view chunk : chunks) {
    buffered.append(chunk);
    while (!buffered.empty() && !parser.is_done()) {
      if (!parser.is_header_done()) {
        const size_t line_end = buffered.find('\n');
        if ((line_end == std::string::npos ? buffered.size() : line_end) >
            limits.max_request_line_bytes + 1) {
          return fail(414, util::InvalidArgumentError("the request line exceeds its limit"));
        }
      }
      const bool had_header = parser.is_header_done();
      error_code ec;
      const size_t used = parser.put(asio::buffer(buffered.data(), buffered.size()), ec);
      buffered.erase(0, used);
      offset += used;
      if (ec == internal::http::error::need_more) break;
      if (ec) {
        parser.NoteError(ec);
        return fail(parser.failure_status(), parser.failure());
      }
      if (!had_header && parser.is_header_done()) {
        if (util::Status st = parser.CheckAnnouncedLength(); !st.ok()) return fail(413, st);
      }
      if (used == 0) break;
    }
    if (parser.is_done()) break;
  }
  out.complete = parser.is_done();
  if (parser.is_header_done()) out.head = std::move(parser.head());
  out.body = std::move(parser.body());
  out.consumed = offset;
  return out;
}

namespace {

util::Status CheckLimits(const HttpServerOptions& o) {
  const HttpLimits& l = o.limits;
  auto range = [](auto v, auto lo, auto hi, std::string_view name) -> util::Status {
    if (v < lo || v > hi) {
      return util::InvalidArgumentError(
          fmt::format("{} = {} is outside [{}, {}]", name, v, lo, hi));
    }
    return util::OkStatus();
  };
  STRATA_RETURN_IF_ERROR(range(o.io_threads, 1, 256, "io_threads"));
  STRATA_RETURN_IF_ERROR(range(o.port, 0, 65535, "port"));
  STRATA_RETURN_IF_ERROR(
      range(l.max_request_line_bytes, size_t{64}, size_t{1} << 20, "max_request_line_bytes"));
  STRATA_RETURN_IF_ERROR(
      range(l.max_header_bytes, size_t{1} << 10, size_t{16} << 20, "max_header_bytes"));
  STRATA_RETURN_IF_ERROR(range(l.max_header_fields, 1, 10000, "max_header_fields"));
  STRATA_RETURN_IF_ERROR(
      range(l.max_body_bytes, size_t{1} << 10, size_t{1} << 30, "max_body_bytes"));
  STRATA_RETURN_IF_ERROR(range(l.max_inflate_ratio, 1.0, 1e6, "max_inflate_ratio"));
  STRATA_RETURN_IF_ERROR(
      range(l.max_buffered_output, size_t{4} << 10, size_t{1} << 30, "max_buffered_output"));
  STRATA_RETURN_IF_ERROR(range(l.max_connections, 1, 1000000, "max_connections"));
  STRATA_RETURN_IF_ERROR(
      range(l.max_connections_per_client, 1, 1000000, "max_connections_per_client"));
  for (auto [ms, name] :
       {std::pair{l.header_timeout, "header_timeout"}, std::pair{l.body_timeout, "body_timeout"},
        std::pair{l.idle_timeout, "idle_timeout"},
        std::pair{l.write_stall_timeout, "write_stall_timeout"}}) {
    STRATA_RETURN_IF_ERROR(range(ms.count(), int64_t{1}, int64_t{86'400'000}, name));
  }
  if (l.max_request_line_bytes > l.max_header_bytes) {
    return util::InvalidArgumentError("max_request_line_bytes exceeds max_header_bytes");
  }
  return util::OkStatus();
}

// The client's address as one string per host: an IPv4 client of a
// dual-stack listener counts under its IPv4 form.
std::string ClientAddress(const tcp::endpoint& ep) {
  auto addr = ep.address();
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
    addr = asio::ip::make_address_v4(asio::ip::v4_mapped, addr.to_v6());
  }
  return addr.to_string();
}

// A connection refused at accept: a 503, best effort, and the socket closed.
void Refuse(ServerCore& core, tcp::socket& socket, const std::string& why) {
  core.refused.fetch_add(1);
  Response r = core.handler.LimitResponse(nullptr, 503, util::UnavailableError(why));
  std::string out = fmt::format("HTTP/1.1 503 {}\r\nContent-Length: {}\r\nConnection: close\r\n",
                                ReasonPhrase(503), r.body.size());
  for (const auto& [n, v] : r.headers.fields()) {
    if (!EqualsIgnoreCase(n, "Content-Length") && !EqualsIgnoreCase(n, "Connection")) {
      out += n + ": " + v + "\r\n";
    }
  }
  out += "Retry-After: 1\r\n\r\n" + r.body;
  // Best effort, without waiting: the answer fits any socket buffer.
  error_code ec;
  socket.non_blocking(true, ec);
  socket.send(asio::buffer(out), 0, ec);
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

// On `loop`'s thread: makes room at the connection cap, then serves. Holds
// nothing of the server but what it shares: with shared loops this may run
// after the server is gone (it then closes the socket).
void Adopt(const std::shared_ptr<ServerCore>& core, const std::shared_ptr<ServerLoop>& loop,
           tcp::socket socket, std::string remote) {
  if (loop->stopped) {
    error_code ec;
    socket.close(ec);
    core->ReleaseClient(remote);
    core->open.fetch_sub(1);
    return;
  }
  if (core->open.load() > core->limits.max_connections) {
    // At the cap: the connection of this loop that has waited longest for a
    // request's headers makes room; if every one is busy with a request,
    // the newcomer is refused.
    Connection* oldest = nullptr;
    for (Connection* c : loop->connections) {
      if (c->Displaceable() && (oldest == nullptr || c->phase_start() < oldest->phase_start())) {
        oldest = c;
      }
    }
    if (oldest == nullptr) {
      core->log.Debug("http: connection cap ({}) reached; refusing {}",
                      core->limits.max_connections, remote);
      Refuse(*core, socket,
             fmt::format("the server has {} connections open, its limit",
                         core->limits.max_connections));
      core->ReleaseClient(remote);
      core->open.fetch_sub(1);
      return;
    }
    core->displaced.fetch_add(1);
    oldest->Close(CancelReason::kClientGone);
  }
  std::make_shared<Connection>(core, loop, std::move(socket), std::move(remote))->Start();
}

class ServerImpl final : public HttpServer {
 public:
  ServerImpl(const HttpServerOptions& o, HttpHandler& handler, util::Logger& log,
             const util::Clock& clock)
      : options_(o), core_(std::make_shared<ServerCore>(o.limits, handler, log, clock)) {}
  ~ServerImpl() override { Stop(); }

  util::StatusOr<int> Start() override;
  void SetDraining() override;
  bool WaitQuiet(std::chrono::milliseconds timeout) override;
  void Stop() override;
  HttpServerStats Stats() const override {
    HttpServerStats s;
    s.connections_open = core_->open.load();
    s.connections_accepted = core_->accepted.load();
    s.connections_refused = core_->refused.load();
    s.connections_displaced = core_->displaced.load();
    s.requests = core_->requests.load();
    s.rejected_by_limit = core_->rejected.load();
    return s;
  }

 private:
  void Accept();
  void OnAccepted(const std::shared_ptr<ServerLoop>& target, tcp::socket socket);

  const HttpServerOptions options_;
  std::shared_ptr<ServerCore> core_;
  std::unique_ptr<EventLoops> own_loops_;  // without options_.loops; started by Start
  // One per loop (of own_loops_ or options_.loops), in the loops' order.
  std::vector<std::shared_ptr<ServerLoop>> loops_;
  // loops_[0]'s thread: false once Stop closed the acceptor. The accept
  // handlers hold it and look at it first: one that runs after Stop (the
  // loops may outlive the server) touches nothing else.
  std::shared_ptr<bool> listening_ = std::make_shared<bool>(true);
  std::optional<tcp::acceptor> acceptor_;  // on loops_[0]
  std::optional<asio::steady_timer> accept_retry_;
  size_t next_loop_ = 0;  // loops_[0]'s thread: the loop the next connection goes to
  bool started_ = false;
  bool stopped_ = false;
};

util::StatusOr<int> ServerImpl::Start() {
  if (started_) return util::FailedPreconditionError("the server was already started");
  EventLoops* loops = options_.loops;
  if (loops == nullptr) {
    if (own_loops_ == nullptr) {
      STRATA_ASSIGN_OR_RETURN(own_loops_, EventLoops::Create(options_.io_threads));
    }
    loops = own_loops_.get();
  }
  if (loops_.empty()) {
    for (int i = 0; i < loops->size(); ++i) {
      loops_.push_back(std::make_shared<ServerLoop>(loops->loop(i)));
    }
  }
  asio::io_context& ctx0 = loops_[0]->ctx;
  error_code ec;
  asio::ip::address address = asio::ip::make_address(options_.host, ec);
  if (ec) {
    // A name ("localhost"): its first address.
    tcp::resolver resolver(ctx0);
    auto results = resolver.resolve(options_.host, "", ec);
    if (ec || results.empty()) {
      return util::InvalidArgumentError(
          fmt::format("'{}' is not an address or a name of this machine", options_.host));
    }
    address = results.begin()->endpoint().address();
  }
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(options_.port));
  acceptor_.emplace(ctx0);
  acceptor_->open(endpoint.protocol(), ec);
  if (!ec && address.is_v6() && address.to_v6().is_unspecified()) {
    acceptor_->set_option(asio::ip::v6_only(false), ec);  // "::" takes IPv4 clients too
  }
  // SO_REUSEADDR lets a restarted server bind while old connections sit in
  // TIME_WAIT; on Linux it never lets two servers listen on one port.
  if (!ec) acceptor_->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec && options_.reuse_port) {
    const int one = 1;
    if (::setsockopt(acceptor_->native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) !=
        0) {
      acceptor_.reset();
      return util::UnavailableError("cannot set SO_REUSEPORT on the listening socket");
    }
  }
  const std::string where = address.is_v6() ? fmt::format("[{}]:{}", options_.host, options_.port)
                                            : fmt::format("{}:{}", options_.host, options_.port);
  if (!ec) acceptor_->bind(endpoint, ec);
  if (ec) {
    acceptor_.reset();
    if (ec == asio::error::address_in_use) {
      return util::UnavailableError(fmt::format(
          "cannot listen on {}: the address is in use (another server on this port?)", where));
    }
    return util::UnavailableError(fmt::format("cannot listen on {}: {}", where, ec.message()));
  }
  acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    acceptor_.reset();
    return util::UnavailableError(fmt::format("cannot listen on {}: {}", where, ec.message()));
  }
  const int port = acceptor_->local_endpoint(ec).port();
  accept_retry_.emplace(ctx0);
  started_ = true;
  // The loops run already: the acceptor is used on its own thread from now on.
  asio::post(ctx0, [this] { Accept(); });
  return port;
}

void ServerImpl::Accept() {
  std::shared_ptr<ServerLoop> target = loops_[next_loop_];
  next_loop_ = (next_loop_ + 1) % loops_.size();
  acceptor_->async_accept(
      target->ctx, [this, target, open = listening_](const error_code& ec, tcp::socket socket) {
        if (!*open) return;  // stopped: `this` may be gone
        if (ec == asio::error::operation_aborted || !acceptor_ || !acceptor_->is_open()) return;
        if (ec) {
          // Out of file descriptors, most likely: wait a little rather than spin.
          core_->log.Warn("http: accept failed: {}; retrying in 50 ms", ec.message());
          accept_retry_->expires_after(std::chrono::milliseconds(50));
          accept_retry_->async_wait([this, open](const error_code& tec) {
            if (*open && !tec) Accept();
          });
          return;
        }
        OnAccepted(target, std::move(socket));
        Accept();
      });
}

void ServerImpl::OnAccepted(const std::shared_ptr<ServerLoop>& target, tcp::socket socket) {
  error_code ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return;  // already gone
  std::string remote = ClientAddress(peer);
  core_->accepted.fetch_add(1);
  if (!core_->AcquireClient(remote)) {
    Refuse(*core_, socket,
           fmt::format("too many connections from {} (the limit is {})", remote,
                       options_.limits.max_connections_per_client));
    return;
  }
  core_->open.fetch_add(1);
  // The socket belongs to `target`'s context; it is served on its thread.
  asio::post(target->ctx,
             [core = core_, target, s = std::move(socket), r = std::move(remote)]() mutable {
               Adopt(core, target, std::move(s), std::move(r));
             });
}

void ServerImpl::SetDraining() {
  core_->draining.store(true);
  if (stopped_) return;
  for (const auto& loop : loops_) {
    asio::post(loop->ctx, [l = loop] {
      std::vector<Connection*> idle;
      for (Connection* c : l->connections) {
        if (c->idle()) idle.push_back(c);
      }
      for (Connection* c : idle) c->Close(CancelReason::kServerStopped);
    });
  }
}

bool ServerImpl::WaitQuiet(std::chrono::milliseconds timeout) {
  if (!started_ || stopped_) return true;
  // Each round asks every loop how many of its connections are busy; the
  // tally outlives this call if a loop answers late.
  struct Tally {
    std::mutex mu;
    std::condition_variable cv;
    size_t answered = 0;  // guarded by mu
    int64_t busy = 0;     // guarded by mu
  };
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto tally = std::make_shared<Tally>();
    for (const auto& loop : loops_) {
      asio::post(loop->ctx, [l = loop, tally] {
        int64_t busy = 0;
        for (Connection* c : l->connections) busy += c->idle() ? 0 : 1;
        std::lock_guard<std::mutex> lock(tally->mu);
        tally->busy += busy;
        ++tally->answered;
        tally->cv.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(tally->mu);
    const bool all =
        tally->cv.wait_until(lock, end, [&] { return tally->answered == loops_.size(); });
    if (all && tally->busy == 0) return true;
    lock.unlock();
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void ServerImpl::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  // In order: no new connection, then every connection closed (its exchange
  // cancelled) and nothing more posted, loop by loop; each step waits until
  // it has run, so that when Stop returns no handler of this server runs
  // with `this` (shared loops keep running).
  internal::RunOnLoop(loops_[0]->ctx, [this] {
    *listening_ = false;
    error_code ec;
    if (acceptor_) acceptor_->close(ec);
    if (accept_retry_) accept_retry_->cancel();
    acceptor_.reset();
    accept_retry_.reset();
  });
  for (const auto& loop : loops_) {
    internal::RunOnLoop(loop->ctx, [l = loop.get()] {
      l->stopped = true;
      l->handle->Detach();
      std::vector<std::shared_ptr<Connection>> all;
      for (Connection* c : l->connections) all.push_back(c->shared_from_this());
      for (auto& c : all) c->Close(CancelReason::kServerStopped);
    });
  }
  if (own_loops_) own_loops_->Stop();
}

}  // namespace

util::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const HttpServerOptions& options,
                                                               HttpHandler& handler,
                                                               util::Logger& log,
                                                               const util::Clock& clock) {
  STRATA_RETURN_IF_ERROR(CheckLimits(options));
  return std::unique_ptr<HttpServer>(new ServerImpl(options, handler, log, clock));
}

}  // namespace strata::net
