#include "backend/internal/stored_tokens.h"

#include <algorithm>
#include <string>

namespace strata::backend::internal {

std::optional<std::vector<int32_t>> SpliceStoredTokens(const text::Tokenizer& tok,
                                                       std::span<const text::TextSegment> parts,
                                                       std::span<const int32_t> plain,
                                                       std::span<const int32_t> stored) {
  if (tok.add_eos()) return std::nullopt;
  for (int32_t id : stored) {
    if (!tok.IsValid(id)) return std::nullopt;
  }
  const std::vector<int32_t> lead = tok.EncodeSegments({}, /*add_special=*/true);
  if (stored.size() <= lead.size() || !std::equal(lead.begin(), lead.end(), stored.begin())) {
    return std::nullopt;
  }
  std::string rendered;
  for (const text::TextSegment& p : parts) rendered.append(p.text);
  const text::DecodeOptions as_text{.render_special = true};
  const std::string head = tok.Decode(stored.subspan(lead.size()), as_text);
  if (head.empty() || head.size() >= rendered.size() || !rendered.starts_with(head)) {
    return std::nullopt;
  }
  std::vector<text::TextSegment> rest;
  size_t skip = head.size();
  for (const text::TextSegment& p : parts) {
    if (skip >= p.text.size()) {
      skip -= p.text.size();
      continue;
    }
    rest.push_back({p.text.substr(skip), p.parse_special});
    skip = 0;
  }
  const text::TokenType last = tok.Type(stored.back());
  const std::vector<int32_t> tail = tok.EncodeContinuation(
      rest, last == text::TokenType::kControl || last == text::TokenType::kUserDefined);
  std::vector<int32_t> out(stored.begin(), stored.end());
  out.insert(out.end(), tail.begin(), tail.end());
  if (tok.Decode(out, as_text) != tok.Decode(plain, as_text)) return std::nullopt;
  return out;
}

}  // namespace strata::backend::internal
