// net/internal/connection.h — one accepted connection and the exchanges on
// it (private to net/).
//
// A Connection reads requests one after another (keep-alive, pipelining),
// checks them against the limits while reading (RequestParser), hands each
// complete request to the handler as an Exchange, and writes the responses in
// request order. It owns its socket, its input and output buffers and its
// timers; pending asynchronous operations hold it alive (shared_ptr), and
// Close() ends them all.
//
// Threading: everything here runs on the connection's I/O thread (its
// loop), except LoopHandle, which other threads use to reach it.
#pragma once

#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>

#include "net/http_server.h"
#include "net/internal/asio.h"
#include "net/internal/loop.h"
#include "net/internal/request_parser.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::net::internal {

class Connection;

// What every connection of one server shares (immutable but for the atomics
// and the per-client table).
struct ServerCore {
  ServerCore(const HttpLimits& l, HttpHandler& h, util::Logger& lg, const util::Clock& c)
      : limits(l), handler(h), log(lg), clock(c) {}
  const HttpLimits limits;
  HttpHandler& handler;
  util::Logger& log;
  const util::Clock& clock;
  std::atomic<bool> draining{false};
  std::atomic<int64_t> open{0};
  std::atomic<int64_t> accepted{0};
  std::atomic<int64_t> refused{0};
  std::atomic<int64_t> displaced{0};
  std::atomic<int64_t> requests{0};
  std::atomic<int64_t> rejected{0};

  // Takes a slot for `remote`; false when it already has its cap.
  bool AcquireClient(const std::string& remote);
  void ReleaseClient(const std::string& remote);

 private:
  std::mutex clients_mu_;
  std::unordered_map<std::string, int32_t> clients_;  // guarded by clients_mu_: open per address
};

// What one server keeps per loop. Owned by the loop's thread; held by the
// server and by each of its connections on that loop, so a connection whose
// last handler runs after the server is gone (shared loops) still finds it.
struct ServerLoop {
  explicit ServerLoop(Loop& l) : ctx(l.ctx), handle(std::make_shared<LoopHandle>(&l.ctx)) {}
  asio::io_context& ctx;
  // Exchange::Post's way in; detached when the server stops.
  const std::shared_ptr<LoopHandle> handle;
  std::unordered_set<Connection*> connections;
  std::string date;          // the Date header's value, refreshed once a second
  int64_t date_second = -1;  // the unix second `date` is for
  bool stopped = false;      // the server stopped: a connection handed over now is closed
};

