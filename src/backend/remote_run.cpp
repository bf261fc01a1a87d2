// backend/remote_run.cpp — one request to a remote backend in flight:
// attempts on the replicas the router picks, resends while nothing has
// reached the caller, and the upstream's stream decoded into the sink's
// events (backend/remote.h has the promise).
#include <algorithm>
#include <mutex>

#include "backend/internal/remote_state.h"

namespace strata::backend::internal {

using Clock = std::chrono::steady_clock;

Outcome OutcomeOfHttp(int status) {
  if (status == 408 || status == 429 || status >= 500) return Outcome::kFailure;
  return Outcome::kNeutral;  // the request's own fault (400, 404, 413, 422) or its auth
}

Outcome OutcomeOf(const util::Status& st) {
  if (st.ok()) return Outcome::kSuccess;
  switch (st.reason()) {
    case util::ErrorReason::kUpstreamRejected:
    case util::ErrorReason::kUnsupportedByBackend:
      return Outcome::kNeutral;
    default:
      return st.code() == util::StatusCode::kCancelled ? Outcome::kNeutral : Outcome::kFailure;
  }
}

namespace {

bool IsRetryableHttp(int status) { return status == 429 || status == 503 || status == 529; }

// One request on its way through the replicas. Owned by the flight (as its
// Run) and by the HTTP client's callbacks; every method takes mu_.
class RemoteRun final : public Run, public std::enable_shared_from_this<RemoteRun> {
 public:
  RemoteRun(std::shared_ptr<RemoteBackend::State> state,
            std::shared_ptr<const RemotePrepared> prepared, std::string body, int32_t n_choices,
            std::vector<std::string> stops, std::shared_ptr<Sink> sink, std::string terms,
            bool traced, std::string request_id, std::shared_ptr<obs::RequestTrace> trace)
      : s_(std::move(state)),
        live_(s_->live.load()),
        p_(std::move(prepared)),
        body_(std::move(body)),
        n_choices_(n_choices),
        stops_(std::move(stops)),
        terms_(std::move(terms)),
        traced_(traced),
        request_id_(std::move(request_id)),
        trace_(std::move(trace)),
        sink_(std::move(sink)),
        decoder_(s_->options.api, p_->chat, n_choices_, stops_),
        submitted_(s_->clock.Now()) {}

  void Begin() {
    std::lock_guard<std::mutex> lock(mu_);
    AttemptLocked();
  }

  void Cancel() override {
    std::shared_ptr<net::ClientCall> call;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_) return;
      cancelled_ = true;
      call = call_;
      if (call == nullptr) {
        // Waiting for a retry's backoff: nothing runs, so finish here.
        FailLocked(util::CancelledError("the request was cancelled"));
        return;
      }
    }
    call->Cancel();  // on_done follows, with Cancelled
  }

 private:
  void AttemptLocked() {
    if (done_) return;
    if (cancelled_) {
      FailLocked(util::CancelledError("the request was cancelled"));
      return;
    }
    ++attempts_;
    auto replica = s_->router->Acquire(p_->route, tried_);
    if (!replica.ok()) {
      // No replica to try (all ejected or busy): after an earlier attempt's
      // failure that one says more.
      FailLocked(last_error_.ok() ? replica.status() : last_error_);
      return;
    }
    replica_ = *replica;
    head_status_ = 0;
    error_body_.clear();
    whole_body_.clear();
    answer_bytes_ = 0;
    protocol_error_ = util::OkStatus();
    net::ClientRequest req;
    req.method = "POST";
    req.url = s_->bases[static_cast<size_t>(replica_)] + p_->call.path;
    req.headers = s_->Headers(*live_, true, !p_->whole);
    // The upstream's logs (another strata's, vLLM's) then name the same request.
    if (!request_id_.empty()) req.headers.Set("X-Request-ID", request_id_);
    // Each attempt is one CLIENT span, the upstream's parent.
    call_span_ =
        s_->StartCall(trace_.get(), p_->chat ? "chat" : "text_completion", replica_, req.headers);
    if (attempts_ > 1) call_span_.SetInt("http.request.resend_count", attempts_ - 1);
    req.body = body_;
    // A whole answer's first byte comes when the upstream has generated all
    // of it: only the total deadline bounds that wait.
    req.first_byte_timeout = p_->whole ? live_->total_timeout : live_->first_byte_timeout;
    req.total_timeout = live_->total_timeout;
    std::weak_ptr<RemoteRun> weak = weak_from_this();
    net::ClientCallbacks cb;
    cb.on_head = [weak](const net::ClientResponseHead& h) {
      if (auto self = weak.lock()) self->OnHead(h);
    };
    cb.on_body = [weak](std::string_view b) {
      if (auto self = weak.lock()) self->OnBody(b);
    };
    // The last callback holds the run: it must learn how the call ended.
    cb.on_done = [self = shared_from_this()](const util::Status& st) { self->OnDone(st); };
    call_ = s_->client.Start(std::move(req), std::move(cb));
  }

