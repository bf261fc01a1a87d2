// engine/kv_pool.h — the KV cache as a pool of fixed-size blocks.
//
// Promise: KV memory is one allocation cut into blocks of `block_size` token
// positions (16 by default). A sequence owns a BlockTable: the physical blocks
// holding its positions in order. Every block has a reference count, so one
// physical block can back the same prefix of many sequences (the shared-prefix
// cache builds on this): a block returns to the free list only when its last
// reference is dropped. Allocation is O(1) and never fails silently: it
// reports exhaustion so the scheduler can queue or preempt.
//
// Threading: owned by the engine's scheduler thread; not thread-safe.
//
// Usage:
//   KvBlockPool pool(config, /*n_blocks=*/1024, /*block_size=*/16);
//   BlockTable seq;
//   STRATA_RETURN_IF_ERROR(seq.Reserve(pool, n_tokens));
//   ... forward pass writes positions [0, n_tokens) ...
//   seq.Release(pool);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/transformer.h"
#include "util/status.h"

namespace strata::engine {

class KvBlockPool {
 public:
  // Memory is reserved but not touched until blocks are written.
  KvBlockPool(const model::ModelConfig& config, int32_t n_blocks, int32_t block_size);

  int32_t n_blocks() const { return n_blocks_; }
  int32_t block_size() const { return block_size_; }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_used() const { return n_blocks_ - n_free(); }
  size_t bytes() const { return bytes_; }
  size_t bytes_per_block() const { return floats_per_block_ * sizeof(float); }

  // A free block with reference count 1, or nullopt when none is left.
  std::optional<int32_t> Allocate();
  void Ref(int32_t block);
  // Drops one reference; the block is free again when none remain.
  void Unref(int32_t block);
  int32_t ref_count(int32_t block) const { return refs_[static_cast<size_t>(block)]; }

  model::KvBuffer buffer() { return {data_.get(), n_blocks_, block_size_}; }

 private:
  const int32_t n_blocks_;
  const int32_t block_size_;
  const size_t floats_per_block_;
  const size_t bytes_;
  std::unique_ptr<float[]> data_;   // [n_blocks][floats_per_block], see model::KvBuffer
  std::vector<int32_t> refs_;       // per block
  std::vector<int32_t> free_;       // stack of free block ids (lowest id on top)
};

// The physical blocks of one sequence, in position order.
class BlockTable {
 public:
  // Makes room for positions [0, n_tokens): allocates what is missing, all or
  // nothing (ResourceExhausted, table unchanged, when the pool runs dry).
  util::Status Reserve(KvBlockPool& pool, int32_t n_tokens);
  // Drops the blocks past those needed for n_tokens positions.
  void Truncate(KvBlockPool& pool, int32_t n_tokens);
  // Drops every reference this table holds.
  void Release(KvBlockPool& pool);

  std::span<const int32_t> blocks() const { return blocks_; }
  int32_t capacity(int32_t block_size) const {
    return static_cast<int32_t>(blocks_.size()) * block_size;
  }

 private:
  std::vector<int32_t> blocks_;
};

}  // namespace strata::engine
