// backend/internal/stored_tokens.h — a durable session's stored token ids
// put in front of the rest of its rendered conversation (private to
// backend/; the local engine's Tokenize uses it).
//
// Threading: a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "text/tokenizer.h"

namespace strata::backend::internal {

// A chat's tokens that begin with `stored`, the conversation's own tokens
// so far (the prompt and answer of its last turn, as the engine saw and
// generated them: their KV blocks are in L2), followed by the rest of the
// rendered conversation encoded under each segment's rule. `plain` is the
// conversation encoded from scratch. nullopt when `stored` cannot stand for
// the start of it: an id outside the vocabulary, a start other than an
// encoding's (BOS), text that is not where the conversation starts, or a
// result that does not decode to exactly the text `plain` decodes to.
std::optional<std::vector<int32_t>> SpliceStoredTokens(const text::Tokenizer& tok,
                                                       std::span<const text::TextSegment> parts,
                                                       std::span<const int32_t> plain,
                                                       std::span<const int32_t> stored);

}  // namespace strata::backend::internal
