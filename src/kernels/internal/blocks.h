// kernels/internal/blocks.h — byte layouts of the computable tensor types (private to
// kernels/), the facts about each layout that its decoders share, and the reference
// functions of each type.
//
// Every computable type has one `Block*` struct: its storage unit (one element for the
// float types), with
//   kSize          elements per block (sizeof is the bytes per block),
//   Act            the activation block its dot product takes (float: F32 activations),
// and, for the quantized families, the facts their decoders read (kBits, kOffset, kHasMin).
// Its reference functions are three overloads, defined in the family's file:
//   void Dequantize(const Block* src, int64_t n_blocks, float* dst);
//   void Quantize(const float* src, int64_t n_blocks, Block* dst);
//   float Dot(const Block* w, const Block::Act* a, int64_t n_blocks);   // the scalar reference
// kernels/internal/reference.h turns them into the traits table's entries.
// The authoritative description of the layouts is docs/formats/gguf.md; these structs match it.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

namespace strata::kernels::internal {

inline constexpr int kQK_K = 256;        // elements per k-quant super-block
inline constexpr int kKScaleBytes = 12;  // 8 six-bit scales + 8 six-bit mins (Q4_K, Q5_K)

#pragma pack(push, 1)
// Activation block (ActFormat::kQ8): x[i] ≈ d * q[i]; sum = Σ q[i].
struct ActBlockQ8 {
  float d;
  int32_t sum;
  int8_t q[32];
};
// Activation block (ActFormat::kQ8K): x[i] ≈ d·q[i]; bsums[g] = Σ q[16g .. 16g+15].
struct ActBlockQ8K {
  float d;
  int8_t q[kQK_K];
  int16_t bsums[kQK_K / 16];
};

// The float types: one element per block, F32 activations (float_types.cpp).
struct BlockF32 {
  static constexpr int kSize = 1;
  using Act = float;
  float v;
};
struct BlockF16 {
  static constexpr int kSize = 1;
  using Act = float;
  uint16_t h;  // IEEE half
};
struct BlockBF16 {
  static constexpr int kSize = 1;
  using Act = float;
  uint16_t h;  // bfloat16
};

// The 32-blocks (legacy_quants.cpp), Q8 activations. Element i < 32 has the code
// Code32(b, i): the int8 qs[i] (kBits 8), or the 4-bit nibble qs[i] & 15 for i < 16 and
// qs[i−16] >> 4 for i ≥ 16, plus (kBits 5) bit i of the little-endian 32-bit qh as the
// fifth bit (q = nibble + 16·bit), less kOffset. x[i] = d·code, plus m where kHasMin.
struct BlockQ8_0 {
  static constexpr int kSize = 32;
  static constexpr int kBits = 8;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = false;
  using Act = ActBlockQ8;
  uint16_t d;     // f16 scale
  int8_t qs[32];  // x = d * qs[i]
};
struct BlockQ4_0 {
  static constexpr int kSize = 32;
  static constexpr int kBits = 4;
  static constexpr int kOffset = 8;
  static constexpr bool kHasMin = false;
  using Act = ActBlockQ8;
  uint16_t d;          // f16 scale
  uint8_t qs[32 / 2];  // x[i] = d*((qs[i]&15)-8), x[i+16] = d*((qs[i]>>4)-8), i < 16
};
struct BlockQ4_1 {
  static constexpr int kSize = 32;
  static constexpr int kBits = 4;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  using Act = ActBlockQ8;
  uint16_t d;          // f16 scale
  uint16_t m;          // f16 min (offset)
  uint8_t qs[32 / 2];  // x[i] = d·q + m, q in [0, 15]
};
struct BlockQ5_0 {
  static constexpr int kSize = 32;
  static constexpr int kBits = 5;
  static constexpr int kOffset = 16;
  static constexpr bool kHasMin = false;
  using Act = ActBlockQ8;
  uint16_t d;          // f16 scale
  uint8_t qh[4];       // fifth bits, bit i for element i
  uint8_t qs[32 / 2];  // x[i] = d·(q − 16), q in [0, 31]
};
struct BlockQ5_1 {
  static constexpr int kSize = 32;
  static constexpr int kBits = 5;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  using Act = ActBlockQ8;
  uint16_t d;          // f16 scale
  uint16_t m;          // f16 min (offset)
  uint8_t qh[4];       // fifth bits, bit i for element i
  uint8_t qs[32 / 2];  // x[i] = d·q + m, q in [0, 31]
};

// The k-quants (kquants.cpp), Q8K activations.
// Q4_K: 8 sub-blocks of 32. Element i (sub-block j = i/32, l = i%32) is
// x = d·sc[j]·q − dmin·m[j], with the 4-bit q in qs[32·(j/2) + l], low nibble
// for even j, high nibble for odd j; sc[j], m[j] (6 bits each) packed in
// `scales` as UnpackScaleMinK4 reads them.
struct BlockQ4_K {
  static constexpr int kSize = kQK_K;
  static constexpr int kBits = 4;
  using Act = ActBlockQ8K;
  uint16_t d;                    // f16 super-block scale of the sub-block scales
  uint16_t dmin;                 // f16 super-block scale of the sub-block mins
  uint8_t scales[kKScaleBytes];  // sc[8], m[8], 6 bits each
  uint8_t qs[kQK_K / 2];         // low 4 bits of q
};
// Q5_K: as Q4_K, plus the fifth bit of q: bit j of qh[l] (q = nibble + 16·bit).
struct BlockQ5_K {
  static constexpr int kSize = kQK_K;
  static constexpr int kBits = 5;
  using Act = ActBlockQ8K;
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];  // high bit of q
  uint8_t qs[kQK_K / 2];  // low 4 bits of q, laid out as in Q4_K
};
// Q6_K: 16 sub-blocks of 16, x = d·scales[i/16]·(q − 32) with a 6-bit q. For
// element i, h = i/128, g = (i%128)/32, l = i%32: the low 4 bits of q are in
// ql[64h + 32·(g%2) + l] (low nibble for g < 2, high nibble for g ≥ 2), the
// high 2 bits are bits 2g..2g+1 of qh[32h + l].
struct BlockQ6_K {
  static constexpr int kSize = kQK_K;
  using Act = ActBlockQ8K;
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];  // signed 8-bit sub-block scales
  uint16_t d;                 // f16 super-block scale
};
#pragma pack(pop)

