#include "engine/kv_pool.h"

#include <fmt/format.h>

namespace strata::engine {

KvBlockPool::KvBlockPool(const model::ModelConfig& config, int32_t n_blocks, int32_t block_size)
    : n_blocks_(n_blocks),
      block_size_(block_size),
      floats_per_block_(model::KvFloatsPerBlock(config, block_size)),
      bytes_(floats_per_block_ * sizeof(float) * static_cast<size_t>(n_blocks)),
      // new float[] without () leaves the memory untouched: pages are faulted in
      // only when a block is first written.
      data_(new float[floats_per_block_ * static_cast<size_t>(n_blocks)]),
      refs_(static_cast<size_t>(n_blocks), 0) {
  STRATA_CHECK(n_blocks > 0 && block_size > 0);
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> KvBlockPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void KvBlockPool::Ref(int32_t block) {
  STRATA_CHECK(block >= 0 && block < n_blocks_ && refs_[static_cast<size_t>(block)] > 0);
  ++refs_[static_cast<size_t>(block)];
}

void KvBlockPool::Unref(int32_t block) {
  STRATA_CHECK(block >= 0 && block < n_blocks_ && refs_[static_cast<size_t>(block)] > 0);
  if (--refs_[static_cast<size_t>(block)] == 0) free_.push_back(block);
}

util::Status BlockTable::Reserve(KvBlockPool& pool, int32_t n_tokens) {
  const size_t need =
      static_cast<size_t>((n_tokens + pool.block_size() - 1) / pool.block_size());
  if (need <= blocks_.size()) return util::OkStatus();
  const size_t missing = need - blocks_.size();
  if (missing > static_cast<size_t>(pool.n_free())) {
    return util::ResourceExhaustedError(fmt::format(
        "KV cache: {} more blocks needed, {} free of {}", missing, pool.n_free(), pool.n_blocks()));
  }
  for (size_t i = 0; i < missing; ++i) blocks_.push_back(*pool.Allocate());
  return util::OkStatus();
}

void BlockTable::Truncate(KvBlockPool& pool, int32_t n_tokens) {
  const size_t keep =
      static_cast<size_t>((n_tokens + pool.block_size() - 1) / pool.block_size());
  while (blocks_.size() > keep) {
    pool.Unref(blocks_.back());
    blocks_.pop_back();
  }
}

void BlockTable::Release(KvBlockPool& pool) { Truncate(pool, 0); }

}  // namespace strata::engine
