// Fuzz target: the JSON recognizer of constrained decoding
// (grammar/json_machine.h). Arbitrary bytes are fed one at a time, refused
// ones skipped: whenever the machine says a document is complete, what it
// accepted parses as a JSON object; a refused byte never changes the state
// (feeding the same byte again is refused again); and FeedAll is all or
// nothing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "grammar/json_machine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::grammar::JsonMachine;
  JsonMachine m;
  std::string accepted;
  for (size_t i = 0; i < size; ++i) {
    if (m.Feed(data[i])) {
      accepted += static_cast<char>(data[i]);
    } else if (m.Feed(data[i])) {
      std::abort();  // a refusal changed the state
    }
    if (m.complete()) {
      const auto j = nlohmann::json::parse(accepted, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) std::abort();
      break;
    }
  }
  // All or nothing: a failed FeedAll leaves a machine that still accepts
  // exactly what a fresh copy does.
  JsonMachine a;
  JsonMachine b;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  if (!a.FeedAll(in)) {
    if (a.complete() != b.complete() || a.Feed('{') != b.Feed('{')) std::abort();
  }
  return 0;
}
