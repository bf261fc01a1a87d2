#include "net/internal/connection.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>

namespace strata::net::internal {
namespace {

// After end of input while a request runs, the socket is checked this often
// for the reset a closed peer sends in answer to the interim response.
constexpr std::chrono::milliseconds kProbeInterval{250};
// Input read while a request is handled (pipelined requests, or end of
// input) is kept up to this much beyond the header limit; reading then
// pauses until the exchange is done.
constexpr size_t kWatchSlack = 16u << 10;
// At most this many queued strings go to one write.
constexpr size_t kMaxWriteBuffers = 64;

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

bool ServerCore::AcquireClient(const std::string& remote) {
  std::lock_guard<std::mutex> lock(clients_mu_);
  int32_t& n = clients_[remote];
  if (n >= limits.max_connections_per_client) {
    if (n == 0) clients_.erase(remote);
    return false;
  }
  ++n;
  return true;
}

void ServerCore::ReleaseClient(const std::string& remote) {
  std::lock_guard<std::mutex> lock(clients_mu_);
  auto it = clients_.find(remote);
  if (it != clients_.end() && --it->second <= 0) clients_.erase(it);
}

// ---------------------------------------------------------------------------
// Connection

Connection::Connection(std::shared_ptr<ServerCore> core, std::shared_ptr<ServerLoop> loop,
                       tcp::socket socket, std::string remote)
    : core_(std::move(core)),
      loop_ptr_(std::move(loop)),
      loop_(*loop_ptr_),
      socket_(std::move(socket)),
      remote_(std::move(remote)),
      phase_timer_(loop_.ctx),
      stall_timer_(loop_.ctx),
      probe_timer_(loop_.ctx),
      exchange_timer_(loop_.ctx) {}

Connection::~Connection() {
  loop_.connections.erase(this);
  core_->ReleaseClient(remote_);
  core_->open.fetch_sub(1);
}

void Connection::Start() {
  loop_.connections.insert(this);
  error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  SetPhase(Phase::kIdle);
  ReadMore();
}

void Connection::SetPhase(Phase p) {
  phase_ = p;
  phase_start_ = std::chrono::steady_clock::now();
  ArmPhaseTimer();
}

void Connection::ArmPhaseTimer() {
  std::chrono::milliseconds timeout{0};
  switch (phase_) {
    case Phase::kIdle:
      timeout = core_->limits.idle_timeout;
      break;
    case Phase::kHead:
      timeout = core_->limits.header_timeout;
      break;
    case Phase::kBody:
      timeout = core_->limits.body_timeout;
      break;
    default:
      break;
  }
  if (timeout.count() <= 0) {
    ClearPhaseDeadline();
    return;
  }
  const TimePoint deadline = std::chrono::steady_clock::now() + timeout;
  phase_deadline_ = deadline;
  if (phase_armed_ <= deadline) return;  // it fires first and waits for the rest
  phase_armed_ = deadline;
  phase_timer_.expires_at(deadline);  // aborts a later wait
  WaitPhaseTimer(++phase_timer_gen_);
}

void Connection::WaitPhaseTimer(uint64_t gen) {
  phase_timer_.async_wait([self = shared_from_this(), gen](const error_code& ec) {
    if (ec || gen != self->phase_timer_gen_) return;
    self->phase_armed_ = TimePoint::max();
    if (self->phase_deadline_ == TimePoint::max()) return;
    if (std::chrono::steady_clock::now() < self->phase_deadline_) {
      self->phase_armed_ = self->phase_deadline_;
      self->phase_timer_.expires_at(self->phase_deadline_);
      self->WaitPhaseTimer(gen);
      return;
    }
    self->ClearPhaseDeadline();
    self->OnPhaseTimer();
  });
}

void Connection::CancelPhaseTimer() {
  ++phase_timer_gen_;
  phase_timer_.cancel();
  phase_armed_ = TimePoint::max();
  ClearPhaseDeadline();
}

void Connection::OnPhaseTimer() {
  switch (phase_) {
    case Phase::kIdle:
      Close(CancelReason::kClientGone);  // nobody is waiting on a kept-alive idle connection
      return;
    case Phase::kHead:
      Reject(408, util::DeadlineExceededError(
                      fmt::format("the request headers did not arrive within {} ms",
                                  core_->limits.header_timeout.count())));
      return;
    case Phase::kBody:
      Reject(408,
             util::DeadlineExceededError(fmt::format("the request body did not arrive within {} ms",
                                                     core_->limits.body_timeout.count())));
      return;
    default:
      return;
  }
}

void Connection::ReadMore() {
  if (reading_ || peer_eof_ || phase_ == Phase::kClosed) return;
  if (phase_ == Phase::kHandling && Pending() >= core_->limits.max_header_bytes + kWatchSlack) {
    return;  // resumes when the exchange is done
  }
  reading_ = true;
  socket_.async_read_some(
      asio::buffer(read_buf_),
      [self = shared_from_this()](const error_code& ec, size_t n) { self->OnRead(ec, n); });
}

void Connection::OnRead(const error_code& ec, size_t n) {
  reading_ = false;
  if (phase_ == Phase::kClosed) return;
  if (ec == asio::error::eof) {
    peer_eof_ = true;
    if (phase_ == Phase::kHandling) {
      OnPeerEof();
    } else {
      // Idle, or mid-request (an incomplete request has no answer): close
      // once what is already queued has gone out.
      CloseAfterWrite();
    }
    return;
  }
  if (ec) {
    Close(CancelReason::kClientGone);
    return;
  }
  if (phase_ == Phase::kClosing) {
    // The last response is going out; what the client sends now is discarded.
    ReadMore();
    return;
  }
  if (in_off_ > 0 && in_off_ * 2 > in_.size()) {
    in_.erase(0, in_off_);
    in_off_ = 0;
  }
  in_.append(read_buf_.data(), n);
  Process();
  ReadMore();
}

void Connection::Process() {
  while (true) {
    switch (phase_) {
      case Phase::kIdle:
        if (Pending() == 0) return;
        parser_ = std::make_unique<RequestParser>(core_->limits);
        SetPhase(Phase::kHead);
        [[fallthrough]];
      case Phase::kHead:
        if (!ProcessHead()) return;
        break;
      case Phase::kBody:
        if (!ProcessBody()) return;
        break;
      default:
        return;
    }
  }
}

bool Connection::ProcessHead() {
  const std::string_view pending(in_.data() + in_off_, Pending());
  // The request line alone may not exceed its limit (Beast parses it only
  // once the whole header is here, and the header limit is larger).
  const size_t line_end = pending.find('\n');
  if ((line_end == std::string_view::npos ? pending.size() : line_end) >
      core_->limits.max_request_line_bytes + 1) {
    Reject(414,
           util::InvalidArgumentError(fmt::format("the request line exceeds the limit of {} bytes",
                                                  core_->limits.max_request_line_bytes)));
    return false;
  }
  error_code ec;
  const size_t used = parser_->put(asio::buffer(pending.data(), pending.size()), ec);
  in_off_ += used;
  if (ec == http::error::need_more) return false;
  if (ec) {
    parser_->NoteError(ec);
    Reject(parser_->failure_status(), parser_->failure());
    return false;
  }
  if (!parser_->is_header_done()) return false;
  core_->requests.fetch_add(1);
  RequestHead& head = parser_->head();
  head.remote = remote_;
  head_request_ = EqualsIgnoreCase(head.method, "HEAD");
  version_ = head.version;
  std::optional<Response> answer;
  try {
    answer = core_->handler.OnHead(head);
  } catch (const std::exception& e) {
    core_->log.Error("http: handler failed on {} {}: {}", head.method, head.path(), e.what());
    answer = JsonResponse(500, R"({"error":{"message":"internal error","type":"server_error"}})");
  }
  if (answer) {
    // The body, if any, is not read: the connection cannot be reused.
    keep_alive_ = head.keep_alive && parser_->is_done();
    ClearPhaseDeadline();
    phase_ = Phase::kHandling;
    ExchangeRespond(std::move(*answer));
    return phase_ != Phase::kHandling;
  }
  if (util::Status too_large = parser_->CheckAnnouncedLength(); !too_large.ok()) {
    Reject(413, too_large);
    return false;
  }
  if (!parser_->is_done() && head.version == 11 &&
      HasToken(head.headers.GetOr("Expect"), "100-continue")) {
    Queue(std::string(kContinue));
  }
  SetPhase(Phase::kBody);
  return true;
}

bool Connection::ProcessBody() {
  while (!parser_->is_done()) {
    if (Pending() == 0) return false;
    error_code ec;
    const size_t used = parser_->put(asio::buffer(in_.data() + in_off_, Pending()), ec);
    in_off_ += used;
    if (ec == http::error::need_more) return false;
    if (ec) {
      parser_->NoteError(ec);
      Reject(parser_->failure_status(), parser_->failure());
      return false;
    }
  }
  BeginExchange();
  return phase_ != Phase::kHandling;
}

void Connection::BeginExchange() {
  ClearPhaseDeadline();
  phase_ = Phase::kHandling;
  keep_alive_ = parser_->head().keep_alive;
  exchange_ =
      std::make_shared<ExchangeImpl>(weak_from_this(), loop_.handle, std::move(parser_->head()),
                                     core_->limits.max_buffered_output);
  std::string body = std::move(parser_->body());
  parser_.reset();
  std::shared_ptr<ExchangeImpl> ex = exchange_;
  try {
    core_->handler.OnRequest(ex, std::move(body));
  } catch (const std::exception& e) {
    core_->log.Error("http: handler failed on {} {}: {}", ex->head().method, ex->head().path(),
                     e.what());
    ex->Respond(
        JsonResponse(500, R"({"error":{"message":"internal error","type":"server_error"}})"));
  }
  if (peer_eof_ && exchange_ == ex) OnPeerEof();
}

void Connection::FinishExchange() {
  exchange_timer_.cancel();
  exchange_timeout_fn_ = nullptr;
  probe_timer_.cancel();
  exchange_.reset();
  response_started_ = streaming_ = chunked_ = head_request_ = false;
  if (!keep_alive_ || core_->draining.load() || (peer_eof_ && Pending() == 0)) {
    CloseAfterWrite();
    return;
  }
  probed_ = false;
  SetPhase(Phase::kIdle);
  // Pipelined requests already read are parsed next, outside this call
  // (a handler may have answered from OnHead, inside Process); their
  // responses queue behind this one.
  asio::post(loop_.ctx, [self = shared_from_this()] {
    if (self->phase_ != Phase::kIdle) return;
    self->Process();
    if (self->peer_eof_ && self->phase_ == Phase::kIdle) {
      self->CloseAfterWrite();
      return;
    }
    self->ReadMore();
  });
}

void Connection::CloseAfterWrite() {
  if (phase_ == Phase::kClosed) return;
  close_after_write_ = true;
  phase_ = Phase::kClosing;
  CancelPhaseTimer();  // Linger uses it next
  if (!writing_ && out_.empty()) Linger();
}

void Connection::Linger() {
  if (peer_eof_) {
    Close(CancelReason::kClientGone);
    return;
  }
  // Send FIN, then give the client a moment to read before the close
  // (closing with unread input would reset the connection and could destroy
  // the response in flight); what it still sends is read and discarded.
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  phase_timer_.expires_after(std::chrono::milliseconds(500));
  phase_timer_.async_wait([self = shared_from_this()](const error_code& tec) {
    if (!tec) self->Close(CancelReason::kClientGone);
  });
  ReadMore();
}

void Connection::Reject(int status, const util::Status& why) {
  core_->rejected.fetch_add(1);
  const RequestHead* head = parser_ && parser_->is_header_done() ? &parser_->head() : nullptr;
  core_->log.Debug("http: {} from {}: {}", status, remote_, why.message());
  Response r;
  try {
    r = core_->handler.LimitResponse(head, status, why);
  } catch (const std::exception&) {
    r = JsonResponse(status,
                     R"({"error":{"message":"bad request","type":"invalid_request_error"}})");
  }
  r.status = status;
  keep_alive_ = false;
  head_request_ = head != nullptr && EqualsIgnoreCase(head->method, "HEAD");
  ClearPhaseDeadline();
  phase_ = Phase::kHandling;
  if (exchange_) {
    exchange_->Cancel(CancelReason::kClientGone);
    exchange_.reset();
  }
  response_started_ = false;
  ExchangeRespond(std::move(r));
}

void Connection::OnPeerEof() {
  if (!exchange_ || exchange_->finished()) return;
  // A half-closed client still waits for its answer; a closed one does not.
  // An interim response tells them apart: a closed peer answers it with a
  // reset, which the probe sees. HTTP/1.0 clients may not get 1xx responses,
  // and a response already under way probes by itself.
  if (!response_started_ && exchange_->head().version == 11 && !probed_) {
    probed_ = true;
    Queue(std::string(kContinue));
  }
  Probe();
}

void Connection::Probe() {
  probe_timer_.expires_after(kProbeInterval);
  probe_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (ec || self->phase_ != Phase::kHandling || !self->exchange_) return;
    // Once the peer's FIN is in, reads say end-of-input whether or not a
    // reset followed, so the socket's state is asked instead: a reset moves
    // it from CLOSE_WAIT to CLOSE and leaves its error set.
    const int fd = self->socket_.native_handle();
    tcp_info info{};
    socklen_t len = sizeof(info);
    int err = 0;
    socklen_t err_len = sizeof(err);
    const bool reset = (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
                        info.tcpi_state == TCP_CLOSE) ||
                       (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) == 0 && err != 0);
    if (reset) {
      self->Close(CancelReason::kClientGone);
      return;
    }
    self->Probe();
  });
}

