// util/status.h — Status and StatusOr<T>: how every module reports failure.
//
// Promise: a Status is either OK or carries a canonical code and a message that
// names the offending value ("gguf: tensor 'blk.3.attn_q' ends at 9123, file has
// 8000 bytes"). A Status may also carry structured detail for the layer that
// answers a client: a machine-readable ErrorReason (context_length_exceeded,
// queue_full, ...) and the name of the offending request field. Code decides
// what kind of failure it is; the reason says which one precisely; nothing
// classifies an error by its message. Functions that can fail across a module
// boundary return Status or StatusOr<T>; exceptions never cross a module's
// public API. Broken internal invariants use STRATA_CHECK (always on, aborts);
// input is never CHECKed.
//
// An OK Status is one null pointer: creating, copying and testing it never
// allocates.
//
// Threading: value types; thread-compatible.
//
// Usage:
//   util::StatusOr<Model> LoadModel(const std::string& path) {
//     STRATA_ASSIGN_OR_RETURN(auto file, fs.MapReadOnly(path));
//     STRATA_RETURN_IF_ERROR(Validate(*file));
//     return Model(...);
//   }
//   return util::OutOfRangeError("context length exceeded: ...")
//       .WithReason(util::ErrorReason::kContextLengthExceeded);
//   return util::InvalidFieldError("temperature", "'temperature' must be a number in [0, 2]");
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace strata::util {

// Canonical codes (same numbering as gRPC/abseil). The HTTP mapping lives in
// exactly one place: server/.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

std::string_view StatusCodeName(StatusCode code);

// What exactly went wrong, where a client (or an operator reading the log) acts
// on the difference; kNone where the code says enough. Set where the condition
// is detected; server/ maps reason and code to HTTP statuses and API error
// bodies (docs/api.md has the table). Append new reasons at the end.
enum class ErrorReason : uint8_t {
  kNone = 0,
  kMalformedJson,          // the request body is not JSON, or not a JSON object
  kInvalidField,           // a request field is missing, of the wrong type or range, or unsupported
  kContextLengthExceeded,  // prompt (+ max_tokens) does not fit the model's context
  kBodyTooLarge,           // the request body exceeds the server's limit
  kNoRoute,                // no endpoint at this method and path
  kModelNotFound,          // the request names a model this server does not serve
  kMissingApiKey,          // keys are configured and the request presented none
  kInvalidApiKey,          // the presented key is not a configured one
  kQueueFull,              // every running and queued slot is taken
  kLoadShed,               // refused by load shedding: it would wait too long for a slot
  kModelLoading,           // the server is up, the model is not loaded yet
  kShuttingDown,           // the server is draining and takes no new requests
  kTimeout,                // the request did not finish within the server's time limit
  kMalformedHttp,          // the request is not valid HTTP/1.1 (request line, fields, framing)
  kRequestLineTooLong,     // the request line exceeds the server's limit
  kHeadersTooLarge,        // the header fields exceed the byte or count limit
  kUnsupportedEncoding,    // a Content-Encoding the server cannot decode
  kUnsupportedFraming,     // a Transfer-Encoding the server does not implement
  kHttpVersion,            // an HTTP version other than 1.0 and 1.1
  kClientTimeout,          // the client sent its headers or body too slowly
  kTooManyConnections,     // the connection cap (in all, or for the client's address)
  kServerBusy,             // every request worker is taken and the backlog is full
  kModelChanged,           // the served model file changed on disk: the server stops serving it
  // A remote backend (backend/remote.h):
  kUnsupportedByBackend,  // a request field the serving backend's API cannot carry
  kUpstreamRejected,      // the upstream refused the request as invalid (its 400, 404, 413, 422)
  kUpstreamRateLimited,   // the upstream answered 429, and retrying did not help
  kUpstreamOverloaded,   // the upstream answered 503 or 529 (overloaded), and retrying did not help
  kUpstreamUnavailable,  // no replica could be reached: connect errors, all ejected or broken open
  kUpstreamBusy,         // every healthy replica is at its concurrency limit
  kUpstreamTimeout,      // connect, first byte, the gap between chunks or the total ran out
  kUpstreamError,        // the upstream failed (5xx, or refused strata's credential)
  kUpstreamProtocol,     // the upstream's answer is not what its API defines, or broke mid-stream
  kMethodNotAllowed,     // the path is an endpoint, but not for this method
  // Durable sessions (session/session.h):
  kSessionConflict,  // the session moved on: a precondition failed, or the history differs
  kSessionLimit,     // a session's turns or bytes, or a tenant's sessions, would exceed a limit
  // Several local models (backend/residency.h):
  kModelMemory,  // the model cannot load now: the memory budget is held by models in use
};

// The reason's stable name, for logs and API bodies: "context_length_exceeded",
// "overloaded" (kLoadShed), "none".
std::string_view ErrorReasonName(ErrorReason reason);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  ~Status();

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const;
  const std::string& message() const;
  // kNone unless set with WithReason.
  ErrorReason reason() const;
  // The request field at fault ("temperature", "messages[0].role"), or empty.
  const std::string& field() const;

  // "INVALID_ARGUMENT: message" (or "OK"); with detail
  // "INVALID_ARGUMENT (invalid_field, field 'top_p'): message".
  std::string ToString() const;

  // A copy whose message is "context: message", with the same code, reason and
  // field; OK stays OK.
  Status WithContext(std::string_view context) const;

  // This Status with `reason` (or `field`) set; OK stays OK (an OK Status has
  // no detail).
  Status WithReason(ErrorReason reason) const&;
  Status WithReason(ErrorReason reason) &&;
  Status WithField(std::string field) const&;
  Status WithField(std::string field) &&;

  friend bool operator==(const Status& a, const Status& b);

 private:
  struct Rep {
    StatusCode code;
    ErrorReason reason;
    std::string message;
    std::string field;
  };
  std::unique_ptr<Rep> rep_;  // null when OK
};

