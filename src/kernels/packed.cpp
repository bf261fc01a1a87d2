// The row-interleaved ("packed") weight layout (kernels.h, PackRows): the
// packers and the scalar entry for packed weights. The SIMD kernels that read
// the layout are in the ISA files (internal/packed_matmul.inc).
#include <array>
#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/internal/blocks.h"
#include "kernels/internal/kernels_impl.h"
#include "kernels/type_traits.h"
#include "util/status.h"

namespace strata::kernels {

namespace internal {
namespace {

constexpr int kRows = static_cast<int>(kPackRows);

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

// Q4_K: one super-block of a group (1,184 bytes):
//   [0, 16)      d of rows 0..7 (f16)
//   [16, 32)     dmin of rows 0..7
//   [32, 96)     sc[j][i]: byte 32 + 8j + i, sub-block j's 6-bit scale of row i
//   [96, 160)    m of sub-blocks 2p, 2p+1 of row i at bytes 96 + 16p + 2i, +1
//   [160, 1184)  per sub-block pair p and chunk c, 32 bytes: row i's
//                qs[32p + 4c .. 32p + 4c + 3] at 4i (low nibbles: sub-block 2p)
// The scales are the one part not copied as they are: the file's 12 bytes of
// 6-bit fields become 16 bytes, and go back through PackScaleMinK4.
template <bool kPack>
void MapQ4_K(const Mover<kPack>& move, int i) {
  move(2 * i, offsetof(BlockQ4_K, d), 2);
  move(16 + 2 * i, offsetof(BlockQ4_K, dmin), 2);
  for (int p = 0; p < 4; ++p) {
    for (int c = 0; c < 8; ++c) {
      move(160 + 32 * (8 * p + c) + 4 * i, offsetof(BlockQ4_K, qs) + 32 * p + 4 * c, 4);
    }
  }
  // Where sub-block j's scale and min of this row go.
  auto scale_at = [i](int j) { return static_cast<size_t>(32 + 8 * j + i); };
  auto min_at = [i](int j) { return static_cast<size_t>(96 + 16 * (j / 2) + 2 * i + j % 2); };
  if constexpr (kPack) {
    const uint8_t* scales = move.from + offsetof(BlockQ4_K, scales);
    for (int j = 0; j < 8; ++j) {
      const ScaleMin sm = UnpackScaleMinK4(scales, j);
      move.to[scale_at(j)] = sm.scale;
      move.to[min_at(j)] = sm.min;
    }
  } else {
    ScaleMin sm[8];
    for (int j = 0; j < 8; ++j) sm[j] = {move.from[scale_at(j)], move.from[min_at(j)]};
    const std::array<uint8_t, kKScaleBytes> scales = PackScaleMinK4(sm);
    std::memcpy(move.to + offsetof(BlockQ4_K, scales), scales.data(), scales.size());
  }
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

constexpr size_t kQ8GroupBlock = kRows * sizeof(BlockQ8_0);
constexpr size_t kQ4KGroupBlock = 160 + kRows * kQK_K / 2;
constexpr size_t kQ6KGroupBlock = kRows * sizeof(BlockQ6_K);

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

}  // namespace strata::kernels
