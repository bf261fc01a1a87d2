// backend/encoder.h — a sentence encoder as a backend: a BERT-family one
// (model/encoder.h) or strata's hash encoder (model/hash_encoder.h). It
// answers POST /v1/embeddings, and nothing else.
//
// Promise: Embed tokenizes each text as the encoder does ([CLS] ... [SEP]),
// checks every input as the local engine does (InvalidField "input" when
// empty or over max_embedding_inputs items, naming the item that is empty or
// holds a token outside the vocabulary; OutOfRange kContextLengthExceeded
// over the encoder's context, as OpenAI refuses an over-long input) and
// returns one unit vector per input, in order. Inputs run one after another
// on the backend's own thread pool; a request waits for the pool at most
// until its deadline (DeadlineExceeded). Chat and completion requests are
// refused with InvalidArgument kUnsupportedByBackend, naming the model as an
// embedding model. The token endpoints use the encoder's vocabulary. A hash
// encoder has no vocabulary: it takes texts only (token-id inputs and the
// token endpoints are refused as unsupported), each at most 64 KiB.
//
// Threading: thread-safe; the pool has one user at a time (pool_mu_).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "model/encoder.h"
#include "model/hash_encoder.h"
#include "util/thread_pool.h"

namespace strata::backend {

struct EncoderBackendOptions {
  std::string name;     // the model id clients use
  int32_t threads = 1;  // the pool's threads
  int32_t max_embedding_inputs = 256;
};

class EncoderBackend final : public Backend {
 public:
  // Borrows `encoder`, which must outlive the backend.
  EncoderBackend(const model::Encoder& encoder, const EncoderBackendOptions& options);
  EncoderBackend(const model::HashEncoder& encoder, const EncoderBackendOptions& options);

  const std::string& name() const override { return name_; }
  std::string_view kind() const override { return "local"; }
  uint64_t fingerprint() const override;
  int32_t n_ctx() const override;  // 0 for a hash encoder
  util::StatusOr<std::shared_ptr<const Prepared>> Prepare(const Request& r) const override;
  util::StatusOr<std::shared_ptr<Run>> Start(const Request& r,
                                             std::shared_ptr<const Prepared> prepared,
                                             std::shared_ptr<Sink> sink,
                                             Governor* governor) override;
  util::StatusOr<EmbeddingResult> Embed(const EmbeddingRequest& r,
                                        std::chrono::steady_clock::time_point deadline) override;
  // Embedding costs milliseconds of CPU: keep it off the I/O threads.
  bool may_block() const override { return true; }

  util::StatusOr<std::vector<int32_t>> EncodeText(std::string_view text, bool add_special,
                                                  bool parse_special) const override;
  util::StatusOr<std::string> DecodeTokens(std::span<const int32_t> ids) const override;
  util::StatusOr<std::string> TokenBytes(int32_t id) const override;

  // A reload's cap on inputs per request ([1, 65536]).
  void SetMaxEmbeddingInputs(int32_t n) { max_inputs_.store(n, std::memory_order_relaxed); }

 private:
  util::Status NotAnEmbeddingRequest() const;
  util::StatusOr<EmbeddingResult> EmbedHashed(const EmbeddingRequest& r) const;

  const model::Encoder* bert_ = nullptr;  // one of the two is set
  const model::HashEncoder* hash_ = nullptr;
  const std::string name_;
  std::atomic<int32_t> max_inputs_;
  std::timed_mutex pool_mu_;  // held while a request's inputs run on pool_
  util::ThreadPool pool_;
};

}  // namespace strata::backend
