// Fuzz target: the OpenAI and Anthropic request parsers (and Anthropic's
// count_tokens parser), the admin API's cache invalidation body, the
// invalidation message other instances send through Redis and the cache
// snapshot a server loads at start, on arbitrary bytes.
// Whatever the input, parsing returns a request or an InvalidArgument whose
// reason says what kind of input problem it is (malformed JSON, or an invalid
// field); it never throws, crashes or reads out of bounds, and rendering an
// error for the result always yields valid JSON with a 400.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "gateway/cache_snapshot.h"
#include "gateway/invalidation_message.h"
#include "server/api.h"
#include "server/cache_admin.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::server;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (ApiKind kind :
       {ApiKind::kOpenAIChat, ApiKind::kOpenAICompletion, ApiKind::kAnthropicMessages}) {
    auto r = ParseRequest(kind, body);
    if (!r.ok()) {
      const strata::util::Status& st = r.status();
      if (st.code() != strata::util::StatusCode::kInvalidArgument) std::abort();
      if (st.reason() != strata::util::ErrorReason::kMalformedJson &&
          st.reason() != strata::util::ErrorReason::kInvalidField) {
        std::abort();
      }
      if (HttpStatus(st) != 400) std::abort();
      if (!nlohmann::json::accept(RenderError(kind, st))) std::abort();
    }
  }
  // DELETE /v1/cache: a selection or an InvalidArgument, never anything else.
  auto invalidation = ParseInvalidationBody(body);
  if (!invalidation.ok() &&
      invalidation.status().code() != strata::util::StatusCode::kInvalidArgument) {
    std::abort();
  }
  // Another instance's message: DataLoss or a selection that re-encodes to
  // a message decoding to the same.
  auto message = strata::gateway::DecodeInvalidationMessage(body);
  if (message.ok()) {
    const std::string again = strata::gateway::EncodeInvalidationMessage(*message);
    auto twice = strata::gateway::DecodeInvalidationMessage(again);
    if (!twice.ok() || strata::gateway::EncodeInvalidationMessage(*twice) != again) std::abort();
  } else if (message.status().code() != strata::util::StatusCode::kDataLoss) {
    std::abort();
  }
  // A cache snapshot (--warm-from): records or DataLoss.
  auto snapshot = strata::gateway::DecodeCacheSnapshot(body);
  if (!snapshot.ok() && snapshot.status().code() != strata::util::StatusCode::kDataLoss) {
    std::abort();
  }
  auto count = ParseCountTokensRequest(body);
  if (!count.ok()) {
    const strata::util::Status& st = count.status();
    if (st.code() != strata::util::StatusCode::kInvalidArgument) std::abort();
    if (st.reason() != strata::util::ErrorReason::kMalformedJson &&
        st.reason() != strata::util::ErrorReason::kInvalidField) {
      std::abort();
    }
    if (HttpStatus(st) != 400) std::abort();
    if (!nlohmann::json::accept(RenderError(ApiKind::kAnthropicMessages, st))) std::abort();
  }
  return 0;
}
