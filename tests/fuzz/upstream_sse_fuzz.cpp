// Fuzz target: the upstream stream decoder (backend/upstream_wire.h), both
// APIs, chat and completions. Byte 0 of the input picks the decoder (bit 0:
// Anthropic, bit 1: the completions stream, bits 2-3: 1 to 4 choices, bit 4:
// a 512-byte event limit), byte 1 seeds the sizes of the pieces the rest
// (the body) is fed in. Checked on arbitrary bytes: nothing crashes; the
// pieces give exactly the events and error of the whole body fed at once;
// every choice ends with exactly one kFinish and nothing after it, a failed
// one with a Status; text and messages are valid UTF-8 and messages short.
// The whole-body decoder and the error mapping run on the same bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "backend/upstream_wire.h"
#include "util/utf8.h"

namespace {

using strata::backend::Event;
using strata::backend::FinishReason;
using strata::backend::upstream::Api;
using strata::backend::upstream::StreamDecoder;

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckStatus(const strata::util::Status& s) {
  Check(strata::util::IsValidUtf8(s.message()));
  Check(s.message().size() < 1024);
}

std::string Show(const std::vector<Event>& events, const strata::util::Status& error) {
  std::string s;
  for (const Event& e : events) {
    s += std::to_string(static_cast<int>(e.kind)) + ":" + std::to_string(e.index) + ":" + e.text +
         ":" + std::to_string(e.logprobs.size()) + ":" +
         std::to_string(static_cast<int>(e.finish)) + ":" + e.stop_sequence + ":" +
         e.status.ToString() + ":" + std::to_string(e.usage.prompt_tokens) + "/" +
         std::to_string(e.usage.cached_tokens) + "/" + std::to_string(e.usage.cache_write_tokens) +
         "/" + std::to_string(e.usage.completion_tokens) + "\n";
    for (const auto& lp : e.logprobs) s += lp.text + std::to_string(lp.top.size());
  }
  return s + error.ToString();
}

// Per choice: deltas, then exactly one kFinish; a kCancelled one carries a
// Status, every other one none.
void CheckEvents(const std::vector<Event>& events, int32_t n) {
  std::vector<int> finishes(n, 0);
  for (const Event& e : events) {
    Check(e.index >= 0 && e.index < n);
    Check(finishes[e.index] == 0);
    Check(strata::util::IsValidUtf8(e.text));
    for (const auto& lp : e.logprobs) {
      Check(strata::util::IsValidUtf8(lp.text));
      for (const auto& [t, l] : lp.top) Check(strata::util::IsValidUtf8(t));
    }
    if (e.kind == Event::Kind::kFinish) {
      ++finishes[e.index];
      Check((e.finish == FinishReason::kCancelled) == !e.status.ok());
      CheckStatus(e.status);
      Check(e.usage.cached_tokens <= e.usage.prompt_tokens);
    } else {
      Check(!e.text.empty() || !e.logprobs.empty());
    }
  }
  for (int f : finishes) Check(f == 1);
}

struct Run {
  std::vector<Event> events;
  strata::util::Status error;
};

Run Decode(Api api, bool chat, int32_t n, size_t limit, std::string_view body, uint32_t seed) {
  StreamDecoder d(api, chat, n, {"\n\n", "END", "##"}, limit);
  Run r;
  uint32_t x = seed * 2654435761u + 1;
  size_t at = 0;
  while (at < body.size()) {
    size_t piece = body.size();  // seed 0: the whole body at once
    if (seed != 0) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      piece = 1 + x % 97;
    }
    piece = std::min(piece, body.size() - at);
    const bool was_complete = d.complete();
    r.error = d.Feed(body.substr(at, piece), &r.events);
    at += piece;
    Check(!was_complete || r.error.ok());
    if (!r.error.ok()) break;
  }
  if (r.error.ok()) r.error = d.End(&r.events);
  if (!r.error.ok()) {
    Check(r.error.reason() != strata::util::ErrorReason::kNone);
    CheckStatus(r.error);
    d.Fail(r.error, &r.events);
  }
  Check(d.complete());
  Check(d.started() == !r.events.empty());
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  const Api api = (mode & 1) ? Api::kAnthropic : Api::kOpenAI;
  const bool chat = (mode & 2) == 0;
  const int32_t n = api == Api::kAnthropic ? 1 : 1 + ((mode >> 2) & 3);
  const size_t limit = (mode & 16) ? 512 : (1u << 20);
  const std::string_view body(reinterpret_cast<const char*>(data + 2), size - 2);

  const Run whole = Decode(api, chat, n, limit, body, 0);
  const Run pieces = Decode(api, chat, n, limit, body, data[1] + 1u);
  CheckEvents(whole.events, n);
  Check(Show(whole.events, whole.error) == Show(pieces.events, pieces.error));

  std::vector<Event> events;
  const strata::util::Status s =
      strata::backend::upstream::DecodeWholeResponse(api, chat, n, {"END"}, body, &events);
  CheckStatus(s);
  if (s.ok()) {
    CheckEvents(events, n);
  } else {
    Check(events.empty());
  }
  CheckStatus(strata::backend::upstream::UpstreamError(api, 300 + data[1], body));
  return 0;
}
