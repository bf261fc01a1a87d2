// How a failed Status answers a client: the one table from reason and code
// to HTTP status and each API's error vocabulary (docs/api.md, "Errors"),
// and the error bodies built from it.
#include <iterator>

#include "server/api.h"
#include "server/internal/wire.h"

namespace strata::server {
namespace {

using util::ErrorReason;
using util::StatusCode;

// A row matches a Status by its reason when `reason` is set, else by its code
// (for statuses without a reason). Reason rows come first: a reason always
// wins over the code it was raised with.
struct ErrorRow {
  ErrorReason reason = ErrorReason::kNone;
  StatusCode code = StatusCode::kOk;
  ErrorMapping mapping;
};

constexpr const char* kInvalid = "invalid_request_error";
constexpr const char* kAuth = "authentication_error";
constexpr const char* kRate = "rate_limit_error";
constexpr const char* kServer = "server_error";
constexpr const char* kOverloaded = "overloaded_error";
constexpr const char* kApi = "api_error";

// clang-format off
constexpr ErrorRow kErrorTable[] = {
    // reason or code                         http  OpenAI type  OpenAI code            Anthropic type       Retry-After
    {ErrorReason::kMalformedJson, {},         {400, kInvalid, nullptr,                   kInvalid,              false}},
    {ErrorReason::kInvalidField, {},          {400, kInvalid, nullptr,                   kInvalid,              false}},
    {ErrorReason::kContextLengthExceeded, {}, {400, kInvalid, "context_length_exceeded", kInvalid,              false}},
    {ErrorReason::kMissingApiKey, {},         {401, kAuth,    "missing_api_key",         kAuth,                 false}},
    {ErrorReason::kInvalidApiKey, {},         {401, kAuth,    "invalid_api_key",         kAuth,                 false}},
    {ErrorReason::kNoRoute, {},               {404, kInvalid, "not_found",               "not_found_error",     false}},
    {ErrorReason::kMethodNotAllowed, {},      {405, kInvalid, "method_not_allowed",      kInvalid,              false}},
    {ErrorReason::kModelNotFound, {},         {404, kInvalid, "model_not_found",         "not_found_error",     false}},
    {ErrorReason::kBodyTooLarge, {},          {413, kInvalid, nullptr,                   "request_too_large",   false}},
    {ErrorReason::kQueueFull, {},             {429, kRate,    "queue_full",              kOverloaded,           true}},
    {ErrorReason::kLoadShed, {},              {429, kRate,    "overloaded",              kOverloaded,           true}},
    {ErrorReason::kModelLoading, {},          {503, kServer,  "model_loading",           kApi,                  false}},
    {ErrorReason::kShuttingDown, {},          {503, kServer,  "shutting_down",           kOverloaded,           false}},
    {ErrorReason::kTimeout, {},               {504, kServer,  "timeout",                 kApi,                  false}},
    {ErrorReason::kMalformedHttp, {},         {400, kInvalid, "malformed_http",          kInvalid,              false}},
    {ErrorReason::kClientTimeout, {},         {408, kInvalid, "client_timeout",          kInvalid,              false}},
    {ErrorReason::kRequestLineTooLong, {},    {414, kInvalid, "request_line_too_long",   kInvalid,              false}},
    {ErrorReason::kUnsupportedEncoding, {},   {415, kInvalid, "unsupported_encoding",    kInvalid,              false}},
    {ErrorReason::kHeadersTooLarge, {},       {431, kInvalid, "headers_too_large",       kInvalid,              false}},
    {ErrorReason::kUnsupportedFraming, {},    {501, kInvalid, "unsupported_framing",     kInvalid,              false}},
    {ErrorReason::kHttpVersion, {},           {505, kInvalid, "http_version_not_supported", kInvalid,           false}},
    {ErrorReason::kServerBusy, {},            {429, kRate,    "server_busy",             kOverloaded,           true}},
    {ErrorReason::kTooManyConnections, {},    {503, kServer,  "too_many_connections",    kOverloaded,           true}},
    {ErrorReason::kModelChanged, {},          {503, kServer,  "model_changed",           kApi,                  false}},
    {ErrorReason::kUnsupportedByBackend, {},  {400, kInvalid, "unsupported_by_backend",  kInvalid,              false}},
    {ErrorReason::kUpstreamRejected, {},      {400, kInvalid, "upstream_rejected",       kInvalid,              false}},
    {ErrorReason::kUpstreamRateLimited, {},   {429, kRate,    "upstream_rate_limited",   kRate,                 true}},
    {ErrorReason::kUpstreamOverloaded, {},    {503, kServer,  "upstream_overloaded",     kOverloaded,           true}},
    {ErrorReason::kUpstreamUnavailable, {},   {503, kServer,  "upstream_unavailable",    kOverloaded,           true}},
    {ErrorReason::kUpstreamBusy, {},          {429, kRate,    "upstream_busy",           kOverloaded,           true}},
    {ErrorReason::kUpstreamTimeout, {},       {504, kServer,  "upstream_timeout",        kApi,                  false}},
    {ErrorReason::kUpstreamError, {},         {502, kServer,  "upstream_error",          kApi,                  false}},
    {ErrorReason::kUpstreamProtocol, {},      {502, kServer,  "upstream_protocol_error", kApi,                  false}},
    {ErrorReason::kSessionConflict, {},       {409, kInvalid, "session_conflict",        kInvalid,              false}},
    {ErrorReason::kSessionLimit, {},          {400, kInvalid, "session_limit",           kInvalid,              false}},
    {ErrorReason::kModelMemory, {},           {503, kServer,  "model_memory",            kOverloaded,           true}},
    // code, for a Status without a reason
    {{}, StatusCode::kInvalidArgument,        {400, kInvalid, nullptr,                   kInvalid,              false}},
    {{}, StatusCode::kOutOfRange,             {400, kInvalid, nullptr,                   kInvalid,              false}},
    {{}, StatusCode::kFailedPrecondition,     {400, kInvalid, nullptr,                   kInvalid,              false}},
    {{}, StatusCode::kUnimplemented,          {400, kInvalid, nullptr,                   kInvalid,              false}},
    {{}, StatusCode::kUnauthenticated,        {401, kAuth,    nullptr,                   kAuth,                 false}},
    {{}, StatusCode::kPermissionDenied,       {403, "permission_error", nullptr,         "permission_error",    false}},
    {{}, StatusCode::kNotFound,               {404, kInvalid, nullptr,                   "not_found_error",     false}},
    {{}, StatusCode::kResourceExhausted,      {429, kRate,    nullptr,                   kRate,                 true}},
    {{}, StatusCode::kCancelled,              {499, kInvalid, nullptr,                   kApi,                  false}},
    {{}, StatusCode::kUnavailable,            {503, kServer,  nullptr,                   kOverloaded,           false}},
    {{}, StatusCode::kDeadlineExceeded,       {504, kServer,  nullptr,                   kApi,                  false}},
};
// Everything else (Internal, Unknown, DataLoss, ...).
constexpr ErrorMapping kInternalMapping = {500, kServer, nullptr, kApi, false};
constexpr ErrorMapping kOkMapping = {200, "", nullptr, "", false};
// clang-format on

}  // namespace

const ErrorMapping& MapError(const util::Status& status) {
  if (status.ok()) return kOkMapping;
  const ErrorReason reason = status.reason();
  if (reason != ErrorReason::kNone) {
    for (const ErrorRow& row : kErrorTable) {
      if (row.reason == reason) return row.mapping;
    }
  }
  for (const ErrorRow& row : kErrorTable) {
    if (row.reason == ErrorReason::kNone && row.code == status.code()) return row.mapping;
  }
  return kInternalMapping;
}

int HttpStatus(const util::Status& status) { return MapError(status).http_status; }

std::string RenderError(ApiKind kind, const util::Status& status) {
  const ErrorMapping& m = MapError(status);
  if (kind == ApiKind::kAnthropicMessages) {
    return wire::Dump({{"type", "error"},
                       {"error", {{"type", m.anthropic_type}, {"message", status.message()}}}});
  }
  const wire::Json param =
      status.field().empty() ? wire::Json(nullptr) : wire::Json(status.field());
  const wire::Json code =
      m.openai_code == nullptr ? wire::Json(nullptr) : wire::Json(m.openai_code);
  return wire::Dump({{"error",
                      {{"message", status.message()},
                       {"type", m.openai_type},
                       {"param", param},
                       {"code", code}}}});
}

std::string RenderStreamError(ApiKind kind, const util::Status& status) {
  const std::string body = RenderError(kind, status);
  if (kind == ApiKind::kAnthropicMessages) return "event: error\ndata: " + body + "\n\n";
  return "data: " + body + "\n\n";
}

}  // namespace strata::server
