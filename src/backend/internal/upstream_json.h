// What the upstream wire's three files share (backend/upstream_wire.h is
// the contract): strict readers of upstream JSON that turn every surprise
// into a kUpstreamProtocol Status, the classes of upstream failure and the
// Status each becomes, the per-choice finish bookkeeping and the decoder
// core each API's stream decoder builds on.
//
// Threading: pure functions; a DecoderCore is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/upstream_wire.h"
#include "net/sse.h"
#include "util/status.h"

namespace strata::backend::upstream::internal {

// Objects keep their keys in the order the client (or upstream) wrote them:
// a schema's properties, a tool's arguments, are meant in that order.
using Json = nlohmann::ordered_json;

// InternalError with reason kUpstreamProtocol: "upstream protocol error: ...".
util::Status ProtocolError(std::string_view message);

// Parses one JSON document the upstream sent (`what` names it in errors:
// "stream event", "response body"). Invalid UTF-8 becomes U+FFFD first, so
// every string read from the result is valid UTF-8; nesting deeper than 64
// is refused before parsing (no real answer nests more than ~8).
util::StatusOr<Json> ParseJson(std::string_view text, std::string_view what);

// obj[key] when `obj` is an object holding `key` and the value is not null,
// else nullptr (absent and null mean the same on every field we read).
const Json* Member(const Json& obj, const char* key);

// `where.key` as an optional string: absent/null → nullopt, a string → it,
// anything else → ProtocolError naming `where`.
util::StatusOr<std::optional<std::string>> OptString(const Json& obj, const char* key,
                                                     std::string_view where);
// A token count: absent/null → nullopt, an integer ≥ 0 → it (clamped to
// int32), anything else → ProtocolError.
util::StatusOr<std::optional<int32_t>> OptCount(const Json& obj, const char* key,
                                                std::string_view where);
// A logprob: a number, or null (how a JSON encoder writes -inf) → -inf.
util::StatusOr<float> Logprob(const Json& v, std::string_view where);

// At most `max_bytes` of `text` for a message: valid UTF-8, control
// characters as spaces, "..." when cut.
std::string Quote(std::string_view text, size_t max_bytes = 300);

// What kind of failure an upstream reported, whatever its vocabulary.
enum class Failure {
  kRejected,     // the request is invalid for the upstream
  kCredential,   // strata's API key was refused
  kTimeout,      // the upstream timed out
  kRateLimited,  // 429
  kOverloaded,   // 503 / 529 / overloaded_error
  kServer,       // 5xx and everything else the upstream failed at
  kOther,        // an HTTP status no API defines for an error
};
// By HTTP status (the table in upstream_wire.h).
Failure FailureOfHttp(int http_status);
// By an error "type" of either API (Anthropic's invalid_request_error ...
// overloaded_error, OpenAI's rate_limit_error ... server_error); kServer
// for anything unknown.
Failure FailureOfType(std::string_view type);
// The Status of a failure: its code and reason, and `message`.
util::Status FailureStatus(Failure f, std::string message);

// An error object the upstream sent inside a stream or as a whole body
// (`error` is the value of the "error" member: an object with message,
// type and code, or a bare string) as a Status: by its code when that is an
// HTTP status (llama-server), else by strata's own codes (timeout,
// overloaded), else by its type.
util::Status MidStreamError(Api api, const Json& error);

// The per-choice finish bookkeeping: which choices finished (and how), which
// kFinish events went out, and the usage to give them.
class Finishes {
 public:
  explicit Finishes(int32_t n);

  int32_t n() const { return static_cast<int32_t>(choices_.size()); }
  bool finished(int32_t i) const { return choices_[i].finished; }
  bool all_finished() const { return n_finished_ == n(); }
  bool all_emitted() const { return n_emitted_ == n(); }
  // The index of the first choice that has not finished (n() if none).
  int32_t first_unfinished() const;

