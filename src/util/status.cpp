#include "util/status.h"

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace strata::util {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kUnknown:
      return "UNKNOWN";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kAborted:
      return "ABORTED";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kDataLoss:
      return "DATA_LOSS";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

std::string_view ErrorReasonName(ErrorReason reason) {
  switch (reason) {
    case ErrorReason::kNone:
      return "none";
    case ErrorReason::kMalformedJson:
      return "malformed_json";
    case ErrorReason::kInvalidField:
      return "invalid_field";
    case ErrorReason::kContextLengthExceeded:
      return "context_length_exceeded";
    case ErrorReason::kBodyTooLarge:
      return "body_too_large";
    case ErrorReason::kNoRoute:
      return "no_route";
    case ErrorReason::kModelNotFound:
      return "model_not_found";
    case ErrorReason::kMissingApiKey:
      return "missing_api_key";
    case ErrorReason::kInvalidApiKey:
      return "invalid_api_key";
    case ErrorReason::kQueueFull:
      return "queue_full";
    case ErrorReason::kLoadShed:
      return "overloaded";
    case ErrorReason::kModelLoading:
      return "model_loading";
    case ErrorReason::kShuttingDown:
      return "shutting_down";
    case ErrorReason::kTimeout:
      return "timeout";
    case ErrorReason::kMalformedHttp:
      return "malformed_http";
    case ErrorReason::kRequestLineTooLong:
      return "request_line_too_long";
    case ErrorReason::kHeadersTooLarge:
      return "headers_too_large";
    case ErrorReason::kUnsupportedEncoding:
      return "unsupported_encoding";
    case ErrorReason::kUnsupportedFraming:
      return "unsupported_framing";
    case ErrorReason::kHttpVersion:
      return "http_version_not_supported";
    case ErrorReason::kClientTimeout:
      return "client_timeout";
    case ErrorReason::kTooManyConnections:
      return "too_many_connections";
    case ErrorReason::kServerBusy:
      return "server_busy";
    case ErrorReason::kModelChanged:
      return "model_changed";
    case ErrorReason::kUnsupportedByBackend:
      return "unsupported_by_backend";
    case ErrorReason::kUpstreamRejected:
      return "upstream_rejected";
    case ErrorReason::kUpstreamRateLimited:
      return "upstream_rate_limited";
    case ErrorReason::kUpstreamOverloaded:
      return "upstream_overloaded";
    case ErrorReason::kUpstreamUnavailable:
      return "upstream_unavailable";
    case ErrorReason::kUpstreamBusy:
      return "upstream_busy";
    case ErrorReason::kUpstreamTimeout:
      return "upstream_timeout";
    case ErrorReason::kUpstreamError:
      return "upstream_error";
    case ErrorReason::kUpstreamProtocol:
      return "upstream_protocol_error";
    case ErrorReason::kMethodNotAllowed:
      return "method_not_allowed";
    case ErrorReason::kSessionConflict:
      return "session_conflict";
    case ErrorReason::kSessionLimit:
      return "session_limit";
    case ErrorReason::kModelMemory:
      return "model_memory";
  }
  return "none";
}

namespace {
const std::string& EmptyString() {
  static const std::string kEmpty;
  return kEmpty;
}
}  // namespace

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) {
    rep_.reset(new Rep{code, ErrorReason::kNone, std::move(message), std::string()});
  }
}

Status::Status(const Status& other)
    : rep_(other.rep_ == nullptr ? nullptr : std::make_unique<Rep>(*other.rep_)) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) rep_ = other.rep_ == nullptr ? nullptr : std::make_unique<Rep>(*other.rep_);
  return *this;
}

Status::~Status() = default;

StatusCode Status::code() const { return rep_ == nullptr ? StatusCode::kOk : rep_->code; }
const std::string& Status::message() const {
  return rep_ == nullptr ? EmptyString() : rep_->message;
}
ErrorReason Status::reason() const { return rep_ == nullptr ? ErrorReason::kNone : rep_->reason; }
const std::string& Status::field() const { return rep_ == nullptr ? EmptyString() : rep_->field; }

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(rep_->code));
  if (rep_->reason != ErrorReason::kNone || !rep_->field.empty()) {
    out += " (";
    if (rep_->reason != ErrorReason::kNone) out += ErrorReasonName(rep_->reason);
    if (!rep_->field.empty()) {
      if (rep_->reason != ErrorReason::kNone) out += ", ";
      out += "field '";
      out += rep_->field;
      out += "'";
    }
    out += ")";
  }
  out += ": ";
  out += rep_->message;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += rep_->message;
  Status out(rep_->code, std::move(msg));
  out.rep_->reason = rep_->reason;
  out.rep_->field = rep_->field;
  return out;
}

Status Status::WithReason(ErrorReason reason) const& { return Status(*this).WithReason(reason); }
Status Status::WithReason(ErrorReason reason) && {
  if (rep_ != nullptr) rep_->reason = reason;
  return std::move(*this);
}
Status Status::WithField(std::string field) const& {
  return Status(*this).WithField(std::move(field));
}
Status Status::WithField(std::string field) && {
  if (rep_ != nullptr) rep_->field = std::move(field);
  return std::move(*this);
}

bool operator==(const Status& a, const Status& b) {
  if (a.rep_ == nullptr || b.rep_ == nullptr) return a.rep_ == b.rep_;
  return a.rep_->code == b.rep_->code && a.rep_->reason == b.rep_->reason &&
         a.rep_->message == b.rep_->message && a.rep_->field == b.rep_->field;
}

Status CancelledError(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }
Status InvalidArgumentError(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
Status DeadlineExceededError(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m));
}
Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status AlreadyExistsError(std::string m) {
  return Status(StatusCode::kAlreadyExists, std::move(m));
}
Status PermissionDeniedError(std::string m) {
  return Status(StatusCode::kPermissionDenied, std::move(m));
}
Status ResourceExhaustedError(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
Status FailedPreconditionError(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
Status AbortedError(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
Status OutOfRangeError(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
Status UnimplementedError(std::string m) {
  return Status(StatusCode::kUnimplemented, std::move(m));
}
Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
Status UnavailableError(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
Status DataLossError(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
Status UnauthenticatedError(std::string m) {
  return Status(StatusCode::kUnauthenticated, std::move(m));
}
Status InvalidFieldError(std::string field, std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m))
      .WithReason(ErrorReason::kInvalidField)
      .WithField(std::move(field));
}

void CheckFailed(const char* file, int line, const char* condition, std::string_view message) {
  std::fprintf(stderr, "strata: CHECK failed at %s:%d: %s %.*s\n", file, line, condition,
               static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace strata::util