void Connection::Close(CancelReason why) {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  error_code ec;
  CancelPhaseTimer();
  stall_timer_.cancel();
  probe_timer_.cancel();
  exchange_timer_.cancel();
  exchange_timeout_fn_ = nullptr;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  loop_.connections.erase(this);
  if (exchange_) {
    std::shared_ptr<ExchangeImpl> ex = std::move(exchange_);
    ex->Cancel(why);
  }
  out_.clear();
  out_bytes_ = 0;
}

// ---------------------------------------------------------------------------
// Responses

const std::string& Connection::Date() {
  const auto now = core_->clock.WallNow();
  const int64_t second =
      std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  if (second != loop_.date_second) {
    loop_.date_second = second;
    loop_.date = fmt::format("{:%a, %d %b %Y %H:%M:%S} GMT",
                             std::chrono::time_point_cast<std::chrono::seconds>(now));
  }
  return loop_.date;
}

std::string Connection::SerializeHead(int status, const Headers& headers,
                                      std::optional<size_t> length, bool chunked) {
  std::string out;
  out.reserve(256);
  out += "HTTP/1.1 ";
  out += fmt::format_int(status).c_str();
  out += ' ';
  out += ReasonPhrase(status);
  out += "\r\n";
  for (const auto& [name, value] : headers.fields()) {
    if (EqualsIgnoreCase(name, "Content-Length") || EqualsIgnoreCase(name, "Connection") ||
        EqualsIgnoreCase(name, "Transfer-Encoding") || EqualsIgnoreCase(name, "Date")) {
      continue;  // the server's to set
    }
    AppendField(out, name, value);
  }
  out += "Date: ";
  out += Date();
  out += "\r\n";
  if (length) AppendField(out, "Content-Length", fmt::format_int(*length).c_str());
  if (chunked) out += "Transfer-Encoding: chunked\r\n";
  const bool close = !keep_alive_ || core_->draining.load();
  if (close) {
    out += "Connection: close\r\n";
  } else if (version_ == 10) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  return out;
}

