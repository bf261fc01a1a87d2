#include "backend/internal/embedding_inputs.h"

#include <fmt/format.h>

namespace strata::backend::internal {

util::StatusOr<EmbeddingInputs> CheckedEmbeddingInputs(const EmbeddingRequest& r,
                                                       const text::Tokenizer& tok,
                                                       int32_t max_inputs, int32_t n_ctx,
                                                       std::string_view whose) {
  EmbeddingInputs in;
  for (const auto& t : r.texts) in.tokens.push_back(tok.Encode(t, {.add_special = true}));
  for (const auto& ids : r.token_ids) in.tokens.push_back(ids);
  if (in.tokens.empty()) return util::InvalidFieldError("input", "'input' must not be empty");
  if (static_cast<int32_t>(in.tokens.size()) > max_inputs) {
    return util::InvalidFieldError(
        "input",
        fmt::format("'input' has {} items; at most {} are allowed", in.tokens.size(), max_inputs));
  }
  for (size_t i = 0; i < in.tokens.size(); ++i) {
    const std::vector<int32_t>& ids = in.tokens[i];
    if (ids.empty()) {
      return util::InvalidFieldError(fmt::format("input[{}]", i),
                                     fmt::format("'input[{}]' is empty", i));
    }
    if (static_cast<int32_t>(ids.size()) > n_ctx) {
      return util::OutOfRangeError(fmt::format("context length exceeded: input[{}] has {} tokens "
                                               "and {} context is {}",
                                               i, ids.size(), whose, n_ctx))
          .WithReason(util::ErrorReason::kContextLengthExceeded);
    }
    for (int32_t id : ids) {
      if (!tok.IsValid(id)) {
        return util::InvalidFieldError(
            fmt::format("input[{}]", i),
            fmt::format("'input[{}]' holds token id {} outside the vocabulary", i, id));
      }
    }
    in.prompt_tokens += static_cast<int32_t>(ids.size());
  }
  return in;
}

}  // namespace strata::backend::internal
