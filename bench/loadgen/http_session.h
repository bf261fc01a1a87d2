// bench/loadgen/http_session.h — one keep-alive connection sending streaming requests.
//
// Promise: Send() posts one body, reads the SSE stream as it arrives and
// returns a RequestSample; it never throws and never aborts the tool: every
// failure (refused connection, non-200 answer, error frame, dropped
// connection, --timeout) becomes the sample's outcome. Times are read from
// std::chrono::steady_clock (this is a tool; the measuring rules themselves
// live in StreamRecorder and take timestamps).
//
// Threading: one session per worker thread; Stop() may be called from any
// other thread to abort the request in flight (the run was interrupted).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "loadgen/recorder.h"

namespace httplib {
class Client;
}

namespace strata::loadgen {

struct SessionOptions {
  std::string base_url = "http://127.0.0.1:8080";  // scheme://host:port
  std::string path = "/v1/chat/completions";
  std::string api_key;     // sent as "Authorization: Bearer"; empty = none
  double timeout_s = 600;  // per request, connect to last byte; > 0
};

class HttpSession {
 public:
  // `origin` is time 0 of the run; `stop` is the run's interrupt flag.
  HttpSession(const SessionOptions& options, std::chrono::steady_clock::time_point origin,
              const std::atomic<bool>& stop);
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  // Sends `body`; `base` carries index, scheduled_s and target sizes
  // (sent_s is filled in here).
  RequestSample Send(const std::string& body, RequestSample base);

  // Aborts the request in flight, if any. Thread-safe.
  void Stop();

  // Seconds since the origin.
  double Now() const;

 private:
  SessionOptions options_;
  std::chrono::steady_clock::time_point origin_;
  const std::atomic<bool>& stop_;
  std::unique_ptr<httplib::Client> client_;
  bool reused_ = false;  // the connection served the previous request and was kept alive
};

}  // namespace strata::loadgen
