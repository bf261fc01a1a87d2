#include "net/http_client.h"

#include <fmt/format.h>

#include <atomic>
#include <deque>
#include <future>
#include <map>
#include <thread>
#include <unordered_set>
#include <vector>

#include "net/internal/asio.h"
#include "net/internal/client_stream.h"
#include "net/internal/loop.h"

namespace strata::net {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using internal::ClientStream;
using internal::error_code;
using internal::Loop;
using internal::tcp;

std::string_view View(boost::beast::string_view s) { return {s.data(), s.size()}; }

// A pooled connection idle longer than this is checked for a close before reuse.
constexpr std::chrono::milliseconds kPeekAfterIdle{1000};

struct Url {
  bool tls = false;  // https://
  std::string host;  // without brackets
  std::string port;
  std::string target;
  std::string host_header;
  std::string pool_key;
};

util::StatusOr<Url> ParseUrl(std::string_view url) {
  constexpr std::string_view kHttp = "http://";
  constexpr std::string_view kHttps = "https://";
  Url u;
  std::string_view rest;
  if (url.substr(0, kHttp.size()) == kHttp) {
    rest = url.substr(kHttp.size());
  } else if (url.substr(0, kHttps.size()) == kHttps) {
    rest = url.substr(kHttps.size());
    u.tls = true;
  } else {
    return util::InvalidArgumentError(
        fmt::format("'{}' is not an http:// or https:// URL", url.substr(0, 200)));
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  u.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (authority.empty()) return util::InvalidArgumentError("URL without a host");
  if (authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return util::InvalidArgumentError("unterminated [IPv6]");
    u.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return util::InvalidArgumentError("junk after [IPv6]");
      u.port = std::string(after.substr(1));
    }
  } else {
    const size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) u.port = std::string(authority.substr(colon + 1));
  }
  if (u.port.empty()) u.port = u.tls ? "443" : "80";
  for (char c : u.port) {
    if (c < '0' || c > '9') return util::InvalidArgumentError(fmt::format("bad port '{}'", u.port));
  }
  if (u.host.empty()) return util::InvalidArgumentError("URL without a host");
  u.host_header = std::string(authority);
  // A connection is reused only for the same scheme, host and port.
  u.pool_key = fmt::format("{}|{}|{}", u.tls ? "https" : "http", u.host, u.port);
  return u;
}

// The response head and body, fed to the call as they are parsed.
class ResponseParser final : public http::basic_parser<false> {
 public:
  ResponseParser(size_t header_limit, std::function<void(std::string_view)> on_body)
      : on_body_(std::move(on_body)) {
    this->header_limit(static_cast<std::uint32_t>(header_limit));
    this->body_limit(boost::none);
  }
  ClientResponseHead& head() { return head_; }

 private:
  void on_request_impl(http::verb, boost::beast::string_view, boost::beast::string_view, int,
                       error_code& ec) override {
    ec = http::error::bad_method;
  }
  void on_response_impl(int code, boost::beast::string_view, int, error_code&) override {
    head_.status = code;
  }
  void on_field_impl(http::field, boost::beast::string_view name, boost::beast::string_view value,
                     error_code&) override {
    head_.headers.Add(std::string(View(name)), std::string(View(value)));
  }
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(boost::beast::string_view body, error_code&) override {
    on_body_(View(body));
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t, boost::beast::string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view body,
                                 error_code&) override {
    on_body_(View(body));
    return body.size();
  }
  void on_finish_impl(error_code&) override {}

  std::function<void(std::string_view)> on_body_;
  ClientResponseHead head_;
};

struct PooledStream {
  ClientStream stream;
  std::chrono::steady_clock::time_point idle_since;
};

