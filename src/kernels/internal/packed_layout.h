// kernels/internal/packed_layout.h — the sizes and offsets of the
// row-interleaved layout (kernels.h, PackRows) that more than one file needs:
// packed.cpp writes the layout, internal/packed_matmul.inc reads it, and the
// traits table (type_traits.cpp) records each type's group block size. The
// full byte maps are in packed.cpp.
#pragma once

#include <cstddef>

#include "kernels/internal/blocks.h"

namespace strata::kernels::internal::packed_layout {

inline constexpr int kRows = 8;  // kernels::kPackRows

// Q8_0 and Q6_K: a group block is the 8 rows' plain blocks, rearranged.
inline constexpr size_t kQ8Block = kRows * sizeof(BlockQ8_0);
inline constexpr size_t kQ6KBlock = kRows * sizeof(BlockQ6_K);
inline constexpr size_t kQ6KCodes = 16 + 128;  // after the 8 d and the scale pairs

// Q4_K (kBits 4) and Q5_K (5): the 8 rows' d, dmin, unpacked scales and mins
// (160 bytes), Q5_K's qh chunks (256), then the codes.
inline constexpr size_t kK4Qh = 160;
template <int kBits>
inline constexpr size_t kK4Codes = kBits == 5 ? kK4Qh + kRows* kQK_K / 8 : kK4Qh;
template <int kBits>
inline constexpr size_t kK4Block = kK4Codes<kBits> + kRows* kQK_K / 2;

// Q4_0, Q4_1, Q5_0, Q5_1: the 8 rows' d, their m (types with a min), their
// fifth bits (types with them), then the codes; as many bytes as plain.
template <typename Block>
inline constexpr size_t kLegacyQh = 16 + (Block::kHasMin ? 16 : 0);
template <typename Block>
inline constexpr size_t kLegacyCodes = kLegacyQh<Block> + (Block::kBits == 5 ? 32 : 0);
template <typename Block>
inline constexpr size_t kLegacyBlock = kRows * sizeof(Block);

}  // namespace strata::kernels::internal::packed_layout
