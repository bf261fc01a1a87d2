// Fuzz target: the event-stream parser and writer (net/sse.h). Arbitrary
// bytes parse without crashing or exceeding the event limit; and any text
// written as an event's data (the first half of the input, with the second
// half as its name) reads back as exactly one event with that data (line
// breaks as LF) — data can never end an event early or forge another.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "net/sse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  {
    strata::net::SseParser p(4096);
    std::vector<strata::net::SseEvent> events;
    for (size_t i = 0; i < in.size(); i += 7) {
      if (!p.Feed(in.substr(i, 7), &events).ok()) break;
      if (p.pending_bytes() > 4096 + 1) std::abort();
    }
  }
  const std::string_view text = in.substr(0, in.size() / 2);
  const std::string_view name = in.substr(in.size() / 2);
  strata::net::SseParser p(1u << 20);
  std::vector<strata::net::SseEvent> events;
  if (!p.Feed(strata::net::SseFrame(text, name), &events).ok()) std::abort();
  if (events.size() != 1) std::abort();
  std::string want;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      want += '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else {
      want += text[i];
    }
  }
  if (events[0].data != want) std::abort();
  return 0;
}
