// The row-interleaved ("packed") weight layout (kernels.h, PackRows): the
// packers and the scalar entry for packed weights. The SIMD kernels that read
// the layout are in the ISA files (internal/packed_matmul.inc).
#include <array>
#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/internal/blocks.h"
#include "kernels/internal/kernels_impl.h"
#include "kernels/internal/packed_layout.h"
#include "kernels/type_traits.h"
#include "util/status.h"

namespace strata::kernels {

namespace internal {
namespace {

constexpr int kRows = packed_layout::kRows;
static_assert(kRows == kPackRows);
using packed_layout::kLegacyCodes;
using packed_layout::kLegacyQh;

// Each packable type's byte map is written once, for both directions: for
// row i of a group and one block, MapX(move, i) calls move(packed, plain,
// bytes) for every run the two layouts share (offsets within the group's
// packed block and within the row's plain block). Mover copies a run plain →
// packed when packing, back when unpacking.
template <bool kPack>
struct Mover {
  const uint8_t* from;  // the plain block when packing, the packed group block when unpacking
  uint8_t* to;          // the other one
  void operator()(size_t packed, size_t plain, size_t bytes) const {
    if constexpr (kPack) {
      std::memcpy(to + packed, from + plain, bytes);
    } else {
      std::memcpy(to + plain, from + packed, bytes);
    }
  }
};

// Q8_0: one block of a group is the 8 rows' scales, then chunk c = elements
// 4c..4c+3 of each row in turn.
template <bool kPack>
void MapQ8_0(const Mover<kPack>& move, int i) {
  move(2 * i, offsetof(BlockQ8_0, d), 2);
  for (int c = 0; c < 8; ++c) {
    move(2 * kRows + 32 * c + 4 * i, offsetof(BlockQ8_0, qs) + 4 * c, 4);
  }
}

// The 6-bit scales and mins of Q4_K and Q5_K (at `scales` in the plain block):
// sub-block j's scale of row i at byte 32 + 8j + i of the group block, its min
// at 96 + 16·(j/2) + 2i + j%2. The one part not copied as it is: the file's
// 12 bytes of 6-bit fields become 16 bytes, and go back through PackScaleMinK4.
template <bool kPack>
void MoveScaleMinK4(const Mover<kPack>& move, int i, size_t scales_offset) {
  auto scale_at = [i](int j) { return static_cast<size_t>(32 + 8 * j + i); };
  auto min_at = [i](int j) { return static_cast<size_t>(96 + 16 * (j / 2) + 2 * i + j % 2); };
  if constexpr (kPack) {
    const uint8_t* scales = move.from + scales_offset;
    for (int j = 0; j < 8; ++j) {
      const ScaleMin sm = UnpackScaleMinK4(scales, j);
      move.to[scale_at(j)] = sm.scale;
      move.to[min_at(j)] = sm.min;
    }
  } else {
    ScaleMin sm[8];
    for (int j = 0; j < 8; ++j) sm[j] = {move.from[scale_at(j)], move.from[min_at(j)]};
    const std::array<uint8_t, kKScaleBytes> scales = PackScaleMinK4(sm);
    std::memcpy(move.to + scales_offset, scales.data(), scales.size());
  }
}

// Q4_K: one super-block of a group (1,184 bytes):
//   [0, 16)      d of rows 0..7 (f16)
//   [16, 32)     dmin of rows 0..7
//   [32, 96)     sc[j][i]: byte 32 + 8j + i, sub-block j's 6-bit scale of row i
//   [96, 160)    m of sub-blocks 2p, 2p+1 of row i at bytes 96 + 16p + 2i, +1
//   [160, 1184)  per sub-block pair p and chunk c, 32 bytes: row i's
//                qs[32p + 4c .. 32p + 4c + 3] at 4i (low nibbles: sub-block 2p)
// (The scales and mins: MoveScaleMinK4.)
template <bool kPack>
void MapQ4_K(const Mover<kPack>& move, int i) {
  move(2 * i, offsetof(BlockQ4_K, d), 2);
  move(16 + 2 * i, offsetof(BlockQ4_K, dmin), 2);
  for (int p = 0; p < 4; ++p) {
    for (int c = 0; c < 8; ++c) {
      move(packed_layout::kK4Codes<4> + 32 * (8 * p + c) + 4 * i,
           offsetof(BlockQ4_K, qs) + 32 * p + 4 * c, 4);
    }
  }
  MoveScaleMinK4<kPack>(move, i, offsetof(BlockQ4_K, scales));
}

// Q6_K: one super-block of a group (1,680 bytes, as plain):
//   [0, 16)       d of rows 0..7 (f16)
//   [16, 144)     scales of sub-blocks 2p, 2p+1 of row i at bytes 16 + 16p + 2i, +1
//   [144, 1680)   per half h (768 bytes), in the order a kernel first reads
//                 them: row i's ql[64h + 4c .. +3] at 32c + 4i, its
//                 qh[32h + 4c .. +3] at 256 + 32c + 4i, its ql[64h + 32 + 4c ..]
//                 at 512 + 32c + 4i
template <bool kPack>
void MapQ6_K(const Mover<kPack>& move, int i) {
  move(2 * i, offsetof(BlockQ6_K, d), 2);
  for (int j = 0; j < 16; ++j)
    move(16 + 16 * (j / 2) + 2 * i + j % 2, offsetof(BlockQ6_K, scales) + j, 1);
  for (int h = 0; h < 2; ++h) {
    const size_t half = 144 + 768 * static_cast<size_t>(h);
    for (int c = 0; c < 8; ++c) {
      move(half + 32 * c + 4 * i, offsetof(BlockQ6_K, ql) + 64 * h + 4 * c, 4);
      move(half + 256 + 32 * c + 4 * i, offsetof(BlockQ6_K, qh) + 32 * h + 4 * c, 4);
      move(half + 512 + 32 * c + 4 * i, offsetof(BlockQ6_K, ql) + 64 * h + 32 + 4 * c, 4);
    }
  }
}

// The other 32-blocks (Q4_0, Q4_1, Q5_0, Q5_1): one block of a group (as
// plain, 8 · sizeof(Block) bytes) is
//   the 8 rows' f16 d (16 bytes), their f16 m where the type has a min (16),
//   the high bits where the type has a fifth bit (row i's at 4i; 32 bytes),
//   then chunk c < 4 at 32c, row i's 4 bytes at 4i.
// Byte e of chunk c relates elements 4c + e ("low", l) and 16 + 4c + e
// ("high", h). 4-bit types keep the file's byte qs[4c + e]: l's nibble low,
// h's high. 5-bit types hold the 5-bit codes q = nibble + 16 × fifth bit:
// l's whole q in bits 0..4 and the low 3 bits of h's in bits 5..7; h's
// bits 3 and 4 are bits 2c and 2c + 1 of the high bits' byte e. A kernel
// then takes l's codes with one AND, h's with two shifts, two ANDs and an OR.
template <bool kPack, typename Block>
void MoveFiveBitCodes(const Mover<kPack>& move, int i) {
  const size_t high = kLegacyQh<Block> + 4 * static_cast<size_t>(i);
  const size_t codes = kLegacyCodes<Block> + 4 * static_cast<size_t>(i);
  if constexpr (kPack) {
    const uint8_t* qs = move.from + offsetof(Block, qs);
    uint32_t qh = 0;
    std::memcpy(&qh, move.from + offsetof(Block, qh), 4);
    auto code = [&](int k) {
      const int nibble = k < 16 ? qs[k] & 0x0F : qs[k - 16] >> 4;
      return static_cast<uint8_t>(nibble | static_cast<int>((qh >> k) & 1u) << 4);
    };
    for (int e = 0; e < 4; ++e) {
      uint8_t bits = 0;
      for (int c = 0; c < 4; ++c) {
        const uint8_t l = code(4 * c + e), h = code(16 + 4 * c + e);
        move.to[codes + 32 * static_cast<size_t>(c) + static_cast<size_t>(e)] =
            static_cast<uint8_t>(l | (h & 7) << 5);
        bits = static_cast<uint8_t>(bits | (h >> 3) << (2 * c));
      }
      move.to[high + static_cast<size_t>(e)] = bits;
    }
  } else {
    uint8_t* qs = move.to + offsetof(Block, qs);
    uint32_t qh = 0;
    for (int e = 0; e < 4; ++e) {
      const uint8_t bits = move.from[high + static_cast<size_t>(e)];
      for (int c = 0; c < 4; ++c) {
        const uint8_t byte =
            move.from[codes + 32 * static_cast<size_t>(c) + static_cast<size_t>(e)];
        const int l = byte & 0x1F;
        const int h = byte >> 5 | ((bits >> (2 * c)) & 3) << 3;
        const int k = 4 * c + e;
        qs[k] = static_cast<uint8_t>((l & 0x0F) | (h & 0x0F) << 4);
        qh |= static_cast<uint32_t>(l >> 4) << k | static_cast<uint32_t>(h >> 4) << (16 + k);
      }
    }
    std::memcpy(move.to + offsetof(Block, qh), &qh, 4);
  }
}

template <typename Block, bool kPack>
void MapLegacy32(const Mover<kPack>& move, int i) {
  move(2 * i, offsetof(Block, d), 2);
  if constexpr (Block::kHasMin) move(16 + 2 * i, offsetof(Block, m), 2);
  if constexpr (Block::kBits == 5) {
    MoveFiveBitCodes<kPack, Block>(move, i);
  } else {
    for (int c = 0; c < 4; ++c)
      move(kLegacyCodes<Block> + 32 * c + 4 * i, offsetof(Block, qs) + 4 * c, 4);
  }
}

// Q5_K: one super-block of a group (1,440 bytes) is Q4_K's with the fifth
// bits after the scales and mins:
//   [0, 160)      as Q4_K (d, dmin, the unpacked scales and mins)
//   [160, 416)    chunk c < 8 = row i's qh[4c .. 4c + 3] at 160 + 32c + 4i
//                 (bit j of qh[l]: element 32j + l)
//   [416, 1440)   the codes, as Q4_K's [160, 1184)
template <bool kPack>
void MapQ5_K(const Mover<kPack>& move, int i) {
  move(2 * i, offsetof(BlockQ5_K, d), 2);
  move(16 + 2 * i, offsetof(BlockQ5_K, dmin), 2);
  for (int c = 0; c < 8; ++c)
    move(packed_layout::kK4Qh + 32 * c + 4 * i, offsetof(BlockQ5_K, qh) + 4 * c, 4);
  for (int p = 0; p < 4; ++p) {
    for (int c = 0; c < 8; ++c) {
      move(packed_layout::kK4Codes<5> + 32 * (8 * p + c) + 4 * i,
           offsetof(BlockQ5_K, qs) + 32 * p + 4 * c, 4);
    }
  }
  MoveScaleMinK4<kPack>(move, i, offsetof(BlockQ5_K, scales));
}

// Packs (kPack) or unpacks n_rows rows of n elements: Map per row and block,
// group blocks of kGroupBlock bytes.
template <typename Block, size_t kGroupBlock, bool kPack, void (*Map)(const Mover<kPack>&, int)>
void Convert(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  const int64_t nb = n / Block::kSize;
  for (int64_t g = 0; g < n_rows / kRows; ++g) {
    for (int i = 0; i < kRows; ++i) {
      for (int64_t b = 0; b < nb; ++b) {
        const size_t plain =
            static_cast<size_t>(g * kRows + i) * row_bytes + static_cast<size_t>(b) * sizeof(Block);
        const size_t packed = static_cast<size_t>(g * nb + b) * kGroupBlock;
        if constexpr (kPack) {
          Map({src + plain, dst + packed}, i);
        } else {
          Map({src + packed, dst + plain}, i);
        }
      }
    }
  }
}

constexpr size_t kQ8GroupBlock = packed_layout::kQ8Block;
constexpr size_t kQ4KGroupBlock = packed_layout::kK4Block<4>;
constexpr size_t kQ6KGroupBlock = packed_layout::kQ6KBlock;
constexpr size_t kQ5KGroupBlock = packed_layout::kK4Block<5>;

}  // namespace

void PackQ8_0(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  Convert<BlockQ8_0, kQ8GroupBlock, true, MapQ8_0<true>>(src, row_bytes, n_rows, n, dst);
}
void UnpackQ8_0(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  Convert<BlockQ8_0, kQ8GroupBlock, false, MapQ8_0<false>>(src, row_bytes, n_rows, n, dst);
}
void PackQ4_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  Convert<BlockQ4_K, kQ4KGroupBlock, true, MapQ4_K<true>>(src, row_bytes, n_rows, n, dst);
}
void UnpackQ4_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  Convert<BlockQ4_K, kQ4KGroupBlock, false, MapQ4_K<false>>(src, row_bytes, n_rows, n, dst);
}
void PackQ6_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  Convert<BlockQ6_K, kQ6KGroupBlock, true, MapQ6_K<true>>(src, row_bytes, n_rows, n, dst);
}
void UnpackQ6_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  Convert<BlockQ6_K, kQ6KGroupBlock, false, MapQ6_K<false>>(src, row_bytes, n_rows, n, dst);
}

