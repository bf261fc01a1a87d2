// net/internal/body_decoder.h — Content-Encoding removed while the body is
// read (private to net/).
//
// Promise: decoding never holds more than the limit allows: output is
// produced in small steps and checked after each one, so a compression bomb
// is stopped after at most max_bytes (plus one step) of output, and as soon
// as the output exceeds max_ratio times the input read so far (once past a
// small floor, below which ratios mean nothing). Errors: InvalidArgument for
// a corrupt or truncated stream, ResourceExhausted for a limit (the server
// answers 413), Unimplemented for a coding it does not know (415).
//
// Threading: one decoder per body, used by one thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "util/status.h"

namespace strata::net::internal {

class BodyDecoder {
 public:
  virtual ~BodyDecoder() = default;
  // Appends the decoded bytes of the next `in` to *out.
  virtual util::Status Decode(std::string_view in, std::string* out) = 0;
  // End of the body: a stream that stopped short is an error.
  virtual util::Status Finish(std::string* out) = 0;
};

struct DecodeLimits {
  size_t max_bytes = 4u << 20;          // decoded bytes in all
  double max_ratio = 100;               // decoded / encoded bytes
  size_t ratio_floor_bytes = 1u << 20;  // the ratio is not checked below this much output
};

// The decoder for a Content-Encoding value: "identity" (or empty), "gzip",
// "x-gzip", "deflate" (zlib-wrapped, or raw deflate as some clients send it)
// and "br". A list of several codings is Unimplemented.
util::StatusOr<std::unique_ptr<BodyDecoder>> NewBodyDecoder(std::string_view content_encoding,
                                                            const DecodeLimits& limits);

}  // namespace strata::net::internal