  void OnHead(const net::ClientResponseHead& h) {
    std::lock_guard<std::mutex> lock(mu_);
    head_status_ = h.status;
    call_span_.SetInt("http.response.status_code", h.status);
    if (admitted_ == Clock::time_point{}) admitted_ = s_->clock.Now();
    const std::string_view type = h.headers.GetOr("Content-Type");
    whole_ = h.status == 200 && type.find("text/event-stream") == std::string_view::npos &&
             type.find("json") != std::string_view::npos;
  }

  void OnBody(std::string_view bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    if (head_status_ != 200) {
      constexpr size_t kMaxErrorBody = 64u << 10;
      error_body_.append(
          bytes.substr(0, kMaxErrorBody - std::min(kMaxErrorBody, error_body_.size())));
      return;
    }
    if (!protocol_error_.ok()) return;
    answer_bytes_ += bytes.size();
    if (answer_bytes_ > live_->max_answer_bytes) {
      protocol_error_ = util::InternalError(fmt::format("the upstream's answer exceeds {} bytes",
                                                        live_->max_answer_bytes))
                            .WithReason(util::ErrorReason::kUpstreamProtocol);
      if (call_) call_->Cancel();
      return;
    }
    if (whole_) {
      whole_body_.append(bytes);
      return;
    }
    std::vector<Event> events;
    // Room for the events these bytes may hold (an event of a stream takes
    // well over 64 bytes), so that the vector seldom grows by moving them.
    events.reserve(std::min<size_t>(bytes.size() / 64 + 1, 64));
    util::Status st = decoder_.Feed(bytes, &events);
    DeliverLocked(std::move(events));
    if (!st.ok()) {
      protocol_error_ = st;
      if (call_) call_->Cancel();
    }
  }