template <typename Block>
void PackLegacy32(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  Convert<Block, packed_layout::kLegacyBlock<Block>, true, MapLegacy32<Block, true>>(
      src, row_bytes, n_rows, n, dst);
}
template <typename Block>
void UnpackLegacy32(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  Convert<Block, packed_layout::kLegacyBlock<Block>, false, MapLegacy32<Block, false>>(
      src, row_bytes, n_rows, n, dst);
}
template void PackLegacy32<BlockQ4_0>(const uint8_t*, size_t, int64_t, int64_t, uint8_t*);
template void PackLegacy32<BlockQ4_1>(const uint8_t*, size_t, int64_t, int64_t, uint8_t*);
template void PackLegacy32<BlockQ5_0>(const uint8_t*, size_t, int64_t, int64_t, uint8_t*);
template void PackLegacy32<BlockQ5_1>(const uint8_t*, size_t, int64_t, int64_t, uint8_t*);
template void UnpackLegacy32<BlockQ4_0>(const uint8_t*, size_t, int64_t, int64_t, uint8_t*);
template void UnpackLegacy32<BlockQ4_1>(const uint8_t*, size_t, int64_t, int64_t, uint8_t*);
template void UnpackLegacy32<BlockQ5_0>(const uint8_t*, size_t, int64_t, int64_t, uint8_t*);
template void UnpackLegacy32<BlockQ5_1>(const uint8_t*, size_t, int64_t, int64_t, uint8_t*);
void PackQ5_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  Convert<BlockQ5_K, kQ5KGroupBlock, true, MapQ5_K<true>>(src, row_bytes, n_rows, n, dst);
}
void UnpackQ5_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  Convert<BlockQ5_K, kQ5KGroupBlock, false, MapQ5_K<false>>(src, row_bytes, n_rows, n, dst);
}