// What every call of one client shares. Held by the calls: with shared
// loops, a call's last handler may run after the client is gone.
struct ClientCore {
  ClientCore(const HttpClientOptions& o, std::unique_ptr<internal::ssl::context> t, util::Logger& l)
      : options(o), tls(std::move(t)), log(l) {}
  const HttpClientOptions options;
  // Shared by every loop's TLS connections; not changed after Create.
  const std::unique_ptr<internal::ssl::context> tls;
  util::Logger& log;
  std::atomic<int64_t> requests{0}, opened{0}, reused{0}, retries{0};
};

class CallImpl;

// What the client keeps per loop (one of its own, or a shared one). Owned
// by the loop's thread; held by the client and by the calls on that loop.
struct ClientLoop {
  explicit ClientLoop(internal::Loop& l)
      : ctx(l.ctx), handle(std::make_shared<internal::LoopHandle>(&l.ctx)) {}
  asio::io_context& ctx;
  // How calls and the client post here; detached when the client stops.
  const std::shared_ptr<internal::LoopHandle> handle;
  // Pooled connections (keyed by scheme, host and port), the calls in
  // flight, and the callbacks waiting for their time (HttpClient::After).
  std::map<std::string, std::deque<PooledStream>> idle;
  std::unordered_set<CallImpl*> calls;
  struct Timer {
    std::unique_ptr<asio::steady_timer> timer;
    std::function<void(bool)> fn;
  };
  std::map<uint64_t, Timer> timers;
  uint64_t next_timer = 0;
  bool stopped = false;  // the client stopped: a call that begins now is cancelled
};

class CallImpl final : public ClientCall, public std::enable_shared_from_this<CallImpl> {
 public:
  CallImpl(std::shared_ptr<ClientCore> core, std::shared_ptr<ClientLoop> loop, Url url,
           ClientRequest request, ClientCallbacks callbacks);
  ~CallImpl() override { cl_->calls.erase(this); }
  void Begin();
  // Ends the call with `status` (on the loop's thread); no-op once done.
  void Finish(util::Status status);
  void Cancel() override;
  void Pause() override;
  void Resume() override;

 private:
  void Connect();
  // The TCP connection is open: TLS's handshake for https, then Send.
  void Connected();
  void Send();
  void ReadMore();
  void OnRead(const error_code& ec, size_t n);
  void Parse();
  // A reused connection that failed before any response byte: once more on
  // a fresh one. False when that is not allowed.
  bool TryRetry();
  // `reason`: kUpstreamUnavailable while connecting (nothing was sent),
  // kUpstreamTimeout after.
  void ArmPhase(std::chrono::milliseconds timeout, std::string what,
                util::ErrorReason reason = util::ErrorReason::kUpstreamTimeout);

  const std::shared_ptr<ClientCore> core_;
  const std::shared_ptr<ClientLoop> cl_;
  const Url url_;
  const ClientRequest request_;
  ClientCallbacks callbacks_;
  tcp::resolver resolver_;
  ClientStream stream_;
  asio::steady_timer phase_timer_;
  asio::steady_timer total_timer_;
  uint64_t phase_gen_ = 0;
  std::unique_ptr<ResponseParser> parser_;
  std::array<char, 16u << 10> read_buf_;  // not zeroed: read only up to what a read filled
  std::string in_;
  bool reading_ = false;
  bool paused_ = false;
  bool head_seen_ = false;
  bool got_bytes_ = false;
  bool reused_ = false;
  bool retried_ = false;
  bool done_ = false;
};

class ClientImpl final : public HttpClient {
 public:
  ClientImpl(const HttpClientOptions& o, std::unique_ptr<internal::ssl::context> tls,
             util::Logger& log, std::unique_ptr<EventLoops> own, EventLoops* shared)
      : core_(std::make_shared<ClientCore>(o, std::move(tls), log)),
        shared_(shared),
        own_(std::move(own)) {
    for (int i = 0; i < own_->size(); ++i) {
      own_loops_.push_back(std::make_shared<ClientLoop>(own_->loop(i)));
    }
    if (shared_ != nullptr) {
      for (int i = 0; i < shared_->size(); ++i) {
        shared_loops_.push_back(std::make_shared<ClientLoop>(shared_->loop(i)));
      }
    }
  }
  ~ClientImpl() override { Stop(); }

