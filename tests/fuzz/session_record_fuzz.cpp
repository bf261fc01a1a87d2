// Fuzz target: the session store's record decoders (session/
// record.h, docs/formats/session.md). The first byte picks the decoder
// (even: a turn, odd: a session's meta record), the rest is the record.
// Nothing crashes or reads past the input; a record that decodes encodes to
// bytes that decode to the same fields.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "session/record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace rec = strata::session::record;
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto t = rec::DecodeTurn(in);
    if (!t.ok()) return 0;
    auto again = rec::DecodeTurn(rec::EncodeTurn(*t));
    if (!again.ok() || again->clock != t->clock || again->depends_on != t->depends_on ||
        again->writer != t->writer || again->messages != t->messages ||
        again->tokens != t->tokens || again->created_ms != t->created_ms) {
      std::abort();
    }
  } else {
    auto m = rec::DecodeMeta(in);
    if (!m.ok()) return 0;
    auto again = rec::DecodeMeta(rec::EncodeMeta(*m));
    if (!again.ok() || again->clock != m->clock || again->turns != m->turns ||
        again->bytes != m->bytes || again->created_ms != m->created_ms ||
        again->updated_ms != m->updated_ms) {
      std::abort();
    }
  }
  return 0;
}