  void OnDone(const util::Status& transport) {
    std::lock_guard<std::mutex> lock(mu_);
    call_.reset();
    if (done_) {
      // Released when the last choice finished (DeliverLocked).
      if (replica_ >= 0) Release(Outcome::kNeutral);
      EndCallSpan(finish_error_);
      return;
    }
    std::vector<Event> events;
    util::Status failure;
    bool retryable = false;
    if (head_status_ == 200) {
      if (!protocol_error_.ok()) {
        failure = protocol_error_;
      } else if (!transport.ok()) {
        failure = cancelled_ ? util::CancelledError("the request was cancelled") : transport;
      } else if (whole_) {
        failure = upstream::DecodeWholeResponse(s_->options.api, p_->chat, n_choices_, stops_,
                                                whole_body_, &events);
        if (failure.ok()) decoder_ = upstream::StreamDecoder(s_->options.api, p_->chat, 1, {});
      } else {
        failure = decoder_.End(&events);
      }
    } else if (head_status_ != 0) {
      failure = transport.ok() || !cancelled_
                    ? upstream::UpstreamError(s_->options.api, head_status_, error_body_)
                    : util::CancelledError("the request was cancelled");
      retryable = !cancelled_ && IsRetryableHttp(head_status_) && !decoder_.started();
    } else {
      failure = cancelled_ ? util::CancelledError("the request was cancelled") : transport;
      // Nothing was sent: the next replica may take it.
      retryable = !cancelled_ && transport.reason() == util::ErrorReason::kUpstreamUnavailable;
    }
    const bool whole_ok = whole_ && head_status_ == 200 && failure.ok();
    DeliverLocked(std::move(events));
    if (whole_ok) {
      Release(Outcome::kSuccess);
      EndCallSpan(finish_error_);
      return;
    }
    Release(head_status_ != 0 && head_status_ != 200 ? OutcomeOfHttp(head_status_)
                                                     : OutcomeOf(failure));
    if (failure.ok()) {
      if (decoder_.complete()) {
        EndCallSpan(finish_error_);
        return;
      }
      failure = util::InternalError("the upstream's stream ended without finishing every choice")
                    .WithReason(util::ErrorReason::kUpstreamProtocol);
    }
    EndCallSpan(failure);
    if (failure.code() != util::StatusCode::kCancelled &&
        failure.reason() != util::ErrorReason::kNone) {
      s_->failures->With({s_->options.name, std::string(util::ErrorReasonName(failure.reason()))})
          .Inc();
    }
    if (retryable && attempts_ < live_->max_attempts) {
      last_error_ = failure;
      tried_.push_back(replica_);
      replica_ = -1;
      s_->retries->Inc();
      const auto delay = s_->router->Backoff(attempts_);
      s_->log.Info("[{}] {} upstream attempt {} failed ({}); retrying in {} ms", request_id_,
                   s_->options.name, attempts_, failure.message(),
                   std::chrono::duration_cast<std::chrono::milliseconds>(delay).count());
      s_->client.After(delay, [self = shared_from_this()](bool stopped) {
        std::lock_guard<std::mutex> relock(self->mu_);
        if (stopped) {
          self->FailLocked(util::UnavailableError("the server is shutting down")
                               .WithReason(util::ErrorReason::kShuttingDown));
          return;
        }
        self->AttemptLocked();
      });
      return;
    }
    if (failure.code() != util::StatusCode::kCancelled) {
      s_->log.Warn("[{}] {} upstream request failed: {}", request_id_, s_->options.name,
                   failure.message());
    }
    FailLocked(failure);
  }

  // The attempt's CLIENT span ends with how the exchange ended: the
  // reason's name only (an upstream's message may quote the request).
  void EndCallSpan(const util::Status& how) {
    if (!call_span_.recording()) return;
    if (span_input_tokens_ > 0) call_span_.SetInt("gen_ai.usage.input_tokens", span_input_tokens_);
    if (span_output_tokens_ > 0) {
      call_span_.SetInt("gen_ai.usage.output_tokens", span_output_tokens_);
    }
    if (!how.ok()) {
      const std::string_view reason = how.code() == util::StatusCode::kCancelled
                                          ? "cancelled"
                                          : util::ErrorReasonName(how.reason());
      call_span_.SetString("error.type", reason);
      call_span_.SetError(reason);
    }
    call_span_.End();
  }

  void Release(Outcome outcome) {
    if (replica_ < 0) return;
    s_->router->Release(replica_, outcome);
    replica_ = -1;
  }

  // Finishes every open choice with `why`.
  void FailLocked(const util::Status& why) {
    if (done_) return;
    std::vector<Event> events;
    decoder_.Fail(why, &events);
    DeliverLocked(std::move(events));
    done_ = true;
    sink_.reset();
  }

