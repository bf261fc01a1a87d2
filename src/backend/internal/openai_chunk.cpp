#include "backend/internal/openai_chunk.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "backend/internal/json_scan.h"
#include "util/utf8.h"

namespace strata::backend::upstream::internal {
namespace {

// A token count as OptCount reads one: null → nullopt, an integer ≥ 0 →
// clamped to int32.
bool PlainCount(JsonScan& in, std::optional<int32_t>* out) {
  if (in.ConsumeNull()) {
    out->reset();
    return true;
  }
  int64_t v = 0;
  if (!in.Count(&v)) return false;
  *out = static_cast<int32_t>(std::min<int64_t>(v, std::numeric_limits<int32_t>::max()));
  return true;
}

// The member `key` of an object seen before: a DOM keeps the last one; the
// plain reader gives up instead. `seen` has a bit per known key.
bool FirstTime(uint32_t* seen, uint32_t bit) {
  if (*seen & bit) return false;
  *seen |= bit;
  return true;
}

bool PlainUsageObject(JsonScan& in, PlainUsage* u) {
  if (!in.Consume('{')) return false;
  bool first = true, done = false;
  uint32_t seen = 0;
  std::string_view key;
  while (true) {
    if (!in.NextKey(&first, &key, &done)) return false;
    if (done) return true;
    if (key == "prompt_tokens") {
      if (!FirstTime(&seen, 1) || !PlainCount(in, &u->prompt)) return false;
    } else if (key == "completion_tokens") {
      if (!FirstTime(&seen, 2) || !PlainCount(in, &u->completion)) return false;
    } else if (key == "prompt_tokens_details") {
      if (!FirstTime(&seen, 4)) return false;
      if (in.ConsumeNull()) continue;
      if (!in.Consume('{')) return false;
      bool dfirst = true, ddone = false;
      bool cached_seen = false;
      while (true) {
        if (!in.NextKey(&dfirst, &key, &ddone)) return false;
        if (ddone) break;
        if (key == "cached_tokens") {
          if (cached_seen || !PlainCount(in, &u->cached)) return false;
          cached_seen = true;
        } else if (!in.Skip()) {
          return false;
        }
      }
    } else if (!in.Skip()) {
      return false;
    }
  }
}

// One choice of a chunk or whole answer: `holder` ("delta", "message")
// holds the text in its "content", or "" for completions (the "text").
bool PlainChoice(JsonScan& in, std::string_view holder, int32_t n, ChoicePart* p,
                 size_t* text_begin, size_t* text_end) {
  const bool chat = !holder.empty();
  // The text as a string token, its span recorded.
  auto text = [&] {
    if (!in.NextIs('"')) return false;
    *text_begin = in.pos();
    if (!in.String(&p->text)) return false;
    *text_end = in.pos();
    return true;
  };
  if (!in.Consume('{')) return false;
  bool first = true, done = false;
  uint32_t seen = 0;
  std::string_view key;
  while (true) {
    if (!in.NextKey(&first, &key, &done)) return false;
    if (done) return true;
    if (key == "index") {
      if (!FirstTime(&seen, 1)) return false;
      if (in.ConsumeNull()) continue;
      int64_t index = 0;
      if (!in.Count(&index) || index >= n) return false;
      p->index = static_cast<int32_t>(index);
    } else if (chat && key == holder) {
      if (!FirstTime(&seen, 2)) return false;
      if (in.ConsumeNull()) continue;
      if (!in.Consume('{')) return false;
      bool dfirst = true, ddone = false;
      bool content_seen = false;
      while (true) {
        if (!in.NextKey(&dfirst, &key, &ddone)) return false;
        if (ddone) break;
        if (key == "content") {
          if (content_seen) return false;
          content_seen = true;
          if (in.ConsumeNull()) {
            p->text.clear();
          } else if (!text()) {
            return false;
          }
        } else if (key == "tool_calls" || key == "function_call") {
          // Calls are the DOM reader's (ReadToolCalls): only none is plain.
          if (!in.ConsumeNull()) return false;
        } else if (!in.Skip()) {
          return false;
        }
      }
    } else if (!chat && key == "text") {
      if (!FirstTime(&seen, 2)) return false;
      if (in.ConsumeNull()) {
        p->text.clear();
      } else if (!text()) {
        return false;
      }
    } else if (key == "logprobs") {
      if (!FirstTime(&seen, 4) || !in.ConsumeNull()) return false;
    } else if (key == "finish_reason") {
      if (!FirstTime(&seen, 8)) return false;
      if (in.ConsumeNull()) {
        p->finish_reason.reset();
      } else {
        std::string reason;
        if (!in.String(&reason)) return false;
        p->finish_reason = std::move(reason);
      }
    } else if (key == "stop_reason") {
      // Only a string names a stop string (vLLM sends a token id as an integer).
      if (!FirstTime(&seen, 16)) return false;
      if (in.NextIs('"')) {
        std::string stop;
        if (!in.String(&stop)) return false;
        p->stop_reason = std::move(stop);
      } else if (!in.Skip()) {
        return false;
      }
    } else if (!in.Skip()) {
      return false;
    }
  }
}

}  // namespace

void ApplyPlainUsage(const PlainUsage& plain, Usage* u) {
  u->prompt_tokens = plain.prompt.value_or(0);
  u->completion_tokens = plain.completion.value_or(0);
  u->cached_tokens = std::min(plain.cached.value_or(0), u->prompt_tokens);
}

std::optional<PlainChunk> ReadPlainChunk(std::string_view data, std::string_view holder,
                                         int32_t n) {
  if (!util::IsValidUtf8(data)) return std::nullopt;  // the DOM reader cleans it
  JsonScan in(data);
  PlainChunk c;
  if (!in.Consume('{')) return std::nullopt;
  bool first = true, done = false;
  uint32_t seen = 0;
  std::string_view key;
  while (true) {
    if (!in.NextKey(&first, &key, &done)) return std::nullopt;
    if (done) break;
    if (key == "choices") {
      if (!FirstTime(&seen, 1)) return std::nullopt;
      if (in.ConsumeNull()) continue;
      if (!in.Consume('[')) return std::nullopt;
      c.has_choices = true;
      if (in.Consume(']')) continue;
      c.any_choice = true;
      do {
        ChoicePart p;
        c.text_begin = c.text_end = 0;
        if (!PlainChoice(in, holder, n, &p, &c.text_begin, &c.text_end)) return std::nullopt;
        c.choices.push_back(std::move(p));
      } while (in.Consume(','));
      if (!in.Consume(']')) return std::nullopt;
    } else if (key == "usage") {
      if (!FirstTime(&seen, 2)) return std::nullopt;
      if (in.ConsumeNull()) continue;
      PlainUsage u;
      if (!PlainUsageObject(in, &u)) return std::nullopt;
      c.usage = u;
    } else if (key == "error") {
      // An error is read the one careful way; a null one is no error.
      if (!FirstTime(&seen, 4) || !in.ConsumeNull()) return std::nullopt;
    } else if (!in.Skip()) {
      return std::nullopt;
    }
  }
  if (!in.AtEnd()) return std::nullopt;
  return c;
}

void RepeatShape::Learn(std::string_view data, const PlainChunk& chunk) {
  index_ = -1;
  if (chunk.choices.size() != 1 || chunk.usage || chunk.text_end <= chunk.text_begin) return;
  const ChoicePart& p = chunk.choices[0];
  if (!p.tool_calls.empty() || !p.logprobs.empty() || p.finish_reason || p.stop_reason) return;
  head_.assign(data.substr(0, chunk.text_begin));
  tail_.assign(data.substr(chunk.text_end));
  index_ = p.index;
}

std::optional<ChoicePart> RepeatShape::Match(std::string_view data) const {
  // The token between must be one string; the shortest is "".
  if (index_ < 0 || data.size() < head_.size() + tail_.size() + 2) return std::nullopt;
  if (!data.starts_with(head_) || !data.ends_with(tail_)) return std::nullopt;
  const std::string_view token =
      data.substr(head_.size(), data.size() - head_.size() - tail_.size());
  // The head and tail were valid UTF-8, and the head ends and the tail
  // starts at ASCII bytes (JSON punctuation or white space): the token
  // alone is left to check.
  if (!util::IsValidUtf8(token)) return std::nullopt;
  ChoicePart p;
  p.index = index_;
  JsonScan in(token);
  if (!in.String(&p.text) || !in.AtEnd()) return std::nullopt;
  return p;
}

}  // namespace strata::backend::upstream::internal