void MatMulPackedScalar(const MatMulArgs& a) {
  const TypeTraits* t = FindTypeTraits(a.w_type);
  STRATA_CHECK_MSG(t != nullptr && t->unpack != nullptr,
                   "matmul: packed weights of a type without a packed layout");
  STRATA_CHECK_MSG(a.row_begin % kPackRows == 0 && a.row_end % kPackRows == 0,
                   "matmul: packed rows must start and end on a group");
  const size_t plain_row = RowBytes(a.w_type, a.n);
  std::vector<uint8_t> plain(static_cast<size_t>(kPackRows) * plain_row);
  MatMulArgs g = a;
  g.packed = false;
  g.w = plain.data();
  g.row_begin = 0;
  g.row_end = kPackRows;
  g.w_row_bytes = plain_row;
  for (int64_t r = a.row_begin; r < a.row_end; r += kPackRows) {
    t->unpack(a.w + static_cast<size_t>(r) * a.w_row_bytes, plain_row, kPackRows, a.n,
              plain.data());
    g.out = a.out + r;
    t->matmul[static_cast<size_t>(Isa::kScalar)](g);
  }
}

}  // namespace internal

bool IsPackable(TensorType t) {
  const TypeTraits* row = FindTypeTraits(t);
  return row != nullptr && row->pack != nullptr;
}