  std::shared_ptr<ClientCall> Start(ClientRequest request, ClientCallbacks callbacks) override {
    // On a shared loop's thread: that loop (the caller's connection and
    // this call then share a thread); anywhere else, one of the client's own.
    const int here = shared_ != nullptr ? shared_->OnLoopThread() : -1;
    const std::shared_ptr<ClientLoop>& cl =
        here >= 0 ? shared_loops_[static_cast<size_t>(here)] : NextOwnLoop();
    return StartOn(cl, std::move(request), std::move(callbacks));
  }

  void After(std::chrono::nanoseconds delay, std::function<void(bool)> fn) override {
    std::shared_ptr<ClientLoop> l = NextOwnLoop();
    l->handle->Post([l, delay, fn = std::move(fn)]() mutable {
      const uint64_t id = l->next_timer++;
      auto& t = l->timers[id];
      t.timer = std::make_unique<asio::steady_timer>(l->ctx);
      t.fn = std::move(fn);
      t.timer->expires_after(delay);
      t.timer->async_wait([l, id](const error_code& ec) {
        auto it = l->timers.find(id);
        if (ec || it == l->timers.end()) return;
        auto run = std::move(it->second.fn);
        l->timers.erase(it);
        run(false);
      });
    });
  }

  util::StatusOr<ClientResponse> Fetch(ClientRequest request) override {
    struct State {
      std::promise<util::Status> done;
      ClientResponse response;
      bool too_large = false;
    };
    auto st = std::make_shared<State>();
    auto future = st->done.get_future();
    const size_t limit = core_->options.max_fetch_body_bytes;
    auto call_holder = std::make_shared<std::shared_ptr<ClientCall>>();
    ClientCallbacks cb;
    cb.on_head = [st](const ClientResponseHead& h) {
      st->response.status = h.status;
      st->response.headers = h.headers;
    };
    cb.on_body = [st, limit, call_holder](std::string_view b) {
      if (st->too_large) return;
      if (st->response.body.size() + b.size() > limit) {
        st->too_large = true;
        if (*call_holder) (*call_holder)->Cancel();
        return;
      }
      st->response.body.append(b);
    };
    cb.on_done = [st, limit](const util::Status& s) {
      if (st->too_large) {
        st->done.set_value(util::ResourceExhaustedError(
            fmt::format("the response body exceeds the limit of {} bytes", limit)));
        return;
      }
      st->done.set_value(s);
    };
    // Always on the client's own loops: a caller on a shared loop's thread
    // would otherwise wait for its own thread.
    *call_holder = StartOn(NextOwnLoop(), std::move(request), std::move(cb));
    util::Status status = future.get();
    call_holder->reset();
    if (!status.ok()) return status;
    return std::move(st->response);
  }

