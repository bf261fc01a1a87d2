// Fuzz target: the tool-call reader of a model's streamed text
// (backend/tool_calls.h). The first byte picks the syntax, whether parallel
// calls are allowed and whether the text is calls only; the rest is the
// text, cut into pushes at every 0xFF byte. Whatever the bytes: calls are
// numbered 0, 1, ... in order, the first piece of each (and only it)
// carries its id and name, no piece comes for a call before its first,
// calls() counts them, and at most one call comes when parallel calls are
// refused.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "backend/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::backend::ToolCallDelta;
  using strata::backend::ToolCallParser;
  using strata::text::ToolSyntax;
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const ToolSyntax syntax = mode % 3 == 0   ? ToolSyntax::kTags
                            : mode % 3 == 1 ? ToolSyntax::kLlama3
                                            : ToolSyntax::kMistral;
  ToolCallParser p({.syntax = syntax,
                    .parallel = (mode & 0x4) == 0,
                    .id_seed = "fuzz",
                    .calls_only = (mode & 0x8) != 0});
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string out;
  std::vector<ToolCallDelta> calls;
  size_t at = 0;
  while (at <= text.size()) {
    size_t cut = text.find('\xff', at);
    if (cut == std::string_view::npos) cut = text.size();
    p.Push(text.substr(at, cut - at), &out, &calls);
    at = cut + 1;
  }
  p.Finish(&out, &calls);
  int32_t begun = 0;
  for (const ToolCallDelta& d : calls) {
    if (d.index == begun) {  // a new call: its first piece names it
      if (d.id.empty() || d.name.empty()) std::abort();
      ++begun;
    } else if (d.index >= begun || d.index < 0 || !d.id.empty() || !d.name.empty()) {
      std::abort();  // a piece before its call, or a second first piece
    }
  }
  if (begun != p.calls()) std::abort();
  if ((mode & 0x4) != 0 && begun > 1) std::abort();
  return 0;
}
