// Fuzz target: the OpenAI and Anthropic request parsers on arbitrary bytes.
// Whatever the input, parsing returns a request or an InvalidArgument; it
// never throws, crashes or reads out of bounds, and rendering an error for
// the result always yields valid JSON.
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
      if (r.status().code() != strata::util::StatusCode::kInvalidArgument) std::abort();
      if (!nlohmann::json::accept(RenderError(kind, r.status()))) std::abort();
    }
  }
  return 0;
}
