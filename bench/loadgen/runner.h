// bench/loadgen/runner.h — driving the load: closed loop and open loop.
//
// Promise: RunClosedLoop keeps `concurrency` clients busy, each sending its
// next request as soon as the previous one ends, until `max_requests` have
// been started or `duration_s` has passed (a request started before the end
// runs to completion). RunOpenLoop sends request i at arrivals_s[i] seconds
// after the start, whatever the server's progress, on up to `max_in_flight`
// connections at once; when all are busy the request waits and the wait shows
// as its send lag. Both return one sample per request started, ordered by
// index, and stop early when `stop` becomes true (Ctrl-C): requests in flight
// are aborted and recorded as interrupted, unstarted ones are dropped.
//
// Threading: the calling thread schedules and watches; worker threads (one per
// client or connection) send. The factory is called from worker threads and
// must be thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loadgen/http_session.h"
#include "loadgen/recorder.h"

namespace strata::loadgen {

struct RunOptions {
  SessionOptions session;
  int64_t concurrency = 1;       // closed loop: clients, >= 1
  int64_t max_requests = 0;      // closed loop: requests to start; 0 = until duration_s
  double duration_s = 0;         // closed loop: start no request after this, seconds; 0 = no limit
  int64_t max_in_flight = 256;   // open loop: connections at once, >= 1
  double progress_every_s = 10;  // a progress line on stderr this often; 0 = none
};

// The body to send and the sample to fill for request `index`
// (base.index, target_prompt_tokens and max_tokens set; times are set by the runner).
struct PreparedRequest {
  std::string body;
  RequestSample base;
};
using RequestFactory = std::function<PreparedRequest(int64_t index)>;

struct RunResult {
  std::vector<RequestSample> samples;  // by index
  double duration_s = 0;               // start to the last completion (or the interrupt)
  bool interrupted = false;
};

RunResult RunClosedLoop(const RunOptions& options, const RequestFactory& factory,
                        const std::atomic<bool>& stop);

RunResult RunOpenLoop(const RunOptions& options, const std::vector<double>& arrivals_s,
                      const RequestFactory& factory, const std::atomic<bool>& stop);

}  // namespace strata::loadgen