size_t PackedRowBytes(TensorType t, int64_t n) {
  const TypeTraits* row = FindTypeTraits(t);
  STRATA_CHECK_MSG(row != nullptr && row->pack != nullptr, "PackedRowBytes: type is not packable");
  return static_cast<size_t>(n / row->block_size) * static_cast<size_t>(row->packed_block_bytes) /
         static_cast<size_t>(kPackRows);
}

void PackRows(TensorType t, const uint8_t* w, size_t row_bytes, int64_t n_rows, int64_t n,
              uint8_t* out) {
  const TypeTraits* row = FindTypeTraits(t);
  STRATA_CHECK_MSG(row != nullptr && row->pack != nullptr, "PackRows: type is not packable");
  STRATA_CHECK_MSG(n_rows % kPackRows == 0, "PackRows: rows must be a multiple of kPackRows");
  row->pack(w, row_bytes, n_rows, n, out);
}

void UnpackRows(TensorType t, const uint8_t* packed, size_t row_bytes, int64_t n_rows, int64_t n,
                uint8_t* out) {
  const TypeTraits* row = FindTypeTraits(t);
  STRATA_CHECK_MSG(row != nullptr && row->unpack != nullptr, "UnpackRows: type is not packable");
  STRATA_CHECK_MSG(n_rows % kPackRows == 0, "UnpackRows: rows must be a multiple of kPackRows");
  row->unpack(packed, row_bytes, n_rows, n, out);
}

void DequantizePackedRow(TensorType t, const uint8_t* group, int64_t n, int64_t row, float* dst) {
  STRATA_CHECK_MSG(row >= 0 && row < kPackRows, "DequantizePackedRow: row outside the group");
  const size_t plain_row = RowBytes(t, n);
  std::vector<uint8_t> plain(plain_row * static_cast<size_t>(kPackRows));
  UnpackRows(t, group, plain_row, kPackRows, n, plain.data());
  DequantizeRow(t, plain.data() + static_cast<size_t>(row) * plain_row, n, dst);
}

}  // namespace strata::kernels
