// backend/upstream_wire.h — the translation between the normalised request
// and events (backend/backend.h) and an upstream model server's HTTP API: an
// OpenAI-compatible server (vLLM, SGLang, llama-server, OpenAI, another
// strata) or the Anthropic Messages API. Pure functions and one decoder; the
// HTTP plumbing, retries and routing live elsewhere.
//
// Promise:
// - RenderRequest sends only what the client set (Request::sampling_set):
//   the upstream keeps its own defaults for the rest. The body asks for a
//   stream ("stream": true; OpenAI also "stream_options":
//   {"include_usage": true}) unless RenderOptions::stream is false; then for
//   one whole response (DecodeWholeResponse). A field the upstream's API cannot carry is
//   never dropped: InvalidArgument with reason kUnsupportedByBackend naming
//   the field as the client spelled it (docs/api.md, "Remote backends:
//   translation", has the table field by field).
// - StreamDecoder turns the upstream's response body (SSE) into Events:
//   per choice, text deltas in order, then exactly one kFinish carrying the
//   finish reason and the usage (an OpenAI finish waits for the usage chunk
//   or "[DONE]"; with n > 1 every finish carries the prompt and cached
//   tokens, and the completion tokens are split evenly over the choices, the
//   first ones taking the remainder, so their sum is the upstream's total).
//   Any split of the body into Feed calls gives the same events. An error
//   the upstream sends mid-stream ends every unfinished choice with kFinish
//   kCancelled and the Status it maps to (the reasons of UpstreamError); one
//   it sends before any event went out is Feed's error instead, so that the
//   caller may still retry elsewhere. Bytes that are not what the API
//   defines (malformed JSON, a wrong type, a choice index out of range, an
//   event over max_event_bytes, a body that ends early) are a Status with
//   reason kUpstreamProtocol: never a crash. Memory is bounded: the bytes
//   of one Feed call, one unfinished event (at most max_event_bytes) and
//   the JSON of one event while it is read (at most ~20 times its size).
//   Text is valid UTF-8 (invalid bytes become U+FFFD).
// - UpstreamError turns an upstream's error answer into a Status by its HTTP
//   status, quoting the upstream's own message (at most ~300 bytes of valid
//   UTF-8, control characters as spaces); nothing else of the body, never a
//   header.
//
// Threading: pure functions; a StreamDecoder is used by one thread at a time.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(Call call, RenderRequest(Api::kOpenAI, request,
//                                                    {.model = "llama-3-8b", .max_tokens = 256}));
//   ... POST call.body to base_url + call.path; a status other than 200:
//   return UpstreamError(Api::kOpenAI, http_status, body);
//   StreamDecoder decoder(Api::kOpenAI, /*chat=*/true, request.n, request.stop);
//   std::vector<Event> events;
//   for each chunk of the body:
//     util::Status s = decoder.Feed(chunk, &events);
//     if (!s.ok() && !decoder.started() && <s is worth a retry>) retry elsewhere;
//     if (!s.ok()) decoder.Fail(s, &events);   // also on a transport error
//     push `events` to the sink, clear it; stop reading once decoder.complete()
//   at the end of the body: if (!decoder.End(&events).ok()) decoder.Fail(...)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "util/status.h"