  HttpClientStats Stats() const override {
    HttpClientStats s;
    s.requests = core_->requests.load();
    s.connections_opened = core_->opened.load();
    s.connections_reused = core_->reused.load();
    s.retries = core_->retries.load();
    return s;
  }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    // Loop by loop, waiting for each: every call in flight ends (Cancelled),
    // every timer runs with `stopped`, the pool closes, and later posts are
    // dropped. Then the client's own loops are joined; shared ones keep
    // running, and a handler of a call that runs later finds it done.
    auto shut = [](ClientLoop* l) {
      l->stopped = true;
      l->handle->Detach();
      std::vector<std::shared_ptr<CallImpl>> live;
      for (CallImpl* c : l->calls) live.push_back(c->shared_from_this());
      for (auto& c : live) c->Finish(util::CancelledError("the HTTP client stopped"));
      auto timers = std::move(l->timers);
      l->timers.clear();
      for (auto& [id, t] : timers) {
        t.timer->cancel();
        t.fn(true);
      }
      l->idle.clear();
    };
    for (auto& cl : shared_loops_) internal::RunOnLoop(cl->ctx, [l = cl.get(), &shut] { shut(l); });
    for (auto& cl : own_loops_) internal::RunOnLoop(cl->ctx, [l = cl.get(), &shut] { shut(l); });
    own_->Stop();
  }

 private:
  class NoCall final : public ClientCall {
   public:
    void Cancel() override {}
    void Pause() override {}
    void Resume() override {}
  };

  const std::shared_ptr<ClientLoop>& NextOwnLoop() {
    return own_loops_[next_.fetch_add(1) % own_loops_.size()];
  }

  std::shared_ptr<ClientCall> StartOn(const std::shared_ptr<ClientLoop>& cl, ClientRequest request,
                                      ClientCallbacks callbacks) {
    core_->requests.fetch_add(1);
    auto url = ParseUrl(request.url);
    if (!url.ok()) {
      auto status = url.status();
      cl->handle->Post([cb = std::move(callbacks.on_done), status] {
        if (cb) cb(status);
      });
      return std::make_shared<NoCall>();
    }
    auto call = std::make_shared<CallImpl>(core_, cl, std::move(url).value(), std::move(request),
                                           std::move(callbacks));
    cl->handle->Post([call] { call->Begin(); });
    return call;
  }

  const std::shared_ptr<ClientCore> core_;
  EventLoops* const shared_;                               // borrowed; null: none
  std::vector<std::shared_ptr<ClientLoop>> shared_loops_;  // one per loop of shared_
  const std::unique_ptr<EventLoops> own_;                  // io_threads of the client's own
  std::vector<std::shared_ptr<ClientLoop>> own_loops_;     // one per loop of own_
  std::atomic<size_t> next_{0};
  std::atomic<bool> stopped_{false};
};

CallImpl::CallImpl(std::shared_ptr<ClientCore> core, std::shared_ptr<ClientLoop> loop, Url url,
                   ClientRequest request, ClientCallbacks callbacks)
    : core_(std::move(core)),
      cl_(std::move(loop)),
      url_(std::move(url)),
      request_(std::move(request)),
      callbacks_(std::move(callbacks)),
      resolver_(cl_->ctx),
      stream_(cl_->ctx),
      phase_timer_(cl_->ctx),
      total_timer_(cl_->ctx) {}

bool CallImpl::TryRetry() {
  if (!reused_ || retried_ || got_bytes_) return false;
  retried_ = true;
  core_->retries.fetch_add(1);
  stream_.Close();
  stream_ = ClientStream(cl_->ctx);
  Connect();
  return true;
}

void CallImpl::Begin() {
  if (cl_->stopped) {
    // Posted before the client stopped, run after: it ends at once.
    Finish(util::CancelledError("the HTTP client stopped"));
    return;
  }
  cl_->calls.insert(this);
  total_timer_.expires_after(request_.total_timeout.value_or(core_->options.total_timeout));
  total_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (ec || self->done_) return;
    self->Finish(util::DeadlineExceededError(fmt::format("{} {}: no complete response within {} ms",
                                                         self->request_.method, self->request_.url,
                                                         (self->request_.total_timeout.value_or(
                                                              self->core_->options.total_timeout))
                                                             .count()))
                     .WithReason(util::ErrorReason::kUpstreamTimeout));
  });
  // A pooled connection, if one is still good.
  auto it = cl_->idle.find(url_.pool_key);
  while (it != cl_->idle.end() && !it->second.empty()) {
    PooledStream p = std::move(it->second.back());
    it->second.pop_back();
    const auto idle = std::chrono::steady_clock::now() - p.idle_since;
    if (idle > core_->options.pool_idle_timeout) continue;
    // Readable while idle means the server closed it (or sent junk; over
    // TLS, its close_notify). Only a connection idle a while is looked at:
    // under load one is reused microseconds after its last answer, a server
    // hardly closes it that soon, and the retry on a fresh connection covers
    // that rare case; the check would cost two system calls per request.
    if (idle > kPeekAfterIdle) {
      error_code ec;
      tcp::socket& s = p.stream.socket();
      if (!s.non_blocking()) s.non_blocking(true, ec);  // set once: the flag stays with the socket
      char byte;
      s.receive(asio::buffer(&byte, 1), tcp::socket::message_peek, ec);
      if (ec != asio::error::would_block && ec != asio::error::try_again) continue;
    }
    stream_ = std::move(p.stream);
    reused_ = true;
    core_->reused.fetch_add(1);
    Send();
    return;
  }
  Connect();
}

