#include "loadgen/http_session.h"

#include <fmt/format.h>
#include <httplib.h>

#include <cmath>

namespace strata::loadgen {
namespace {

std::chrono::microseconds Micros(double s) {
  return std::chrono::microseconds(static_cast<int64_t>(std::llround(s * 1e6)));
}

}  // namespace

HttpSession::HttpSession(const SessionOptions& options,
                         std::chrono::steady_clock::time_point origin,
                         const std::atomic<bool>& stop)
    : options_(options),
      origin_(origin),
      stop_(stop),
      client_(std::make_unique<httplib::Client>(options.base_url)) {
  client_->set_keep_alive(true);
  client_->set_tcp_nodelay(true);
  client_->set_connection_timeout(Micros(std::min(options_.timeout_s, 30.0)));
  client_->set_read_timeout(Micros(options_.timeout_s));
  client_->set_write_timeout(Micros(options_.timeout_s));
  if (!options_.api_key.empty()) client_->set_bearer_token_auth(options_.api_key);
}

HttpSession::~HttpSession() = default;

double HttpSession::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
}

void HttpSession::Stop() { client_->stop(); }

RequestSample HttpSession::Send(const std::string& body, RequestSample base) {
  if (!client_->is_valid()) {
    base.sent_s = Now();
    StreamRecorder rec(std::move(base));
    return rec.Finish(Now(), TransportEnd::kConnect, "invalid URL " + options_.base_url);
  }
  httplib::Request req;
  req.method = "POST";
  req.path = options_.path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");

  bool timed_out = false;
  bool interrupted = false;
  bool answered = false;  // the server sent a status line
  base.sent_s = Now();
  const double deadline_s = base.sent_s + options_.timeout_s;
  StreamRecorder rec(std::move(base));
  req.response_handler = [&](const httplib::Response& res) {
    answered = true;
    rec.OnStatus(res.status);
    if (res.has_header("x-strata-cache")) rec.OnCacheHeader(res.get_header_value("x-strata-cache"));
    if (stop_.load(std::memory_order_relaxed)) {
      interrupted = true;
      return false;
    }
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double now = Now();
    rec.OnBytes(std::string_view(data, n), now);
    if (stop_.load(std::memory_order_relaxed)) {
      interrupted = true;
      return false;
    }
    if (now > deadline_s) {
      timed_out = true;
      return false;
    }
    return true;
  };

  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool sent = client_->send(req, res, err);
  if (!sent && !answered && reused_ && !stop_.load(std::memory_order_relaxed) &&
      (err == httplib::Error::Read || err == httplib::Error::Write)) {
    // The kept-alive connection was closed by the server between requests
    // (llama-server does this after streamed responses): the request never
    // reached it. Send it once more on a new connection, as HTTP clients do.
    client_->stop();
    res = httplib::Response();
    err = httplib::Error::Success;
    sent = client_->send(req, res, err);
  }
  reused_ = sent && err == httplib::Error::Success;
  const double end_s = Now();
  if (sent && err == httplib::Error::Success) {
    if (res.status != 0) rec.OnStatus(res.status);
    // A body that bypassed the receiver (httplib keeps it in res.body) still counts.
    if (!res.body.empty()) rec.OnBytes(res.body, end_s);
    return rec.Finish(end_s, TransportEnd::kComplete);
  }
  const std::string what = httplib::to_string(err);
  if (interrupted || stop_.load(std::memory_order_relaxed)) {
    return rec.Finish(end_s, TransportEnd::kInterrupted, what);
  }
  if (timed_out || end_s >= deadline_s) {
    return rec.Finish(end_s, TransportEnd::kTimeout,
                      fmt::format("no complete response within {:g} s", options_.timeout_s));
  }
  switch (err) {
    case httplib::Error::Connection:
    case httplib::Error::BindIPAddress:
    case httplib::Error::ConnectionTimeout:
    case httplib::Error::SSLConnection:
      return rec.Finish(end_s, TransportEnd::kConnect, what);
    case httplib::Error::Read:
    case httplib::Error::Write:
      return rec.Finish(end_s, TransportEnd::kDropped, what);
    default:
      return rec.Finish(end_s, TransportEnd::kOther, what);
  }
}

}  // namespace strata::loadgen
