#include "model/default_encoder.h"

#include "format/gguf.h"

// The GGUF, assembled into read-only data. STRATA_DEFAULT_ENCODER_PATH is
// its absolute path (the build passes it with the file's SHA-256, so a new
// file changes the command line and no cache serves the old object).
#ifndef STRATA_DEFAULT_ENCODER_PATH
#error "the build must define STRATA_DEFAULT_ENCODER_PATH"
#endif
__asm__(
    ".section .rodata\n"
    ".balign 64\n"
    ".global strata_default_encoder_begin\n"
    "strata_default_encoder_begin:\n"
    ".incbin \"" STRATA_DEFAULT_ENCODER_PATH
    "\"\n"
    ".global strata_default_encoder_end\n"
    "strata_default_encoder_end:\n"
    ".previous\n");
extern "C" const uint8_t strata_default_encoder_begin[];
extern "C" const uint8_t strata_default_encoder_end[];

namespace strata::model {

std::span<const uint8_t> DefaultEncoderGguf() {
  return {strata_default_encoder_begin,
          static_cast<size_t>(strata_default_encoder_end - strata_default_encoder_begin)};
}

util::StatusOr<std::unique_ptr<HashEncoder>> LoadDefaultEncoder(util::Logger& log) {
  STRATA_ASSIGN_OR_RETURN(auto gguf,
                          format::GgufFile::ParseBytes(DefaultEncoderGguf(), "built-in encoder"));
  return HashEncoder::FromGguf(*gguf, log);
}

}  // namespace strata::model
