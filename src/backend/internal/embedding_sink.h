// backend/internal/embedding_sink.h — how an embeddings request gets its
// vectors from the engine (private to backend/).
//
// Each input is one evaluate-only scheduler request whose EmbeddingSink is
// handed the final hidden states of its prompt tokens (chunk by chunk, again
// from the first after a preemption) and pools them: the mean, summed in
// double row by row in position order and divided by the number of prompt
// tokens, then scaled to unit L2 length (a zero vector stays zero). The
// EmbeddingBatch collects one request's vectors and the first error.
//
// Threading: an EmbeddingSink runs on the scheduler thread. EmbeddingBatch is
// thread-safe: sinks write it, the request's thread waits on it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "engine/request.h"
#include "util/status.h"

namespace strata::backend {

class EmbeddingBatch {
 public:
  explicit EmbeddingBatch(size_t n) : results_(n), n_(n), pending_(n) {}
  // Input i's vector.
  void Set(size_t i, std::vector<float> e);
  // One input ended; a non-OK status is kept if it is the first.
  void Finish(const util::Status& st);
  // Until every input ended; false on timeout.
  bool Wait(std::chrono::steady_clock::time_point deadline);
  // Until at least `n` inputs ended; false on timeout.
  bool WaitFinished(size_t n, std::chrono::steady_clock::time_point deadline);
  size_t finished();
  util::Status status();
  std::vector<std::vector<float>> Take();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<float>> results_;  // guarded by mu_
  const size_t n_;
  size_t pending_;       // guarded by mu_
  util::Status status_;  // guarded by mu_
};

// Input `index` of `batch`: sets its vector when the request ends well, and
// ends it in the batch (Cancelled when the engine cancelled it).
class EmbeddingSink final : public engine::RequestSink {
 public:
  EmbeddingSink(std::shared_ptr<EmbeddingBatch> batch, size_t index)
      : batch_(std::move(batch)), index_(index) {}
  util::StatusOr<int32_t> Choose(std::span<const float>) override;
  bool OnToken(int32_t) override { return false; }
  void OnHidden(std::span<const float> rows, int32_t n_rows) override;
  void OnRestart() override;
  void OnFinish(engine::FinishReason reason, const util::Status& status,
                const engine::Usage&) override;

 private:
  // The mean of the rows, then unit length.
  std::vector<float> Pooled();

  std::shared_ptr<EmbeddingBatch> batch_;
  const size_t index_;
  std::vector<double> sum_;  // Σ hidden states since the last restart, [n_embd]
  int32_t n_rows_ = 0;       // rows in sum_: the prompt's tokens once all came
};

}  // namespace strata::backend