namespace strata::backend::upstream {

enum class Api { kOpenAI, kAnthropic };

// "openai", "anthropic".
std::string_view ApiName(Api api);
// The inverse of ApiName; nullopt for anything else.
std::optional<Api> ParseApi(std::string_view name);

struct RenderOptions {
  // The upstream's model id (the "model" field sent). OpenAI: "" omits the
  // field (a single-model server such as llama-server needs none);
  // Anthropic: required.
  std::string model = "";
  // Per choice, decided by the caller; 0 = omit (OpenAI only: the Anthropic
  // API requires max_tokens, so 0 there is InvalidArgument).
  int32_t max_tokens = 0;
  // Anthropic: when the request carries no cache breakpoint, mark the last
  // system block with cache_control {"type": "ephemeral"}.
  bool cache_system_prompt = false;
  // false asks for one whole JSON response instead of a stream (a client
  // that does not stream; DecodeWholeResponse reads it).
  bool stream = true;
};

// The tool an Anthropic upstream is made to call for a json_object answer
// (a json_schema answer's tool takes the schema's name); the call's input
// is the answer's text (RemoteBackend turns it back).
inline constexpr std::string_view kJsonAnswerTool = "json_answer";

// One HTTP call: the path under the upstream's base URL ("/v1/chat/completions",
// "/v1/completions", "/v1/messages") and its JSON body.
struct Call {
  std::string path;
  std::string body;
};

// OpenAI: chat (no prompt) → /v1/chat/completions with messages; a prompt →
// /v1/completions. Anthropic: /v1/messages (a prompt, n > 1, penalties,
// seed, min_p, logprobs, strata's samplers, ignore_eos, temperature > 1 and
// a system message after the conversation began cannot be carried).
util::StatusOr<Call> RenderRequest(Api api, const Request& r, const RenderOptions& o);

// The most choices a decoder keeps track of (a request's n is at most 128).
inline constexpr int32_t kMaxChoices = 1024;

namespace internal {
class DecoderCore;
}

// One upstream response body (the SSE stream RenderRequest asked for) →
// Events.
class StreamDecoder {
 public:
  // `chat`: OpenAI's chat stream, else its /v1/completions stream (ignored
  // for Anthropic). `n_choices`: the choices the request asked for
  // (1 to kMaxChoices, clamped; Anthropic always has one). `stops`: the request's stop strings
  // (an OpenAI upstream that reports the matched one as vLLM's "stop_reason"
  // gives kStopString). `max_event_bytes`: the largest SSE event accepted.
  StreamDecoder(Api api, bool chat, int32_t n_choices, std::vector<std::string> stops,
                size_t max_event_bytes = 16u << 20);
  ~StreamDecoder();
  StreamDecoder(StreamDecoder&&) noexcept;
  StreamDecoder& operator=(StreamDecoder&&) noexcept;

  // Decodes the next bytes of the body, appending events to *out. An error
  // (reason kUpstreamProtocol, or the upstream's own error when it came
  // before any event) is returned again by every later call; the events
  // appended before it stand. Bytes after the stream completed are ignored.
  util::Status Feed(std::string_view body_bytes, std::vector<Event>* out);
  // The body ended: a last event without its blank line is decoded, and a
  // stream that did not end properly is kUpstreamProtocol ("... ended
  // before ..."). An OpenAI stream whose every choice finished but that
  // lacks "[DONE]" (or the usage chunk) is accepted, with the usage seen.
  util::Status End(std::vector<Event>* out);
  // The run failed with `status` (a Feed or End error, a transport error, a
  // timeout): every choice whose kFinish has not gone out finishes now —
  // with its own reason when the upstream had reported it, else kCancelled
  // with `status`. Afterwards complete() is true; a no-op once complete.
  void Fail(const util::Status& status, std::vector<Event>* out);

  // At least one event was produced: a caller must not retry the request
  // on another replica after that.
  bool started() const;
  // Every choice's kFinish went out.
  bool complete() const;

 private:
  std::unique_ptr<internal::DecoderCore> core_;
};

// A whole non-streaming JSON body (an upstream that ignored "stream": true)
// decoded into the events a stream would have given: per choice, one delta
// (when there is text or logprobs) and its kFinish. An error body is the
// Status it maps to (no events); anything malformed is kUpstreamProtocol.
util::Status DecodeWholeResponse(Api api, bool chat, int32_t n_choices,
                                 const std::vector<std::string>& stops, std::string_view body,
                                 std::vector<Event>* out);

// An upstream's error answer as a Status, by HTTP status:
//   400, 404, 413, 422   InvalidArgument     kUpstreamRejected
//   401, 403             PermissionDenied    kUpstreamError ("the upstream refused strata's
//                                                             credential")
//   408, 504             DeadlineExceeded    kUpstreamTimeout
//   429                  ResourceExhausted   kUpstreamRateLimited
//   503, 529             Unavailable         kUpstreamOverloaded
//   other 5xx            Unavailable         kUpstreamError
//   anything else        Unknown             kUpstreamError
// A rejection (400, 404, 413, 422) saying that the prompt does not fit the
// upstream model's context (OpenAI's code "context_length_exceeded",
// Anthropic's "prompt is too long", strata's and vLLM's wording) is
// InvalidArgument with kContextLengthExceeded instead, so the client gets
// the code it would have got from the model's own server.
// The message names the HTTP status and quotes the upstream's error message
// when the body is an error JSON of either API (or vLLM's flat one).
util::Status UpstreamError(Api api, int http_status, std::string_view body);

}  // namespace strata::backend::upstream
