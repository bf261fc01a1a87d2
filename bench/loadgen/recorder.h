// bench/loadgen/recorder.h — what one request measured, and how it is measured.
//
// Promise: StreamRecorder turns the events of one HTTP exchange (status,
// body bytes with their arrival times, the transport's ending) into a
// RequestSample: TTFT, TPOT, end-to-end latency, token counts, and an outcome
// with an error kind. It takes every timestamp as an argument (seconds from
// the start of the run), so the measuring rules are unit-tested without a
// clock or a socket.
//
// Measuring rules:
//  - TTFT = time of the first body read that carried non-empty content text
//    minus the time the request was sent (role-only and empty chunks do not
//    count).
//  - TPOT = (last content time - first content time) / (output tokens - 1),
//    defined when output tokens >= 2. Output tokens = usage.completion_tokens
//    when the server sent usage, else the number of content chunks.
//  - E2E = end time (response complete or failed) minus sent time.
//
// Error kinds (stable strings, used as JSON keys): "http_<status>" (non-200
// answer; message from its error body), "stream_error" (an error frame inside
// a 200 stream), "timeout" (--timeout reached), "connect" (no connection),
// "dropped" (the connection broke mid-response), "bad_response" (a frame that
// is not a completion chunk), "incomplete_stream" (the body ended without
// [DONE] or a finish_reason), "transport" (any other client-side failure),
// "client" (the load generator could not build the request; see runner.cpp).
// Requests cut short by Ctrl-C are "interrupted", not failed.
//
// Thread-compatible: one recorder per request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "loadgen/openai.h"

namespace strata::loadgen {

enum class Outcome { kOk, kFailed, kInterrupted };

struct RequestSample {
  int64_t index = 0;                 // position in the run's request order
  double scheduled_s = 0;            // planned start (open loop, trace) or start (closed loop)
  double sent_s = 0;                 // when the request was handed to the socket
  double first_token_s = -1;         // first content; < 0: none
  double last_token_s = -1;          // last content; < 0: none
  double end_s = 0;                  // response complete or failed
  int64_t target_prompt_tokens = 0;  // what the prompt was built for, system prompt included
  int64_t max_tokens = 0;            // what was asked for
  int64_t prompt_tokens = -1;        // usage.prompt_tokens; < 0: not reported
  int64_t completion_tokens = -1;    // usage.completion_tokens; < 0: not reported
  int64_t content_chunks = 0;        // chunks that carried content text
  int http_status = 0;               // 0: no response
  Outcome outcome = Outcome::kOk;
  std::string error_kind;     // empty when ok
  std::string error_message;  // the server's or the transport's words
  std::string finish_reason;  // "length", "stop", ... when sent
  std::string cache;          // the x-strata-cache response header ("miss", "l1", "l3",
                              // "coalesced"); empty when the server sent none

  std::optional<double> TtftS() const;
  std::optional<double> TpotS() const;
  double E2eS() const { return end_s - sent_s; }
  int64_t OutputTokens() const {
    return completion_tokens >= 0 ? completion_tokens : content_chunks;
  }
};

// How the transport ended the exchange.
enum class TransportEnd {
  kComplete,     // the response was read to its end
  kTimeout,      // --timeout reached (by the client's own check or a read timeout)
  kConnect,      // could not connect
  kDropped,      // read or write failed after connecting
  kInterrupted,  // the run was stopped (Ctrl-C)
  kOther,        // any other client-side failure
};

class StreamRecorder {
 public:
  // `base` carries index, scheduled_s, sent_s and the target sizes.
  explicit StreamRecorder(RequestSample base) : s_(std::move(base)) {}

  void OnStatus(int http_status);
  // The value of the response header x-strata-cache (strata says how it
  // served the request: docs/api.md); not called when the header is absent.
  void OnCacheHeader(std::string_view value);
  // Body bytes read at `now_s`.
  void OnBytes(std::string_view bytes, double now_s);
  // Ends the exchange at `end_s`; `transport_message` explains a non-complete end.
  RequestSample Finish(double end_s, TransportEnd end, std::string_view transport_message = {});

 private:
  static constexpr size_t kMaxErrorBody = 64 * 1024;  // bytes of a non-200 body kept

  RequestSample s_;
  SseParser parser_;
  std::string error_body_;    // body of a non-200 answer (first kMaxErrorBody bytes)
  bool done_ = false;         // [DONE] seen
  bool finished_ = false;     // a finish_reason seen
  std::string stream_error_;  // first error frame
  std::string malformed_;     // first malformed frame
};

// "ok", "failed" or "interrupted".
std::string_view OutcomeName(Outcome outcome);

}  // namespace strata::loadgen