void CallImpl::ArmPhase(std::chrono::milliseconds timeout, std::string what,
                        util::ErrorReason reason) {
  const uint64_t gen = ++phase_gen_;
  phase_timer_.expires_after(timeout);
  phase_timer_.async_wait(
      [self = shared_from_this(), gen, what, timeout, reason](const error_code& ec) {
        if (ec || gen != self->phase_gen_ || self->done_) return;
        self->Finish(
            util::DeadlineExceededError(fmt::format("{} {}: {} within {} ms", self->request_.method,
                                                    self->request_.url, what, timeout.count()))
                .WithReason(reason));
      });
}

void CallImpl::Connect() {
  reused_ = false;
  ArmPhase(core_->options.connect_timeout,
           url_.tls ? "could not connect and finish the TLS handshake" : "could not connect",
           util::ErrorReason::kUpstreamUnavailable);
  resolver_.async_resolve(
      url_.host, url_.port,
      [self = shared_from_this()](const error_code& ec, tcp::resolver::results_type results) {
        if (self->done_) return;
        if (ec) {
          self->Finish(
              util::UnavailableError(fmt::format("{}: cannot resolve '{}': {}", self->request_.url,
                                                 self->url_.host, ec.message()))
                  .WithReason(util::ErrorReason::kUpstreamUnavailable));
          return;
        }
        asio::async_connect(
            self->stream_.socket(), results, [self](const error_code& cec, const tcp::endpoint&) {
              if (self->done_) return;
              if (cec) {
                self->Finish(util::UnavailableError(fmt::format("{}: cannot connect: {}",
                                                                self->request_.url, cec.message()))
                                 .WithReason(util::ErrorReason::kUpstreamUnavailable));
                return;
              }
              self->Connected();
            });
      });
}

void CallImpl::Connected() {
  error_code ec;
  stream_.socket().set_option(tcp::no_delay(true), ec);
  if (!url_.tls) {
    core_->opened.fetch_add(1);
    Send();
    return;
  }
  // The handshake runs under the connect deadline: until it is done nothing
  // was sent, so every failure here may go to another server.
  util::Status st = stream_.StartTls(*core_->tls, url_.host, core_->options.tls_verify);
  if (!st.ok()) {
    Finish(std::move(st)
               .WithContext(request_.url)
               .WithReason(util::ErrorReason::kUpstreamUnavailable));
    return;
  }
  stream_.AsyncHandshake([self = shared_from_this()](const error_code& hec) {
    if (self->done_) return;
    if (hec) {
      self->Finish(util::UnavailableError(fmt::format("{}: TLS handshake with {} failed: {}",
                                                      self->request_.url, self->url_.host,
                                                      self->stream_.HandshakeError(hec)))
                       .WithReason(util::ErrorReason::kUpstreamUnavailable));
      return;
    }
    self->core_->opened.fetch_add(1);
    self->Send();
  });
}

