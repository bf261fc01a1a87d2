// The row-interleaved ("packed") weight layout (kernels.h, PackRows): the
// packers and the scalar entry for packed weights. The SIMD kernels that read
// the layout are in the ISA files (internal/packed_matmul.inc).
#include <array>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/internal/blocks.h"
#include "kernels/internal/kernels_impl.h"
#include "kernels/type_traits.h"
#include "util/status.h"

namespace strata::kernels {

namespace internal {
namespace {

constexpr int kRows = static_cast<int>(kPackRows);

// Q8_0: one block of a group is the 8 rows' scales, then chunk c = elements
// 4c..4c+3 of each row in turn.
constexpr size_t kQ8GroupBlock = kRows * sizeof(BlockQ8_0);
constexpr size_t kQ8ScaleBytes = kRows * sizeof(uint16_t);
// Byte of the group's block b holding element e of row i.
constexpr size_t Q8CodeAt(int64_t b, int i, int e) {
  return static_cast<size_t>(b) * kQ8GroupBlock + kQ8ScaleBytes +
         static_cast<size_t>(32 * (e / 4) + 4 * i + e % 4);
}

// Q4_K: one super-block of a group (kQ4KGroupBlock bytes):
//   [0, 16)      d of rows 0..7 (f16)
//   [16, 32)     dmin of rows 0..7
//   [32, 96)     sc[j][i]: byte 32 + 8j + i, sub-block j's 6-bit scale of row i
//   [96, 160)    m of sub-blocks 2p, 2p+1 of row i at bytes 96 + 16p + 2i, +1
//   [160, 1184)  per sub-block pair p and chunk c, 32 bytes: row i's
//                qs[32p + 4c .. 32p + 4c + 3] at 4i (low nibbles: sub-block 2p)
constexpr size_t kQ4KGroupBlock = 160 + kRows * kQK_K / 2;
constexpr size_t kQ4KCodes = 160;

// Q6_K: one super-block of a group (kQ6KGroupBlock bytes, as plain):
//   [0, 16)       d of rows 0..7 (f16)
//   [16, 144)     scales of sub-blocks 2p, 2p+1 of row i at bytes 16 + 16p + 2i, +1
//   [144, 1680)   per half h (768 bytes), in the order a kernel first reads
//                 them: row i's ql[64h + 4c .. +3] at 32c + 4i, its
//                 qh[32h + 4c .. +3] at 256 + 32c + 4i, its ql[64h + 32 + 4c ..]
//                 at 512 + 32c + 4i
constexpr size_t kQ6KGroupBlock = kRows * sizeof(BlockQ6_K);
constexpr size_t kQ6KCodes = 16 + 128;
constexpr size_t Q6KQlAt(int h, int k, int c, int i) {
  return kQ6KCodes + static_cast<size_t>(768 * h + 512 * k + 32 * c + 4 * i);
}
constexpr size_t Q6KQhAt(int h, int c, int i) {
  return kQ6KCodes + static_cast<size_t>(768 * h + 256 + 32 * c + 4 * i);
}

// Row i of plain group g (const or not, as `base` is).
template <typename Block, typename Byte>
auto* PlainRow(Byte* base, size_t row_bytes, int64_t g, int i) {
  using Out = std::conditional_t<std::is_const_v<Byte>, const Block, Block>;
  return reinterpret_cast<Out*>(base + static_cast<size_t>(g * kRows + i) * row_bytes);
}

}  // namespace

void PackQ8_0(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  const int64_t nb = n / 32;
  for (int64_t g = 0; g < n_rows / kRows; ++g) {
    uint8_t* group = dst + static_cast<size_t>(g) * nb * kQ8GroupBlock;
    for (int i = 0; i < kRows; ++i) {
      const BlockQ8_0* row = PlainRow<BlockQ8_0>(src, row_bytes, g, i);
      for (int64_t b = 0; b < nb; ++b) {
        std::memcpy(group + b * kQ8GroupBlock + i * sizeof(uint16_t), &row[b].d, sizeof(uint16_t));
        for (int c = 0; c < 8; ++c)
          std::memcpy(group + Q8CodeAt(b, i, 4 * c), row[b].qs + 4 * c, 4);
      }
    }
  }
}

void UnpackQ8_0(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  const int64_t nb = n / 32;
  for (int64_t g = 0; g < n_rows / kRows; ++g) {
    const uint8_t* group = src + static_cast<size_t>(g) * nb * kQ8GroupBlock;
    for (int i = 0; i < kRows; ++i) {
      BlockQ8_0* row = PlainRow<BlockQ8_0>(dst, row_bytes, g, i);
      for (int64_t b = 0; b < nb; ++b) {
        std::memcpy(&row[b].d, group + b * kQ8GroupBlock + i * sizeof(uint16_t), sizeof(uint16_t));
        for (int c = 0; c < 8; ++c)
          std::memcpy(row[b].qs + 4 * c, group + Q8CodeAt(b, i, 4 * c), 4);
      }
    }
  }
}

void PackQ4_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  const int64_t nb = n / kQK_K;
  for (int64_t g = 0; g < n_rows / kRows; ++g) {
    uint8_t* group = dst + static_cast<size_t>(g) * nb * kQ4KGroupBlock;
    for (int i = 0; i < kRows; ++i) {
      const BlockQ4_K* row = PlainRow<BlockQ4_K>(src, row_bytes, g, i);
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = group + b * kQ4KGroupBlock;
        std::memcpy(blk + 2 * i, &row[b].d, 2);
        std::memcpy(blk + 16 + 2 * i, &row[b].dmin, 2);
        for (int j = 0; j < 8; ++j) {
          const ScaleMin sm = UnpackScaleMinK4(row[b].scales, j);
          blk[32 + 8 * j + i] = sm.scale;
          blk[96 + 16 * (j / 2) + 2 * i + j % 2] = sm.min;
        }
        for (int p = 0; p < 4; ++p) {
          for (int c = 0; c < 8; ++c) {
            std::memcpy(blk + kQ4KCodes + 32 * (8 * p + c) + 4 * i, row[b].qs + 32 * p + 4 * c, 4);
          }
        }
      }
    }
  }
}