class ExchangeImpl;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<ServerCore> core, std::shared_ptr<ServerLoop> loop, tcp::socket socket,
             std::string remote);
  ~Connection();

  void Start();
  // Cancels the exchange in progress (if any) with `why` and closes the
  // socket; idempotent.
  void Close(CancelReason why);
  // Waiting for a request's headers (or idle between requests): the kind of
  // connection that may be displaced at the connection cap.
  bool Displaceable() const { return phase_ == Phase::kIdle || phase_ == Phase::kHead; }
  std::chrono::steady_clock::time_point phase_start() const { return phase_start_; }
  bool idle() const { return phase_ == Phase::kIdle && Pending() == 0; }

  // Called by the current exchange (I/O thread).
  void ExchangeRespond(Response response);
  void ExchangeStartStream(int status, Headers headers);
  void ExchangeWrite(std::string data);
  void ExchangeEnd();
  void ExchangeSetTimeout(std::chrono::milliseconds timeout, std::function<void()> fn);
  size_t buffered_bytes() const { return out_bytes_; }

 private:
  enum class Phase {
    kIdle,      // between requests: no byte of the next one yet
    kHead,      // reading a request's line and fields
    kBody,      // reading its body
    kHandling,  // the handler has it; input is only watched
    kClosing,   // the last response is going out, then the socket closes
    kClosed,
  };

  size_t Pending() const { return in_.size() - in_off_; }
  void SetPhase(Phase p);
  void ArmPhaseTimer();
  // The phase deadline is kept lazily: the timer stays armed at the earliest
  // deadline set since it last fired, and a later deadline only moves
  // phase_deadline_ (the timer, when it fires early, waits again for the
  // rest). A request then costs no timer system call as its phases pass.
  void WaitPhaseTimer(uint64_t gen);
  // No phase deadline now; the armed timer, if any, fires and finds none.
  void ClearPhaseDeadline() { phase_deadline_ = TimePoint::max(); }
  // Stops the timer for good (closing, or another use of it follows).
  void CancelPhaseTimer();
  void OnPhaseTimer();
  void ReadMore();
  void OnRead(const error_code& ec, size_t n);
  // Parses what the input holds as far as the phase allows.
  void Process();
  bool ProcessHead();
  bool ProcessBody();
  void BeginExchange();
  void FinishExchange();
  // Closes once the queued output has gone out (at once when none is queued).
  void CloseAfterWrite();
  void Linger();
  // A limit or a malformed request: answers with `status` and closes.
  void Reject(int status, const util::Status& why);
  // End of input (or a reset seen by the probe) while a request is handled.
  void OnPeerEof();
  void Probe();

  // Output.
  std::string SerializeHead(int status, const Headers& headers, std::optional<size_t> length,
                            bool chunked);
  void Queue(std::string bytes);
  // Queues `bytes` without writing yet: they go out with whatever this
  // handler queues next (a stream's head with its first chunk, in one system
  // call), or on their own once the handler returns.
  void QueueDeferred(std::string bytes);
  void StartWrite();
  void OnWrite(const error_code& ec, size_t n);
  void ArmStallTimer();
  const std::string& Date();

  const std::shared_ptr<ServerCore> core_;
  const std::shared_ptr<ServerLoop> loop_ptr_;
  ServerLoop& loop_;
  tcp::socket socket_;
  const std::string remote_;

  Phase phase_ = Phase::kIdle;
  std::chrono::steady_clock::time_point phase_start_;
  using TimePoint = std::chrono::steady_clock::time_point;
  asio::steady_timer phase_timer_;               // idle, header and body deadlines
  uint64_t phase_timer_gen_ = 0;                 // ignores a timer that fired for an older phase
  TimePoint phase_deadline_ = TimePoint::max();  // the phase's own; max: none
  TimePoint phase_armed_ = TimePoint::max();     // when phase_timer_ fires; max: not armed
  asio::steady_timer stall_timer_;               // output waiting without progress
  asio::steady_timer probe_timer_;               // after end of input: watches for a reset
  asio::steady_timer exchange_timer_;            // the handler's timeout (ExchangeSetTimeout)
  std::function<void()> exchange_timeout_fn_;

  // Input: bytes read and not yet consumed are in_[in_off_, in_.size()).
  std::array<char, 16u << 10> read_buf_{};
  std::string in_;
  size_t in_off_ = 0;
  bool reading_ = false;
  bool peer_eof_ = false;
  bool probed_ = false;
  std::unique_ptr<RequestParser> parser_;
  std::shared_ptr<ExchangeImpl> exchange_;

  // The current response.
  bool response_started_ = false;  // any byte of it queued
  bool streaming_ = false;
  bool chunked_ = false;
  bool head_request_ = false;
  bool keep_alive_ = true;  // of the current request, as the response says
  int version_ = 11;        // of the current request

  // Output: whole byte strings, the first partly written (out_front_off_).
  std::deque<std::string> out_;
  size_t out_front_off_ = 0;
  size_t out_bytes_ = 0;
  bool writing_ = false;
  bool congested_ = false;
  bool close_after_write_ = false;
};

// The Exchange a handler holds: forwards to its connection while that lives.
class ExchangeImpl final : public Exchange {
 public:
  ExchangeImpl(std::weak_ptr<Connection> connection, std::shared_ptr<LoopHandle> loop,
               RequestHead head, size_t max_buffered)
      : connection_(std::move(connection)),
        loop_(std::move(loop)),
        head_(std::move(head)),
        max_buffered_(max_buffered) {}

  void Post(std::function<void()> fn) override { loop_->Post(std::move(fn)); }
  void Respond(Response response) override;
  void StartStream(int status, Headers headers) override;
  void Write(std::string data) override;
  void End() override;
  size_t buffered_bytes() const override;
  bool congested() const override { return buffered_bytes() >= max_buffered_; }
  void OnWritable(std::function<void()> fn) override { writable_ = std::move(fn); }
  void OnCancel(std::function<void(CancelReason)> fn) override;
  bool cancelled() const override { return cancelled_; }
  void SetTimeout(std::chrono::milliseconds timeout, std::function<void()> fn) override;
  const RequestHead& head() const override { return head_; }

  // From the connection.
  bool finished() const { return done_ || cancelled_; }
  void Cancel(CancelReason why);
  void NotifyWritable();

 private:
  std::shared_ptr<Connection> Live() const;
  void ReleaseCallbacks();

  const std::weak_ptr<Connection> connection_;
  const std::shared_ptr<LoopHandle> loop_;
  const RequestHead head_;
  const size_t max_buffered_;
  bool started_ = false;  // StartStream called
  bool done_ = false;     // Respond or End called
  bool cancelled_ = false;
  std::optional<CancelReason> cancel_reason_;
  std::function<void(CancelReason)> on_cancel_;
  std::function<void()> writable_;
};

}  // namespace strata::net::internal
