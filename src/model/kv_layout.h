// model/kv_layout.h — where each position's keys and values live in KV memory.
//
// Promise: the one description of the KV block layout; everything that
// sizes, writes, reads or copies KV memory computes its offsets here. KV
// memory is an array of blocks, each holding `block_size` consecutive
// positions of one sequence, every layer:
//
//   buffer: [n_blocks][n_layers][2 (K, V)][block_size][kv_dim] elements, row-major
//
// with kv_dim = n_kv_heads * head_dim, each element of `type`: F32, F16 or
// Q8_0 (kernels::IsKvType; Q8_0 in blocks of 32 along a row, so head_dim must
// be a multiple of 32 and every head's part of a row is whole blocks). A
// sequence's block table maps its position p to block table[p / block_size],
// slot p % block_size. Offsets are in elements from the start of the buffer
// (Bytes converts them) and additive:
//   RowOffset(block, layer, part, slot) = SlotOffset(block, slot) + PartOffset(layer, part)
// which is how the attention kernel reads rows: per position the slot offset
// (row_off), per (layer, part, KV head) a base pointer.
//
// Threading: KvLayout is an immutable value; KvBuffer borrows memory the
// caller owns (engine::KvBlockPool) and says nothing about who writes it.
//
// Usage:
//   const KvLayout layout = config.kv_layout(/*block_size=*/16, kernels::TensorType::kF16);
//   std::vector<uint8_t> kv(layout.block_bytes() * n_blocks);
//   uint8_t* k = kv.data() + layout.Bytes(layout.RowOffset(block, layer, KvPart::kKey, slot));
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace strata::model {

enum class KvPart : int32_t { kKey = 0, kValue = 1 };

class KvLayout {
 public:
  // n_layers, kv_dim and block_size >= 1; `type` one of kernels::IsKvType
  // (for Q8_0, kv_dim and head_dim multiples of 32).
  KvLayout(int32_t n_layers, int32_t kv_dim, int32_t block_size,
           kernels::TensorType type = kernels::TensorType::kF32)
      : type_(type),
        n_layers_(n_layers),
        kv_dim_(kv_dim),
        block_size_(block_size),
        row_floats_(static_cast<size_t>(kv_dim)),
        part_floats_(static_cast<size_t>(block_size) * row_floats_),
        layer_floats_(2 * part_floats_),
        block_floats_(static_cast<size_t>(n_layers) * layer_floats_) {}

  kernels::TensorType type() const { return type_; }
  int32_t n_layers() const { return n_layers_; }
  int32_t kv_dim() const { return kv_dim_; }
  int32_t block_size() const { return block_size_; }

  // Bytes of `elements` elements (an offset or a size below; for Q8_0 a
  // multiple of 32).
  size_t Bytes(size_t elements) const { return kernels::KvRowBytes(type_, elements); }
  // Bytes of one block, of one position's row.
  size_t block_bytes() const { return Bytes(block_floats_); }
  size_t row_bytes() const { return Bytes(row_floats_); }

  // Sizes in elements (the names say floats: what an F32 cache holds).
  // One position's K (or V) row of one layer: [kv_dim].
  size_t row_floats() const { return row_floats_; }
  // One (layer, K|V) part of a block: [block_size][kv_dim].
  size_t part_floats() const { return part_floats_; }
  // One layer of a block: [2][block_size][kv_dim].
  size_t layer_floats() const { return layer_floats_; }
  // One block: [n_layers][2][block_size][kv_dim].
  size_t block_floats() const { return block_floats_; }

  // Index into a sequence's block table, and slot in that block, of position `pos` >= 0.
  int32_t BlockIndex(int32_t pos) const { return pos / block_size_; }
  int32_t Slot(int32_t pos) const { return pos % block_size_; }

  // Offsets in elements. Offset of slot `slot` of block `block` in layer 0's K part.
  size_t SlotOffset(int32_t block, int32_t slot) const {
    return static_cast<size_t>(block) * block_floats_ + static_cast<size_t>(slot) * row_floats_;
  }
  // Offset of (layer, part) from the start of a block.
  size_t PartOffset(int32_t layer, KvPart part) const {
    return static_cast<size_t>(layer) * layer_floats_ + static_cast<size_t>(part) * part_floats_;
  }
  // Offset of the row [kv_dim] of (block, layer, part, slot).
  size_t RowOffset(int32_t block, int32_t layer, KvPart part, int32_t slot) const {
    return SlotOffset(block, slot) + PartOffset(layer, part);
  }

 private:
  kernels::TensorType type_;
  int32_t n_layers_, kv_dim_, block_size_;
  size_t row_floats_, part_floats_, layer_floats_, block_floats_;
};

// Caller-owned KV memory: n_blocks blocks laid out as KvLayout says, for the
// model's n_layers and kv_dim and this block_size and element type.
struct KvBuffer {
  void* data = nullptr;  // n_blocks × KvLayout::block_bytes()
  int32_t n_blocks = 0;
  int32_t block_size = 16;
  kernels::TensorType type = kernels::TensorType::kF32;
};

}  // namespace strata::model