  void DeliverLocked(std::vector<Event> events) {
    if (sink_ == nullptr || events.empty()) return;  // every choice finished: nothing more goes out
    // The events of one read arrived together: one time for all of them,
    // and one hand-over to the sink.
    const auto now = s_->clock.Now();
    size_t kept = 0;
    for (size_t k = 0; k < events.size() && !done_; ++k) {
      Event& e = events[k];
      if (p_->answer_in_tool) {
        // The forced tool's input is the JSON answer.
        for (const ToolCallDelta& t : e.tool_calls) e.text += t.arguments;
        e.tool_calls.clear();
        if (e.finish == FinishReason::kToolCalls) e.finish = FinishReason::kEndOfTurn;
        if (e.kind == Event::Kind::kDelta && e.text.empty() && e.logprobs.empty() &&
            e.usage.prompt_tokens == 0) {
          continue;  // the call's opening piece: no text yet
        }
      }
      if (e.kind == Event::Kind::kDelta) {
        if (first_ == Clock::time_point{}) {
          first_ = now;
          sink_->OnFirstToken(now - submitted_);
        }
      } else {
        e.timing = Timing{.submitted = submitted_,
                          .admitted = admitted_,
                          .first_token = first_,
                          .finished = now,
                          .tokens = e.usage.completion_tokens};
        e.terms = terms_;
        e.traced = traced_;
        span_input_tokens_ = std::max<int64_t>(span_input_tokens_, e.usage.prompt_tokens);
        span_output_tokens_ += e.usage.completion_tokens;
        if (replica_ >= 0) e.replica = s_->bases[static_cast<size_t>(replica_)];
        if (e.status.ok()) {
          s_->prompt_tokens->Inc(e.usage.prompt_tokens);
          s_->cached_tokens->Inc(e.usage.cached_tokens);
          s_->cache_write_tokens->Inc(e.usage.cache_write_tokens);
        } else if (finish_error_.ok()) {
          finish_error_ = e.status;
        }
        if (++finished_ == n_choices_) {
          done_ = true;
          // Every choice is answered: the replica is free before the client
          // hears so (a client's next request must not find this one still
          // outstanding, whatever of the stream, "[DONE]", is still on its
          // way), and its breaker learns how the answer ended.
          Release(finish_error_.ok() ? Outcome::kSuccess : OutcomeOf(finish_error_));
        }
      }
      if (kept != k) events[kept] = std::move(e);
      ++kept;
    }
    // Nothing goes out after the last finish.
    events.erase(events.begin() + static_cast<std::ptrdiff_t>(kept), events.end());
    if (!events.empty()) sink_->PushAll(std::move(events));
    // After the last finish the sink is let go: it is the flight that
    // holds this run, and the two would otherwise keep each other (and
    // the backend's state) alive for good.
    if (done_) sink_.reset();
  }

  const std::shared_ptr<RemoteBackend::State> s_;
  const std::shared_ptr<const RemoteLiveOptions> live_;  // as when the run started
  const std::shared_ptr<const RemotePrepared> p_;
  const std::string body_;
  const int32_t n_choices_;
  const std::vector<std::string> stops_;
  const std::string terms_;
  const bool traced_;
  const std::string request_id_;
  const std::shared_ptr<obs::RequestTrace> trace_;  // null: not traced

  std::mutex mu_;               // guards everything below
  std::shared_ptr<Sink> sink_;  // null once every choice finished
  upstream::StreamDecoder decoder_;
  std::shared_ptr<net::ClientCall> call_;  // the attempt in flight; null between attempts
  std::vector<int32_t> tried_;             // replicas that failed this request
  util::Status last_error_;                // the last retried failure
  int32_t replica_ = -1;                   // acquired from the router, not yet released
  int32_t attempts_ = 0;
  int head_status_ = 0;  // 0: no response head (yet)
  bool whole_ = false;   // the upstream answered JSON, not a stream
  std::string error_body_;
  std::string whole_body_;
  size_t answer_bytes_ = 0;  // of this attempt's 200 body
  util::Status protocol_error_;
  util::Status finish_error_;  // the first choice that finished with an error
  bool cancelled_ = false;
  bool done_ = false;  // every choice finished
  int32_t finished_ = 0;
  const Clock::time_point submitted_;
  Clock::time_point admitted_{};
  Clock::time_point first_{};
  obs::Span call_span_;  // the attempt in flight's CLIENT span (empty unless recording)
  int64_t span_input_tokens_ = 0;
  int64_t span_output_tokens_ = 0;
};

}  // namespace

std::shared_ptr<Run> StartRemoteRun(std::shared_ptr<RemoteBackend::State> state,
                                    std::shared_ptr<const RemotePrepared> prepared,
                                    std::string body, int32_t n_choices,
                                    std::vector<std::string> stops, std::shared_ptr<Sink> sink,
                                    std::string terms, bool traced, std::string request_id,
                                    std::shared_ptr<obs::RequestTrace> trace) {
  auto run = std::make_shared<RemoteRun>(
      std::move(state), std::move(prepared), std::move(body), n_choices, std::move(stops),
      std::move(sink), std::move(terms), traced, std::move(request_id), std::move(trace));
  run->Begin();
  return run;
}

}  // namespace strata::backend::internal