void Connection::ExchangeRespond(Response r) {
  if (phase_ != Phase::kHandling || response_started_) return;
  response_started_ = true;
  if (core_->draining.load()) keep_alive_ = false;
  const bool no_body = r.status < 200 || r.status == 204 || r.status == 304;
  std::string out = SerializeHead(
      r.status, r.headers, no_body ? std::nullopt : std::optional<size_t>(r.body.size()), false);
  if (!no_body && !head_request_) out += r.body;
  Queue(std::move(out));
  FinishExchange();
}

void Connection::ExchangeStartStream(int status, Headers headers) {
  if (phase_ != Phase::kHandling || response_started_) return;
  response_started_ = true;
  streaming_ = true;
  const bool v11 = version_ == 11;
  chunked_ = v11 && !head_request_;
  if (!v11) keep_alive_ = false;  // an HTTP/1.0 stream ends when the connection closes
  QueueDeferred(SerializeHead(status, headers, std::nullopt, chunked_));
}

void Connection::ExchangeWrite(std::string data) {
  if (phase_ != Phase::kHandling || !streaming_ || data.empty() || head_request_) return;
  if (chunked_) {
    std::string framed = fmt::format("{:x}\r\n", data.size());
    framed += data;
    framed += "\r\n";
    Queue(std::move(framed));
  } else {
    Queue(std::move(data));
  }
}