inline Status OkStatus() { return Status(); }
Status CancelledError(std::string message);
Status InvalidArgumentError(std::string message);
Status DeadlineExceededError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status PermissionDeniedError(std::string message);
Status ResourceExhaustedError(std::string message);
Status FailedPreconditionError(std::string message);
Status AbortedError(std::string message);
Status OutOfRangeError(std::string message);
Status UnimplementedError(std::string message);
Status InternalError(std::string message);
Status UnavailableError(std::string message);
Status DataLossError(std::string message);
Status UnauthenticatedError(std::string message);
// InvalidArgument with reason kInvalidField naming `field` (as the client
// spelled it: "stream_options.include_usage", "messages[2].content").
Status InvalidFieldError(std::string field, std::string message);

[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              std::string_view message);

// StatusOr<T> holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
  static_assert(!std::is_same_v<std::remove_cvref_t<T>, Status>, "StatusOr<Status> is meaningless");

 public:
  StatusOr(const Status& status) : v_(status) { CheckNotOk(); }        // NOLINT: implicit by design
  StatusOr(Status&& status) : v_(std::move(status)) { CheckNotOk(); }  // NOLINT
  template <typename U = T>
  requires std::is_constructible_v<T, U&&> &&
      (!std::is_same_v<std::remove_cvref_t<U>, StatusOr<T>>)&&(
          !std::is_same_v<std::remove_cvref_t<U>, Status>)StatusOr(U&& value)
      : v_(std::in_place_index<1>, std::forward<U>(value)) {}  // NOLINT

  bool ok() const { return v_.index() == 1; }
  const Status& status() const& {
    static const Status kOk;
    return ok() ? kOk : std::get<0>(v_);
  }
  Status status() && { return ok() ? Status() : std::move(std::get<0>(v_)); }

  T& value() & {
    CheckOk();
    return std::get<1>(v_);
  }
  const T& value() const& {
    CheckOk();
    return std::get<1>(v_);
  }
  T&& value() && {
    CheckOk();
    return std::move(std::get<1>(v_));
  }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckNotOk() const {
    if (std::get<0>(v_).ok()) CheckFailed(__FILE__, __LINE__, "!status.ok()", "StatusOr from OK");
  }
  void CheckOk() const {
    if (!ok()) CheckFailed(__FILE__, __LINE__, "ok()", std::get<0>(v_).ToString());
  }
  std::variant<Status, T> v_;
};

namespace internal {
// By value: `expr` may be a temporary that dies at the end of the statement.
inline Status AsStatus(Status s) { return s; }
template <typename T>
Status AsStatus(const StatusOr<T>& s) {
  return s.status();
}
}  // namespace internal

}  // namespace strata::util

#define STRATA_CONCAT_INNER_(a, b) a##b
#define STRATA_CONCAT_(a, b) STRATA_CONCAT_INNER_(a, b)

// Returns the Status of `expr` (a Status or StatusOr) from the enclosing function if not OK.
#define STRATA_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                  \
    ::strata::util::Status strata_status_ = ::strata::util::internal::AsStatus((expr)); \
    if (!strata_status_.ok()) return strata_status_;                                    \
  } while (0)

// `lhs = value of expr` or return its Status. `lhs` may declare a variable.
#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL_(STRATA_CONCAT_(strata_statusor_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

// Invariant check, always on. Never use on input from clients, files or config.
#define STRATA_CHECK(cond)                                                   \
  do {                                                                       \
    if (!(cond)) ::strata::util::CheckFailed(__FILE__, __LINE__, #cond, ""); \
  } while (0)
#define STRATA_CHECK_MSG(cond, msg)                                             \
  do {                                                                          \
    if (!(cond)) ::strata::util::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
