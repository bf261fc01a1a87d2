#include "backend/encoder.h"

#include <fmt/format.h>

#include "backend/internal/embedding_inputs.h"

namespace strata::backend {

EncoderBackend::EncoderBackend(const model::Encoder& encoder, const EncoderBackendOptions& options)
    : bert_(&encoder),
      name_(options.name),
      max_inputs_(options.max_embedding_inputs),
      pool_(std::max(1, options.threads)) {}

EncoderBackend::EncoderBackend(const model::HashEncoder& encoder,
                               const EncoderBackendOptions& options)
    : hash_(&encoder), name_(options.name), max_inputs_(options.max_embedding_inputs), pool_(1) {}

uint64_t EncoderBackend::fingerprint() const {
  return bert_ ? bert_->fingerprint() : hash_->fingerprint();
}

int32_t EncoderBackend::n_ctx() const { return bert_ ? bert_->config().n_ctx_train : 0; }

util::Status EncoderBackend::NotAnEmbeddingRequest() const {
  return util::InvalidArgumentError(
             fmt::format("model '{}' is an embedding model ({}): it serves POST /v1/embeddings "
                         "only",
                         name_,
                         bert_ ? bert_->config().architecture
                               : std::string(model::kHashEncoderArchitecture)))
      .WithReason(util::ErrorReason::kUnsupportedByBackend);
}

util::StatusOr<std::shared_ptr<const Prepared>> EncoderBackend::Prepare(const Request&) const {
  return NotAnEmbeddingRequest();
}

util::StatusOr<std::shared_ptr<Run>> EncoderBackend::Start(const Request&,
                                                           std::shared_ptr<const Prepared>,
                                                           std::shared_ptr<Sink>, Governor*) {
  return NotAnEmbeddingRequest();
}

util::StatusOr<EmbeddingResult> EncoderBackend::Embed(
    const EmbeddingRequest& r, std::chrono::steady_clock::time_point deadline) {
  if (hash_ != nullptr) return EmbedHashed(r);
  STRATA_ASSIGN_OR_RETURN(internal::EmbeddingInputs checked,
                          internal::CheckedEmbeddingInputs(
                              r, bert_->tokenizer(), max_inputs_.load(std::memory_order_relaxed),
                              bert_->config().n_ctx_train, "the encoder's"));
  EmbeddingResult out;
  out.prompt_tokens = checked.prompt_tokens;
  std::unique_lock lock(pool_mu_, std::defer_lock);
  if (!lock.try_lock_until(deadline)) {
    return util::DeadlineExceededError("the encoder stayed busy past the request's deadline");
  }
  for (const auto& ids : checked.tokens) {
    if (std::chrono::steady_clock::now() > deadline) {
      return util::DeadlineExceededError("embedding ran past the request's deadline");
    }
    STRATA_ASSIGN_OR_RETURN(model::Embedding e, bert_->EmbedTokens(ids, pool_));
    out.embeddings.push_back(std::move(e.vector));
  }
  return out;
}

util::StatusOr<std::vector<int32_t>> EncoderBackend::EncodeText(std::string_view text,
                                                                bool add_special,
                                                                bool parse_special) const {
  if (bert_ == nullptr) return Backend::EncodeText(text, add_special, parse_special);
  return bert_->tokenizer().Encode(text,
                                   {.add_special = add_special, .parse_special = parse_special});
}

util::StatusOr<std::string> EncoderBackend::DecodeTokens(std::span<const int32_t> ids) const {
  if (bert_ == nullptr) return Backend::DecodeTokens(ids);
  const text::Tokenizer& tok = bert_->tokenizer();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!tok.IsValid(ids[i])) {
      return util::InvalidFieldError(
          "tokens", fmt::format("'tokens[{}]' is {}: outside the vocabulary [0, {})", i, ids[i],
                                tok.n_vocab()));
    }
  }
  return tok.Decode(ids, {.render_special = true});
}

util::StatusOr<std::string> EncoderBackend::TokenBytes(int32_t id) const {
  if (bert_ == nullptr) return Backend::TokenBytes(id);
  const text::Tokenizer& tok = bert_->tokenizer();
  if (!tok.IsValid(id)) {
    return util::InvalidArgumentError(fmt::format("token {} is outside the vocabulary", id));
  }
  return std::string(tok.Piece(id, /*render_special=*/true));
}

util::StatusOr<EmbeddingResult> EncoderBackend::EmbedHashed(const EmbeddingRequest& r) const {
  constexpr size_t kMaxTextBytes = 64 << 10;
  if (!r.token_ids.empty()) {
    return util::InvalidFieldError(
               "input",
               fmt::format("model '{}' (a hash encoder) takes texts, not token ids", name_))
        .WithReason(util::ErrorReason::kUnsupportedByBackend);
  }
  if (r.texts.empty()) return util::InvalidFieldError("input", "'input' must not be empty");
  const int32_t max_inputs = max_inputs_.load(std::memory_order_relaxed);
  if (static_cast<int32_t>(r.texts.size()) > max_inputs) {
    return util::InvalidFieldError(
        "input",
        fmt::format("'input' has {} items; at most {} are allowed", r.texts.size(), max_inputs));
  }
  EmbeddingResult out;
  for (size_t i = 0; i < r.texts.size(); ++i) {
    if (r.texts[i].size() > kMaxTextBytes) {
      return util::InvalidFieldError(fmt::format("input[{}]", i),
                                     fmt::format("'input[{}]' has {} bytes; at most {} are allowed",
                                                 i, r.texts[i].size(), kMaxTextBytes));
    }
    const std::vector<uint32_t> features = model::HashFeatures(r.texts[i], hash_->config());
    if (features.empty()) {
      return util::InvalidFieldError(fmt::format("input[{}]", i),
                                     fmt::format("'input[{}]' has no words", i));
    }
    out.prompt_tokens += static_cast<int32_t>(features.size());
    out.embeddings.push_back(hash_->EmbedFeatures(features));
  }
  return out;
}

}  // namespace strata::backend