void CallImpl::Send() {
  std::string out;
  out.reserve(128 + request_.body.size());
  out += request_.method;
  out += ' ';
  out += url_.target;
  out += " HTTP/1.1\r\n";
  AppendField(out, "Host", url_.host_header);
  for (const auto& [n, v] : request_.headers.fields()) {
    if (EqualsIgnoreCase(n, "Host") || EqualsIgnoreCase(n, "Content-Length") ||
        EqualsIgnoreCase(n, "Connection") || EqualsIgnoreCase(n, "Transfer-Encoding")) {
      continue;
    }
    AppendField(out, n, v);
  }
  if (!request_.body.empty() || request_.method == "POST" || request_.method == "PUT") {
    AppendField(out, "Content-Length", fmt::format_int(request_.body.size()).c_str());
  }
  out += "\r\n";
  out += request_.body;
  auto buf = std::make_shared<std::string>(std::move(out));
  parser_ = std::make_unique<ResponseParser>(core_->options.max_response_header_bytes,
                                             [this](std::string_view b) {
                                               if (!done_ && callbacks_.on_body && !b.empty())
                                                 callbacks_.on_body(b);
                                             });
  if (request_.method == "HEAD") parser_->skip(true);
  in_.clear();
  head_seen_ = false;
  got_bytes_ = false;
  ArmPhase(request_.first_byte_timeout.value_or(core_->options.first_byte_timeout), "no response");
  stream_.AsyncWrite(
      asio::buffer(*buf), [self = shared_from_this(), buf](const error_code& ec, size_t) {
        if (self->done_) return;
        if (ec) {
          if (self->TryRetry()) return;
          self->Finish(util::UnavailableError(fmt::format("{}: sending the request failed: {}",
                                                          self->request_.url, ec.message()))
                           .WithReason(util::ErrorReason::kUpstreamError));
          return;
        }
        self->ReadMore();
      });
}

void CallImpl::ReadMore() {
  if (reading_ || paused_ || done_) return;
  reading_ = true;
  stream_.AsyncReadSome(
      asio::buffer(read_buf_),
      [self = shared_from_this()](const error_code& ec, size_t n) { self->OnRead(ec, n); });
}

void CallImpl::OnRead(const error_code& ec, size_t n) {
  reading_ = false;
  if (done_) return;
  if (ec == asio::error::eof) {
    if (TryRetry()) return;  // the server closed the pooled connection before answering
    error_code pec;
    if (parser_->is_header_done()) parser_->put_eof(pec);
    if (parser_->is_done() && !pec) {
      Finish(util::OkStatus());
      return;
    }
    Finish(util::UnavailableError(
               fmt::format("{}: the connection closed before the response ended", request_.url))
               .WithReason(util::ErrorReason::kUpstreamError));
    return;
  }
  if (ec) {
    if (TryRetry()) return;
    Finish(util::UnavailableError(fmt::format("{}: {}", request_.url, ec.message()))
               .WithReason(util::ErrorReason::kUpstreamError));
    return;
  }
  got_bytes_ = true;
  in_.append(read_buf_.data(), n);
  Parse();
  if (!done_) ReadMore();
}

void CallImpl::Parse() {
  while (!in_.empty() && !done_) {
    error_code ec;
    const size_t used = parser_->put(asio::buffer(in_.data(), in_.size()), ec);
    in_.erase(0, used);
    if (ec == http::error::need_more) break;
    if (ec) {
      Finish(util::UnavailableError(
                 ec == http::error::header_limit
                     ? fmt::format("{}: the response head exceeds {} bytes", request_.url,
                                   core_->options.max_response_header_bytes)
                     : fmt::format("{}: malformed response: {}", request_.url, ec.message()))
                 .WithReason(util::ErrorReason::kUpstreamProtocol));
      return;
    }
    if (parser_->is_header_done() && !head_seen_) {
      if (parser_->head().status < 200) {
        // An interim response (100 Continue, 103): the real one follows.
        parser_ = std::make_unique<ResponseParser>(core_->options.max_response_header_bytes,
                                                   [this](std::string_view b) {
                                                     if (!done_ && callbacks_.on_body && !b.empty())
                                                       callbacks_.on_body(b);
                                                   });
        if (request_.method == "HEAD") parser_->skip(true);
        continue;
      }
      head_seen_ = true;
      ArmPhase(core_->options.idle_timeout, "the response stalled");
      if (callbacks_.on_head) callbacks_.on_head(parser_->head());
      if (done_) return;
    }
    if (parser_->is_done()) {
      Finish(util::OkStatus());
      return;
    }
    if (used == 0) break;
    if (head_seen_) ArmPhase(core_->options.idle_timeout, "the response stalled");
    if (paused_) return;
  }
}

