// backend/internal/embedding_inputs.h — the checked token inputs of an
// embeddings request, shared by the backends that tokenize locally (the
// engine, a sentence encoder; private to backend/).
//
// Promise: the texts are encoded with the vocabulary's special tokens, then
// the token-id inputs follow, in request order. InvalidField "input" when
// there are none or more than max_inputs; InvalidField "input[i]" naming an
// empty input or an id outside the vocabulary; OutOfRange with
// kContextLengthExceeded for an input over n_ctx tokens (the message names
// `whose` context: "the model's", "the encoder's").
//
// Threading: a pure function.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "text/tokenizer.h"
#include "util/status.h"

namespace strata::backend::internal {

struct EmbeddingInputs {
  std::vector<std::vector<int32_t>> tokens;  // one per input
  int32_t prompt_tokens = 0;                 // over all inputs
};

util::StatusOr<EmbeddingInputs> CheckedEmbeddingInputs(const EmbeddingRequest& r,
                                                       const text::Tokenizer& tok,
                                                       int32_t max_inputs, int32_t n_ctx,
                                                       std::string_view whose);

}  // namespace strata::backend::internal