void Connection::ExchangeEnd() {
  if (phase_ != Phase::kHandling || !streaming_) return;
  if (chunked_) Queue("0\r\n\r\n");
  FinishExchange();
}

void Connection::ExchangeSetTimeout(std::chrono::milliseconds timeout, std::function<void()> fn) {
  if (phase_ != Phase::kHandling) return;
  exchange_timeout_fn_ = std::move(fn);
  exchange_timer_.expires_after(timeout);
  exchange_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (ec || !self->exchange_timeout_fn_) return;
    auto run = std::move(self->exchange_timeout_fn_);
    self->exchange_timeout_fn_ = nullptr;
    run();
  });
}

void Connection::Queue(std::string bytes) {
  if (bytes.empty() || phase_ == Phase::kClosed) return;
  out_bytes_ += bytes.size();
  out_.push_back(std::move(bytes));
  if (out_bytes_ >= core_->limits.max_buffered_output) congested_ = true;
  StartWrite();
}

void Connection::QueueDeferred(std::string bytes) {
  if (bytes.empty() || phase_ == Phase::kClosed) return;
  out_bytes_ += bytes.size();
  out_.push_back(std::move(bytes));
  asio::post(loop_.ctx, [self = shared_from_this()] { self->StartWrite(); });
}

void Connection::StartWrite() {
  if (writing_ || out_.empty() || phase_ == Phase::kClosed) return;
  std::vector<asio::const_buffer> bufs;
  bufs.reserve(std::min(out_.size(), kMaxWriteBuffers));
  for (auto it = out_.begin(); it != out_.end() && bufs.size() < kMaxWriteBuffers; ++it) {
    const size_t skip = bufs.empty() ? out_front_off_ : 0;
    bufs.push_back(asio::buffer(it->data() + skip, it->size() - skip));
  }
  writing_ = true;
  ArmStallTimer();
  socket_.async_write_some(bufs, [self = shared_from_this()](const error_code& ec, size_t written) {
    self->OnWrite(ec, written);
  });
}

