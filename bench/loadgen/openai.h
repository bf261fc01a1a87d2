// bench/loadgen/openai.h — the OpenAI wire format as the load generator speaks it.
//
// Promise: request bodies for POST /v1/chat/completions and /v1/completions
// (always streaming, with stream_options.include_usage), an incremental
// Server-Sent Events parser, and the reading of one event: content text,
// usage, finish, `[DONE]`, or an error frame. Error frames come in three
// shapes and all are recognised: OpenAI's `data: {"error": {...}}`, an
// `event: error` event, and llama-server's `error: {...}` line.
//
// Pure functions and a value-type parser; no I/O. Thread-compatible.
//
//   SseParser p;
//   for (const SseEvent& e : p.Feed(bytes)) {
//     StreamFrame f = InterpretEvent(e);
//     if (f.kind == StreamFrame::Kind::kDone) ...
//   }
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::loadgen {

enum class Endpoint { kChat, kCompletions };

// "/v1/chat/completions" or "/v1/completions".
std::string_view EndpointPath(Endpoint endpoint);

struct BodyOptions {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;                  // "model" field; may be empty (then omitted)
  bool ignore_eos = false;            // also send "ignore_eos": true (llama-server)
  std::optional<double> temperature;  // sent only when set
  std::optional<uint64_t> seed;       // sent only when set
  // The text of a JSON object whose members are set in every body after the
  // fields above (so they may add fields or override them), e.g. strata's
  // {"cache": {"prefix": false}}; empty = nothing. BuildRequestBody throws
  // std::invalid_argument when it is not a JSON object (main.cpp checks first).
  std::string extra_json;
};

// The JSON body of one streaming request. Chat: a system message (when
// `system` is non-empty) and a user message. Completions: `system` and
// `prompt` joined by a newline.
std::string BuildRequestBody(const BodyOptions& options, const std::string& system,
                             const std::string& prompt, int64_t max_tokens);

// One dispatched SSE event. `event` is the event name ("" for the default
// message); `data` the data lines joined by '\n'.
struct SseEvent {
  std::string event;
  std::string data;
};

// Incremental SSE parser (WHATWG rules for the fields we use): lines end in
// "\n" or "\r\n"; a blank line dispatches; "data:" lines accumulate; ':' lines
// are comments; a field named "error" (llama-server) dispatches as an event
// named "error" carrying that value.
class SseParser {
 public:
  // Feeds bytes (any split, even mid-line); returns the events completed.
  std::vector<SseEvent> Feed(std::string_view bytes);
  // True when bytes or fields are waiting for the rest of their event.
  bool HasPartial() const { return !line_.empty() || has_fields_; }

 private:
  void ProcessLine(std::string_view line, std::vector<SseEvent>& out);

  std::string line_;          // an unfinished line
  SseEvent pending_;          // fields of the event being assembled
  bool has_data_ = false;     // pending_ has at least one data line
  bool has_fields_ = false;   // pending_ has any field
  bool error_field_ = false;  // pending_ came from an "error:" field
};

// What one event means.
struct StreamFrame {
  enum class Kind {
    kChunk,      // a completion chunk (possibly with empty content, or usage only)
    kDone,       // data: [DONE]
    kError,      // the server reported an error inside the stream
    kMalformed,  // data that is not JSON, or JSON of an unexpected shape
    kIgnored,    // an event the load generator does not use (ping, ...)
  };
  Kind kind = Kind::kIgnored;
  std::string content;                       // text of all choices in this chunk
  bool finished = false;                     // some choice has a finish_reason
  std::string finish_reason;                 // the first non-null finish_reason
  std::optional<int64_t> prompt_tokens;      // usage.prompt_tokens
  std::optional<int64_t> completion_tokens;  // usage.completion_tokens
  std::string error;                         // kError / kMalformed: what it said
};

StreamFrame InterpretEvent(const SseEvent& event);

// The human-readable message of an error body (`{"error": {"message": ...}}`,
// `{"error": "..."}`, `{"message": ...}`), else the body itself cut to 200 bytes.
std::string ErrorMessageFromBody(std::string_view body);

}  // namespace strata::loadgen
