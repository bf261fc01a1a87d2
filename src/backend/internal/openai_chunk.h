// backend/internal/openai_chunk.h — an OpenAI stream chunk (or whole answer)
// read without a DOM, for the hot path of a forwarded stream (private to
// backend/).
//
// Promise: nearly every chunk of a stream is {"choices": [{"index", "delta":
// {"content"}, "logprobs": null, "finish_reason"}], ...} and perhaps a usage
// object; a whole answer is the same with "message" for "delta".
// ReadPlainChunk reads exactly that much in place; anything else (an error
// member, logprobs, a value of an unexpected type, a key twice, malformed
// JSON) makes it give up, and the DOM reader (upstream_openai.cpp) decides,
// its errors included. Where it succeeds it finds what the DOM reader would.
// RepeatShape reads a chunk that differs from an earlier plain one only in
// its text by decoding that text alone, and finds what ReadPlainChunk would.
//
// Threading: pure functions; a RepeatShape belongs to one stream's decoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"

namespace strata::backend::upstream::internal {

// One choice object of a chunk or a whole response, read into its parts.
struct ChoicePart {
  int32_t index = 0;
  std::string text;
  std::vector<ToolCallDelta> tool_calls;
  std::vector<TokenLogprob> logprobs;
  std::optional<std::string> finish_reason;
  std::optional<std::string> stop_reason;  // vLLM: the matched stop string (a string only)
};

struct PlainUsage {
  std::optional<int32_t> prompt, completion, cached;
};

struct PlainChunk {
  std::vector<ChoicePart> choices;
  // The last choice's text as a string token: where its opening quote is
  // and where the token ends (0, 0 when it had none, or null).
  size_t text_begin = 0, text_end = 0;
  bool has_choices = false;  // "choices" is an array (perhaps empty)
  bool any_choice = false;
  std::optional<PlainUsage> usage;  // a non-null "usage"
};

// `data` (valid JSON text or not) as a plain chunk; `holder` is "delta"
// (a chat stream), "message" (a chat answer) or "" (completions: the
// choice's own "text"); `n` the choices asked for. nullopt: not plain.
std::optional<PlainChunk> ReadPlainChunk(std::string_view data, std::string_view holder, int32_t n);

// A plain usage object's counts into `u`, as the DOM reader sets them.
void ApplyPlainUsage(const PlainUsage& plain, Usage* u);

// A stream's chunks mostly differ only in their text: every byte before the
// content string (id, created, model, the choice's index) and after it
// (finish_reason null, logprobs null) is the same from chunk to chunk. Once
// ReadPlainChunk has read a chunk that is one choice with text alone, its
// bytes around that text are kept. A later chunk that is those same bytes
// around one string token means what that chunk meant with this text: the
// same choice, no finish, no usage. Match then decodes only the string.
class RepeatShape {
 public:
  // `data` was read as `chunk`: its shape is kept when it is one choice
  // with a text string alone (else no shape is kept).
  void Learn(std::string_view data, const PlainChunk& chunk);
  // The choice `data` is, when it has the kept shape; nullopt otherwise
  // (read it in full).
  std::optional<ChoicePart> Match(std::string_view data) const;

 private:
  std::string head_, tail_;  // the bytes before and after the text's string token
  int32_t index_ = -1;       // the choice; -1: no shape kept
};

}  // namespace strata::backend::upstream::internal