static_assert(sizeof(ActBlockQ8) == 40);
static_assert(sizeof(ActBlockQ8K) == 292);
static_assert(sizeof(BlockF32) == 4);
static_assert(sizeof(BlockF16) == 2);
static_assert(sizeof(BlockBF16) == 2);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

// ---------------------------------------------------------------------------
// Decoding helpers shared by the reference functions (and, where they fit, the SIMD
// kernels).

// The nibble (0..15) of element i < 32 of a legacy 4-/5-bit block's qs.
inline int Nibble32(const uint8_t* qs, int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; }
// The fifth bit (0 or 1) of element i < 32 in a Q5_0/Q5_1 qh.
inline int FifthBit32(const uint8_t* qh, int i) { return (qh[i / 8] >> (i % 8)) & 1; }
// Element i's code in a 32-block (see the 32-blocks above): x = d·code (+ m).
template <typename Block>
inline int Code32(const Block& b, int i) {
  if constexpr (Block::kBits == 8) {
    return b.qs[i];
  } else {
    int q = Nibble32(b.qs, i);
    if constexpr (Block::kBits == 5) q |= FifthBit32(b.qh, i) << 4;
    return q - Block::kOffset;
  }
}

// Sub-block j's 6-bit scale and min in the 12-byte array of Q4_K/Q5_K:
// j < 4: scale = scales[j] & 63, min = scales[j+4] & 63;
// j ≥ 4: scale = (scales[j+4] & 15) | (scales[j−4] >> 6) << 4,
//        min   = (scales[j+4] >> 4) | (scales[j]   >> 6) << 4.
struct ScaleMin {
  uint8_t scale;  // 0..63
  uint8_t min;    // 0..63
};
inline ScaleMin UnpackScaleMinK4(const uint8_t* scales, int j) {
  if (j < 4) {
    return {static_cast<uint8_t>(scales[j] & 63), static_cast<uint8_t>(scales[j + 4] & 63)};
  }
  return {static_cast<uint8_t>((scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4)),
          static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))};
}
// All 8 at once, as bytes of two words (what the SIMD kernels load):
// lo = [sc0..sc3, m0..m3], hi = [sc4..sc7, m4..m7].
struct ScaleMinLanesK4 {
  uint64_t lo, hi;
};
inline ScaleMinLanesK4 UnpackScaleMinLanesK4(const uint8_t* scales) {
  uint64_t b07;
  uint32_t b811;
  std::memcpy(&b07, scales, sizeof(b07));
  std::memcpy(&b811, scales + 8, sizeof(b811));
  const uint64_t u2 = b811;
  // lo: the low 6 bits of bytes 0..7. hi: the low nibbles of bytes 8..11 for
  // sc4..7, the high nibbles for m4..7, with the top 2 bits of bytes 0..3 (sc)
  // and 4..7 (m) above them.
  const uint64_t nib = (u2 | (u2 << 28)) & 0x0f0f0f0f0f0f0f0full;
  return {b07 & 0x3f3f3f3f3f3f3f3full, nib | (((b07 >> 6) & 0x0303030303030303ull) << 4)};
}
// The inverse: packs 8 scales and 8 mins (each 0..63).
inline std::array<uint8_t, kKScaleBytes> PackScaleMinK4(const ScaleMin (&sm)[8]) {
  std::array<uint8_t, kKScaleBytes> p{};
  for (int j = 0; j < 4; ++j) {
    p[static_cast<size_t>(j)] = sm[j].scale;
    p[static_cast<size_t>(j + 4)] = sm[j].min;
  }
  for (int j = 4; j < 8; ++j) {
    p[static_cast<size_t>(j + 4)] =
        static_cast<uint8_t>((sm[j].scale & 15) | ((sm[j].min & 15) << 4));
    p[static_cast<size_t>(j - 4)] |= static_cast<uint8_t>((sm[j].scale >> 4) << 6);
    p[static_cast<size_t>(j)] |= static_cast<uint8_t>((sm[j].min >> 4) << 6);
  }
  return p;
}
// Sub-block j's 32 codes (0..15 for Q4_K, 0..31 for Q5_K): the nibbles of
// qs[32·(j/2) ..] (low for even j), plus bit j of qh[l] as the fifth bit.
template <typename Block>
inline void SubBlockCodesK4(const Block& b, int j, uint8_t (&q)[32]) {
  const uint8_t* qs = b.qs + 32 * (j / 2);
  const int shift = 4 * (j % 2);
  for (int l = 0; l < 32; ++l) {
    int v = (qs[l] >> shift) & 15;
    if constexpr (Block::kBits == 5) v |= ((b.qh[l] >> j) & 1) << 4;
    q[l] = static_cast<uint8_t>(v);
  }
}
// Element i's 6-bit q (0..63) in a Q6_K block.
inline int QuantQ6K(const BlockQ6_K& b, int i) {
  const int h = i / 128, g = (i % 128) / 32, l = i % 32;
  const int low = (b.ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 15;
  const int high = (b.qh[32 * h + l] >> (2 * g)) & 3;
  return low | (high << 4);
}

// ---------------------------------------------------------------------------
// Reference functions, on n_blocks whole blocks (see the top for their shape).

// Float types (float_types.cpp): exact conversions (F16/BF16 quantize rounds to
// nearest even); the dot product adds w_i·x_i in element order.
void Dequantize(const BlockF32* src, int64_t n_blocks, float* dst);
void Dequantize(const BlockF16* src, int64_t n_blocks, float* dst);
void Dequantize(const BlockBF16* src, int64_t n_blocks, float* dst);
void Quantize(const float* src, int64_t n_blocks, BlockF32* dst);
void Quantize(const float* src, int64_t n_blocks, BlockF16* dst);
void Quantize(const float* src, int64_t n_blocks, BlockBF16* dst);
float Dot(const BlockF32* w, const float* x, int64_t n_blocks);
float Dot(const BlockF16* w, const float* x, int64_t n_blocks);
float Dot(const BlockBF16* w, const float* x, int64_t n_blocks);

// 32-blocks (legacy_quants.cpp). Dequantize: d·code (+ m), one rounding at most.
// Quantize: Q8_0 and Q4_0 round to nearest against the exact scale from the
// largest magnitude, as GGUF converters do (Q8_0: d = max|x|/127; Q4_0: the
// element of largest magnitude maps to −8, d = v/−8); Q5_0 maps it to −16 and
// Q4_1/Q5_1 span each block's [min, max] (d = (max − min)/nmax, m = min), both
// rounding to nearest against the stored f16 scale (and min). Inputs must be
// finite; Q4_1/Q5_0/Q5_1 scales beyond the f16 range saturate at ±65504.
// Dot: per block the exact integer Σ code·a, then acc += float(Σ)·(d·da) and,
// with a min, acc += m·(da·float(Σ a)), block by block.
void Dequantize(const BlockQ8_0* src, int64_t n_blocks, float* dst);
void Dequantize(const BlockQ4_0* src, int64_t n_blocks, float* dst);
void Dequantize(const BlockQ4_1* src, int64_t n_blocks, float* dst);
void Dequantize(const BlockQ5_0* src, int64_t n_blocks, float* dst);
void Dequantize(const BlockQ5_1* src, int64_t n_blocks, float* dst);
void Quantize(const float* src, int64_t n_blocks, BlockQ8_0* dst);
void Quantize(const float* src, int64_t n_blocks, BlockQ4_0* dst);
void Quantize(const float* src, int64_t n_blocks, BlockQ4_1* dst);
void Quantize(const float* src, int64_t n_blocks, BlockQ5_0* dst);
void Quantize(const float* src, int64_t n_blocks, BlockQ5_1* dst);
float Dot(const BlockQ8_0* w, const ActBlockQ8* a, int64_t n_blocks);
float Dot(const BlockQ4_0* w, const ActBlockQ8* a, int64_t n_blocks);
float Dot(const BlockQ4_1* w, const ActBlockQ8* a, int64_t n_blocks);
float Dot(const BlockQ5_0* w, const ActBlockQ8* a, int64_t n_blocks);
float Dot(const BlockQ5_1* w, const ActBlockQ8* a, int64_t n_blocks);

// K-quants (kquants.cpp). Dequantize: exact reconstruction as docs/formats/gguf.md
// defines it. Quantize: deterministic least-squares quantizers; inputs must be
// finite; magnitudes beyond what the f16 super-block scales can express saturate.
// Dot: exact integer sums per super-block, then float steps in block order (kquants.cpp).
void Dequantize(const BlockQ4_K* src, int64_t n_blocks, float* dst);
void Dequantize(const BlockQ5_K* src, int64_t n_blocks, float* dst);
void Dequantize(const BlockQ6_K* src, int64_t n_blocks, float* dst);
void Quantize(const float* src, int64_t n_blocks, BlockQ4_K* dst);
void Quantize(const float* src, int64_t n_blocks, BlockQ5_K* dst);
void Quantize(const float* src, int64_t n_blocks, BlockQ6_K* dst);
float Dot(const BlockQ4_K* w, const ActBlockQ8K* a, int64_t n_blocks);
float Dot(const BlockQ5_K* w, const ActBlockQ8K* a, int64_t n_blocks);
float Dot(const BlockQ6_K* w, const ActBlockQ8K* a, int64_t n_blocks);

}  // namespace strata::kernels::internal