  // Records choice i's finish (the first one counts; later ones are ignored).
  void Finish(int32_t i, FinishReason reason, std::string stop_sequence);
  Usage& usage() { return usage_; }

  // Emits the kFinish of every finished choice not yet emitted, in index order.
  void Flush(std::vector<Event>* out);
  // Flush, then every unfinished choice as kCancelled with `status`.
  void Fail(const util::Status& status, std::vector<Event>* out);

 private:
  struct Choice {
    bool finished = false;
    bool emitted = false;
    FinishReason reason = FinishReason::kEndOfTurn;
    std::string stop_sequence;
  };
  void Emit(int32_t i, FinishReason reason, std::string stop_sequence, util::Status status,
            std::vector<Event>* out);

  std::vector<Choice> choices_;
  int32_t n_finished_ = 0;
  int32_t n_emitted_ = 0;
  Usage usage_;  // the upstream's totals; Emit splits completion_tokens
};

// The SSE framing, error stickiness and started/complete state every API's
// stream decoder shares; an API's decoder implements OnEvent and OnEnd.
class DecoderCore {
 public:
  DecoderCore(int32_t n_choices, size_t max_event_bytes);
  virtual ~DecoderCore() = default;

  util::Status Feed(std::string_view bytes, std::vector<Event>* out);
  util::Status End(std::vector<Event>* out);
  void Fail(const util::Status& status, std::vector<Event>* out);
  bool started() const { return started_; }
  bool complete() const { return finishes_.all_emitted(); }

 protected:
  // One SSE event of the body; called only while the stream is not complete.
  virtual util::Status OnEvent(const net::SseEventView& event, std::vector<Event>* out) = 0;
  // The body ended and the stream is not complete.
  virtual util::Status OnEnd(std::vector<Event>* out) = 0;

  // The upstream reported `status` in the stream: before any event went
  // out it is returned (the caller may still retry elsewhere); after, every
  // unfinished choice fails with it and the result is OK.
  util::Status UpstreamFailed(util::Status status, std::vector<Event>* out);

  Finishes finishes_;

 private:
  util::Status Decode(std::string_view bytes, std::vector<Event>* out);

  const size_t max_event_bytes_;
  net::SseParser parser_;
  util::Status error_;  // sticky: the first error
  bool started_ = false;
};

std::unique_ptr<DecoderCore> NewOpenAIDecoder(bool chat, int32_t n_choices,
                                              std::vector<std::string> stops,
                                              size_t max_event_bytes);
std::unique_ptr<DecoderCore> NewAnthropicDecoder(size_t max_event_bytes);

util::StatusOr<Call> RenderOpenAI(const Request& r, const RenderOptions& o);
util::StatusOr<Call> RenderAnthropic(const Request& r, const RenderOptions& o);

util::Status DecodeOpenAIWhole(bool chat, int32_t n_choices, const std::vector<std::string>& stops,
                               const Json& body, std::vector<Event>* out);
util::Status DecodeAnthropicWhole(const Json& body, std::vector<Event>* out);
// DecodeOpenAIWhole of `body` where the plain reader (upstream_openai.cpp)
// takes it whole, without a DOM; nullopt where it does not (the DOM reader
// then decides).
std::optional<util::Status> DecodeOpenAIWholePlain(bool chat, int32_t n_choices,
                                                   const std::vector<std::string>& stops,
                                                   std::string_view body, std::vector<Event>* out);

// The request field that turned strata's own samplers on (for the 400).
std::string StrataSamplerField(const sampling::SamplingParams& p);
// InvalidArgument with reason kUnsupportedByBackend naming `field`:
// "'field' is not supported by the <api> backend: why".
util::Status Unsupported(Api api, std::string field, std::string_view why);
// A float as the shortest decimal that reads back as it (0.7f → 0.7, not
// 0.699999988079071), for JSON.
double CleanNumber(float f);

}  // namespace strata::backend::upstream::internal
