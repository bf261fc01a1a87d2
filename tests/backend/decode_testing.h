// What the upstream decoder tests share: events shown one line each (equal
// strings, equal events), a decoder fed as a caller feeds it, and the check
// that every split of a body gives the events of the whole.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/upstream_wire.h"

namespace strata::backend::upstream::decode_testing {

// One line per event, every field that matters: equal strings, equal events.
inline std::string Show(const Event& e) {
  if (e.kind == Event::Kind::kDelta) {
    std::string s = fmt::format("delta[{}] {}", e.index, nlohmann::json(e.text).dump());
    for (const TokenLogprob& lp : e.logprobs) {
      s +=
          fmt::format(" lp({} {} b{}", nlohmann::json(lp.text).dump(), lp.logprob, lp.bytes.size());
      for (const auto& [t, l] : lp.top) s += fmt::format(" {}={}", nlohmann::json(t).dump(), l);
      s += ")";
    }
    for (const ToolCallDelta& t : e.tool_calls) {
      s += fmt::format(" call[{}", t.index);
      if (!t.id.empty() || !t.name.empty()) s += fmt::format(" {} {}", t.id, t.name);
      s += fmt::format(" {}]", nlohmann::json(t.arguments).dump());
    }
    if (e.usage.prompt_tokens != 0 || e.usage.cached_tokens != 0 ||
        e.usage.cache_write_tokens != 0 || e.usage.completion_tokens != 0) {
      s += fmt::format(" usage={}/{}/{}/{}", e.usage.prompt_tokens, e.usage.cached_tokens,
                       e.usage.cache_write_tokens, e.usage.completion_tokens);
    }
    return s;
  }
  return fmt::format("finish[{}] {} stop={} status={} usage={}/{}/{}/{} tokens={}", e.index,
                     FinishReasonLabel(e.finish), e.stop_sequence, e.status.ToString(),
                     e.usage.prompt_tokens, e.usage.cached_tokens, e.usage.cache_write_tokens,
                     e.usage.completion_tokens, e.timing.tokens);
}

inline std::string ShowAll(const std::vector<Event>& events) {
  std::string s;
  for (const Event& e : events) s += Show(e) + "\n";
  return s;
}

struct Decoded {
  std::vector<Event> events;
  util::Status error;  // the first Feed or End error (OK when none)
  bool started = false;
  bool complete = false;
};

struct Stream {
  Api api = Api::kOpenAI;
  bool chat = true;
  int32_t n = 1;
  std::vector<std::string> stops = {};
  size_t max_event_bytes = 16u << 20;
};

// Feeds `body` in pieces cut at `cuts` (ascending offsets), as a caller
// would: stop at the first error, then Fail; else End.
inline Decoded DecodeCut(const Stream& s, std::string_view body, const std::vector<size_t>& cuts) {
  StreamDecoder d(s.api, s.chat, s.n, s.stops, s.max_event_bytes);
  Decoded out;
  size_t at = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(body.size());
  for (size_t end : ends) {
    out.error = d.Feed(body.substr(at, end - at), &out.events);
    at = end;
    if (!out.error.ok()) break;
  }
  if (out.error.ok()) out.error = d.End(&out.events);
  if (!out.error.ok()) d.Fail(out.error, &out.events);
  out.started = d.started();
  out.complete = d.complete();
  return out;
}

inline Decoded Decode(const Stream& s, std::string_view body) { return DecodeCut(s, body, {}); }

// Every way of cutting `body` in two, and byte by byte, gives the events
// (and the error) of feeding it whole.
inline void ExpectSplitInvariant(const Stream& s, std::string_view body) {
  const Decoded whole = Decode(s, body);
  const std::string want = ShowAll(whole.events) + whole.error.ToString();
  for (size_t k = 0; k <= body.size(); ++k) {
    const Decoded two = DecodeCut(s, body, {k});
    ASSERT_EQ(ShowAll(two.events) + two.error.ToString(), want) << "cut at byte " << k;
  }
  std::vector<size_t> every;
  for (size_t k = 1; k < body.size(); ++k) every.push_back(k);
  const Decoded bytes = DecodeCut(s, body, every);
  EXPECT_EQ(ShowAll(bytes.events) + bytes.error.ToString(), want) << "byte by byte";
}

inline std::string Sse(std::string_view data) { return fmt::format("data: {}\n\n", data); }
inline std::string Sse(std::string_view event, std::string_view data) {
  return fmt::format("event: {}\ndata: {}\n\n", event, data);
}

}  // namespace strata::backend::upstream::decode_testing
