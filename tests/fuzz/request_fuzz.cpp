// Fuzz target: the OpenAI and Anthropic request parsers (and Anthropic's
// count_tokens parser) on arbitrary bytes.
// Whatever the input, parsing returns a request or an InvalidArgument whose
// reason says what kind of input problem it is (malformed JSON, or an invalid
// field); it never throws, crashes or reads out of bounds, and rendering an
// error for the result always yields valid JSON with a 400.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/api.h"

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
