#include "backend/backend.h"

#include <fmt/format.h>

namespace strata::backend {
namespace {

util::Status Unsupported(const Backend& b, std::string_view what) {
  return util::InvalidArgumentError(
             fmt::format("backend '{}' ({}) does not {}", b.name(), b.kind(), what))
      .WithReason(util::ErrorReason::kUnsupportedByBackend);
}

}  // namespace

util::StatusOr<std::vector<int32_t>> Backend::EncodeText(std::string_view, bool, bool) const {
  return Unsupported(*this, "tokenize locally");
}
util::StatusOr<std::string> Backend::DecodeTokens(std::span<const int32_t>) const {
  return Unsupported(*this, "detokenize locally");
}
util::StatusOr<std::string> Backend::TokenBytes(int32_t) const {
  return Unsupported(*this, "tokenize locally");
}
util::StatusOr<int32_t> Backend::PromptTokens(const Request&) const {
  return Unsupported(*this, "count tokens");
}
util::StatusOr<Backend::Relayed> Backend::CountTokensUpstream(
    std::string_view, std::chrono::steady_clock::time_point) const {
  return Unsupported(*this, "count tokens");
}

std::string_view FinishReasonLabel(FinishReason r) {
  switch (r) {
    case FinishReason::kEndOfTurn:
      return "end_of_turn";
    case FinishReason::kStopString:
      return "stop_string";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kToolCalls:
      return "tool_calls";
  }
  return "cancelled";
}

FinishReason FromEngine(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kEndOfTurn:
      return FinishReason::kEndOfTurn;
    case engine::FinishReason::kStopString:
      return FinishReason::kStopString;
    case engine::FinishReason::kLength:
      return FinishReason::kLength;
    case engine::FinishReason::kCancelled:
      return FinishReason::kCancelled;
  }
  return FinishReason::kCancelled;
}

}  // namespace strata::backend
