#include "backend/internal/embedding_sink.h"

#include <cmath>

namespace strata::backend {

void EmbeddingBatch::Set(size_t i, std::vector<float> e) {
  std::lock_guard<std::mutex> lock(mu_);
  results_[i] = std::move(e);
}

void EmbeddingBatch::Finish(const util::Status& st) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok() && status_.ok()) status_ = st;
  --pending_;
  cv_.notify_all();
}

bool EmbeddingBatch::Wait(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [this] { return pending_ == 0; });
}

bool EmbeddingBatch::WaitFinished(size_t n, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [&] { return n_ - pending_ >= n; });
}

size_t EmbeddingBatch::finished() {
  std::lock_guard<std::mutex> lock(mu_);
  return n_ - pending_;
}

util::Status EmbeddingBatch::status() {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

std::vector<std::vector<float>> EmbeddingBatch::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(results_);
}

util::StatusOr<int32_t> EmbeddingSink::Choose(std::span<const float>) {
  return util::InternalError("embedding requests do not sample");
}

void EmbeddingSink::OnHidden(std::span<const float> rows, int32_t n_rows) {
  const size_t n_embd = rows.size() / static_cast<size_t>(n_rows);
  sum_.resize(n_embd, 0.0);
  for (size_t t = 0; t < static_cast<size_t>(n_rows); ++t) {
    for (size_t d = 0; d < n_embd; ++d) sum_[d] += rows[t * n_embd + d];
  }
  n_rows_ += n_rows;
}

void EmbeddingSink::OnRestart() {
  // Preempted: the rows come again from the first token.
  sum_.clear();
  n_rows_ = 0;
}

void EmbeddingSink::OnFinish(engine::FinishReason reason, const util::Status& status,
                             const engine::Usage&) {
  if (status.ok() && reason == engine::FinishReason::kCancelled) {
    batch_->Finish(util::CancelledError("the embedding request was cancelled"));
    return;
  }
  if (status.ok()) batch_->Set(index_, Pooled());
  batch_->Finish(status);
}

std::vector<float> EmbeddingSink::Pooled() {
  // Every prompt token came exactly once since the last restart: n_rows_ is
  // the prompt's length.
  double norm = 0;
  for (double& v : sum_) {
    v /= static_cast<double>(n_rows_);
    norm += v * v;
  }
  norm = std::sqrt(norm);
  std::vector<float> e(sum_.size());
  for (size_t d = 0; d < sum_.size(); ++d) {
    e[d] = static_cast<float>(norm > 0 ? sum_[d] / norm : 0.0);
  }
  return e;
}

}  // namespace strata::backend