void Connection::OnWrite(const error_code& ec, size_t n) {
  writing_ = false;
  if (phase_ == Phase::kClosed) return;
  if (ec) {
    Close(CancelReason::kClientGone);
    return;
  }
  out_bytes_ -= n;
  while (n > 0) {
    const size_t left = out_.front().size() - out_front_off_;
    if (n >= left) {
      n -= left;
      out_.pop_front();
      out_front_off_ = 0;
    } else {
      out_front_off_ += n;
      n = 0;
    }
  }
  stall_timer_.cancel();
  if (congested_ && out_bytes_ < core_->limits.max_buffered_output / 2) {
    congested_ = false;
    if (exchange_) {
      std::shared_ptr<ExchangeImpl> ex = exchange_;
      ex->NotifyWritable();
      if (phase_ == Phase::kClosed) return;
    }
  }
  if (!out_.empty()) {
    StartWrite();
    return;
  }
  if (close_after_write_) Linger();
}

void Connection::ArmStallTimer() {
  stall_timer_.expires_after(core_->limits.write_stall_timeout);
  stall_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (ec || self->phase_ == Phase::kClosed || !self->writing_) return;
    self->core_->log.Debug("http: {} read nothing for {} ms; dropping the connection",
                           self->remote_, self->core_->limits.write_stall_timeout.count());
    self->Close(CancelReason::kWriteStalled);
  });
}

// ---------------------------------------------------------------------------
// ExchangeImpl

std::shared_ptr<Connection> ExchangeImpl::Live() const {
  if (done_ || cancelled_) return nullptr;
  return connection_.lock();
}

void ExchangeImpl::Respond(Response response) {
  auto c = Live();
  if (!c || started_) return;
  done_ = true;
  ReleaseCallbacks();
  c->ExchangeRespond(std::move(response));
}

void ExchangeImpl::StartStream(int status, Headers headers) {
  auto c = Live();
  if (!c || started_) return;
  started_ = true;
  c->ExchangeStartStream(status, std::move(headers));
}

void ExchangeImpl::Write(std::string data) {
  auto c = Live();
  if (!c || !started_) return;
  c->ExchangeWrite(std::move(data));
}

void ExchangeImpl::End() {
  auto c = Live();
  if (!c || !started_) return;
  done_ = true;
  ReleaseCallbacks();
  c->ExchangeEnd();
}

void ExchangeImpl::ReleaseCallbacks() {
  // A callback often holds the exchange itself (a pump that writes to it):
  // dropping them when the exchange ends breaks that cycle. One may be the
  // function running now (End called from OnWritable): NotifyWritable runs
  // a copy, so this destroys only the stored one.
  writable_ = nullptr;
  on_cancel_ = nullptr;
}

size_t ExchangeImpl::buffered_bytes() const {
  auto c = connection_.lock();
  return c ? c->buffered_bytes() : 0;
}

void ExchangeImpl::OnCancel(std::function<void(CancelReason)> fn) {
  if (cancelled_) {
    if (fn) fn(*cancel_reason_);
    return;
  }
  on_cancel_ = std::move(fn);
}

void ExchangeImpl::SetTimeout(std::chrono::milliseconds timeout, std::function<void()> fn) {
  auto c = Live();
  if (!c) return;
  c->ExchangeSetTimeout(timeout, std::move(fn));
}

void ExchangeImpl::Cancel(CancelReason why) {
  if (done_ || cancelled_) return;
  cancelled_ = true;
  cancel_reason_ = why;
  auto fn = std::move(on_cancel_);
  ReleaseCallbacks();
  if (fn) fn(why);
}

void ExchangeImpl::NotifyWritable() {
  if (!writable_ || finished()) return;
  auto fn = writable_;  // the stored one may be released while this runs
  fn();
}

}  // namespace strata::net::internal
