// Fuzz target: the HTTP/1.1 request reader (net/), with the server's limits
// scaled down so the fuzzer reaches them, on arbitrary bytes split in two at
// a point the input chooses (incremental parsing). Whatever the bytes, it
// reads a request or names the HTTP status that refuses it; it never
// crashes, reads out of bounds or holds more than the limits allow.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "net/http_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  strata::net::HttpLimits limits;
  limits.max_request_line_bytes = 256;
  limits.max_header_bytes = 2048;
  limits.max_header_fields = 16;
  limits.max_body_bytes = 8192;
  limits.max_inflate_ratio = 8;
  const std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = data[0] % (all.size() + 1);
  const std::string_view chunks[] = {all.substr(0, split), all.substr(split)};
  const strata::net::ParsedHttpRequest r = strata::net::ParseHttpRequest(chunks, limits);
  if (r.status != 0) {
    if (r.status < 400 || r.status > 505 || r.error.ok()) std::abort();
    return 0;
  }
  if (r.complete) {
    if (r.body.size() > limits.max_body_bytes) std::abort();
    if (r.consumed > all.size()) std::abort();
    if (r.head.method.empty() || r.head.headers.size() > 16) std::abort();
  }
  return 0;
}
