// Fuzz target: the L3 text normalizer and near-duplicate scoring on arbitrary
// bytes. Whatever the input, NormalizeText returns tokens or an
// InvalidArgument; it never crashes or reads out of bounds. Every token is
// non-empty valid UTF-8 without whitespace, and a prepared text scores 1
// against itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "cache/near_dup.h"
#include "cache/text_normalize.h"
#include "util/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::cache;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = NormalizeText(text);
  if (!r.ok()) {
    if (r.status().code() != strata::util::StatusCode::kInvalidArgument) std::abort();
    if (strata::util::IsValidUtf8(text)) std::abort();  // only invalid input fails
    return 0;
  }
  for (const Token& t : r->tokens) {
    if (t.text.empty() || !strata::util::IsValidUtf8(t.text)) std::abort();
    if (t.text.find_first_of(" \t\n\r") != std::string::npos) std::abort();
  }
  auto p = PrepareNearDupText(text);
  if (p.ok() && ScorePair(*p, *p).similarity != 1.0) std::abort();
  return 0;
}