void UnpackQ4_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  const int64_t nb = n / kQK_K;
  for (int64_t g = 0; g < n_rows / kRows; ++g) {
    const uint8_t* group = src + static_cast<size_t>(g) * nb * kQ4KGroupBlock;
    for (int i = 0; i < kRows; ++i) {
      BlockQ4_K* row = PlainRow<BlockQ4_K>(dst, row_bytes, g, i);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = group + b * kQ4KGroupBlock;
        std::memcpy(&row[b].d, blk + 2 * i, 2);
        std::memcpy(&row[b].dmin, blk + 16 + 2 * i, 2);
        ScaleMin sm[8];
        for (int j = 0; j < 8; ++j) {
          sm[j].scale = blk[32 + 8 * j + i];
          sm[j].min = blk[96 + 16 * (j / 2) + 2 * i + j % 2];
        }
        const std::array<uint8_t, kKScaleBytes> scales = PackScaleMinK4(sm);
        std::memcpy(row[b].scales, scales.data(), scales.size());
        for (int p = 0; p < 4; ++p) {
          for (int c = 0; c < 8; ++c) {
            std::memcpy(row[b].qs + 32 * p + 4 * c, blk + kQ4KCodes + 32 * (8 * p + c) + 4 * i, 4);
          }
        }
      }
    }
  }
}

void PackQ6_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  const int64_t nb = n / kQK_K;
  for (int64_t g = 0; g < n_rows / kRows; ++g) {
    uint8_t* group = dst + static_cast<size_t>(g) * nb * kQ6KGroupBlock;
    for (int i = 0; i < kRows; ++i) {
      const BlockQ6_K* row = PlainRow<BlockQ6_K>(src, row_bytes, g, i);
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = group + b * kQ6KGroupBlock;
        std::memcpy(blk + 2 * i, &row[b].d, 2);
        for (int j = 0; j < 16; ++j) {
          std::memcpy(blk + 16 + 16 * (j / 2) + 2 * i + j % 2, &row[b].scales[j], 1);
        }
        for (int h = 0; h < 2; ++h) {
          for (int c = 0; c < 8; ++c) {
            for (int k = 0; k < 2; ++k) {
              std::memcpy(blk + Q6KQlAt(h, k, c, i), row[b].ql + 64 * h + 32 * k + 4 * c, 4);
            }
            std::memcpy(blk + Q6KQhAt(h, c, i), row[b].qh + 32 * h + 4 * c, 4);
          }
        }
      }
    }
  }
}

void UnpackQ6_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst) {
  const int64_t nb = n / kQK_K;
  for (int64_t g = 0; g < n_rows / kRows; ++g) {
    const uint8_t* group = src + static_cast<size_t>(g) * nb * kQ6KGroupBlock;
    for (int i = 0; i < kRows; ++i) {
      BlockQ6_K* row = PlainRow<BlockQ6_K>(dst, row_bytes, g, i);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = group + b * kQ6KGroupBlock;
        std::memcpy(&row[b].d, blk + 2 * i, 2);
        for (int j = 0; j < 16; ++j) {
          std::memcpy(&row[b].scales[j], blk + 16 + 16 * (j / 2) + 2 * i + j % 2, 1);
        }
        for (int h = 0; h < 2; ++h) {
          for (int c = 0; c < 8; ++c) {
            for (int k = 0; k < 2; ++k) {
              std::memcpy(row[b].ql + 64 * h + 32 * k + 4 * c, blk + Q6KQlAt(h, k, c, i), 4);
            }
            std::memcpy(row[b].qh + 32 * h + 4 * c, blk + Q6KQhAt(h, c, i), 4);
          }
        }
      }
    }
  }
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