void CallImpl::Finish(util::Status status) {
  if (done_) return;
  done_ = true;
  cl_->calls.erase(this);
  ++phase_gen_;
  phase_timer_.cancel();
  total_timer_.cancel();
  resolver_.cancel();
  const bool reusable = status.ok() && parser_ && parser_->is_done() && parser_->keep_alive() &&
                        in_.empty() && stream_.socket().is_open();
  if (reusable) {
    auto& idle = cl_->idle[url_.pool_key];
    if (static_cast<int32_t>(idle.size()) < core_->options.max_idle_per_host) {
      idle.push_back({std::move(stream_), std::chrono::steady_clock::now()});
    } else {
      stream_.Close();
    }
  } else {
    stream_.Close();
  }
  auto on_done = std::move(callbacks_.on_done);
  callbacks_ = {};
  if (on_done) on_done(status);
}

void CallImpl::Cancel() {
  cl_->handle->Post([self = shared_from_this()] {
    self->Finish(util::CancelledError(
        fmt::format("{} {}: cancelled", self->request_.method, self->request_.url)));
  });
}

void CallImpl::Pause() {
  cl_->handle->Post([self = shared_from_this()] {
    self->paused_ = true;
    ++self->phase_gen_;  // the idle deadline does not run while paused
    self->phase_timer_.cancel();
  });
}

void CallImpl::Resume() {
  cl_->handle->Post([self = shared_from_this()] {
    if (!self->paused_ || self->done_) return;
    self->paused_ = false;
    if (self->head_seen_) {
      self->ArmPhase(self->core_->options.idle_timeout, "the response stalled");
    }
    self->Parse();
    self->ReadMore();
  });
}

}  // namespace

util::StatusOr<std::unique_ptr<HttpClient>> HttpClient::Create(const HttpClientOptions& options,
                                                               util::Logger& log,
                                                               EventLoops* loops) {
  if (options.io_threads < 1 || options.io_threads > 64) {
    return util::InvalidArgumentError(
        fmt::format("io_threads = {} is outside [1, 64]", options.io_threads));
  }
  if (options.max_response_header_bytes < 1024 || options.max_response_header_bytes > (16u << 20)) {
    return util::InvalidArgumentError("max_response_header_bytes is outside [1 KiB, 16 MiB]");
  }
  for (auto t : {options.connect_timeout, options.first_byte_timeout, options.idle_timeout,
                 options.total_timeout, options.pool_idle_timeout}) {
    if (t.count() < 1) return util::InvalidArgumentError("client timeouts must be positive");
  }
  STRATA_ASSIGN_OR_RETURN(auto tls, internal::NewTlsContext(options.ca_file, options.tls_verify));
  if (!options.tls_verify) {
    log.Warn(
        "HTTP client: TLS certificate verification is OFF: https upstreams are not "
        "authenticated, and anyone on the path can read and change the traffic");
  }
  STRATA_ASSIGN_OR_RETURN(auto own, EventLoops::Create(options.io_threads));
  return std::unique_ptr<HttpClient>(
      new ClientImpl(options, std::move(tls), log, std::move(own), loops));
}

}  // namespace strata::net
