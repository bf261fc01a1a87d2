// The legacy 32-blocks: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (layouts in
// kernels/internal/blocks.h and docs/formats/gguf.md): their reference codecs and
// dot products. Real Q4_K_M/Q5_K_M files use Q5_0/Q5_1 for the tensors whose rows
// are not whole 256-blocks; older files use Q4_1; Q8_0 and Q4_0 are the common
// uniform quantizations.
//
// Q8_0 and Q4_0 quantize as GGUF converters do (against the exact scale). The
// Q4_1/Q5_0/Q5_1 quantizers round to nearest (ties to even) against the f16
// values actually stored, not the exact ones, so the stored scale's rounding does
// not add a systematic error to every element; results are clamped to the code range.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/internal/blocks.h"
#include "kernels/tensor_type.h"

namespace strata::kernels::internal {
namespace {

constexpr int kBlock = 32;
constexpr float kHalfMax = 65504.0f;  // largest finite f16

// f16 bits of v, saturated at ±65504 instead of overflowing to infinity.
uint16_t SaturatingHalf(float v) {
  return FloatToHalf(v > kHalfMax ? kHalfMax : (v < -kHalfMax ? -kHalfMax : v));
}

int ClampRound(float v, int hi) {
  const float r = std::nearbyint(v);
  if (!(r > 0.0f)) return 0;  // NaN included
  return r < static_cast<float>(hi) ? static_cast<int>(r) : hi;
}

// Affine blocks (Q4_1, Q5_1): x ≈ d·q + m, q in [0, nmax]. Writes the f16 d and
// m and the 32 codes.
void QuantizeAffine(const float* x, int nmax, uint16_t* d_bits, uint16_t* m_bits, uint8_t* q) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < kBlock; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  *d_bits = SaturatingHalf((hi - lo) / static_cast<float>(nmax));
  *m_bits = SaturatingHalf(lo);
  const float d = HalfToFloat(*d_bits), m = HalfToFloat(*m_bits);
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < kBlock; ++i) q[i] = static_cast<uint8_t>(ClampRound((x[i] - m) * id, nmax));
}

// Packs 32 codes (< 16, or < 32 with a fifth bit) into nibbles and a qh word.
void PackNibbles(const uint8_t* q, uint8_t* qs) {
  for (int i = 0; i < kBlock / 2; ++i) {
    qs[i] = static_cast<uint8_t>((q[i] & 15) | ((q[i + kBlock / 2] & 15) << 4));
  }
}
void PackFifthBits(const uint8_t* q, uint8_t* qh) {
  for (int b = 0; b < 4; ++b) {
    int byte = 0;
    for (int k = 0; k < 8; ++k) byte |= ((q[8 * b + k] >> 4) & 1) << k;
    qh[b] = static_cast<uint8_t>(byte);
  }
}

// The first element of largest magnitude, with its sign.
float SignedMax(const float* x) {
  float amax = 0.0f, vmax = 0.0f;
  for (int i = 0; i < kBlock; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      vmax = x[i];
    }
  }
  return vmax;
}

// Every 32-block decodes as x = d·code (+ m): one rounding at most.
template <typename Block>
void Dequantize32(const Block* src, int64_t n_blocks, float* dst) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = HalfToFloat(src[b].d);
    float m = 0.0f;
    if constexpr (Block::kHasMin) m = HalfToFloat(src[b].m);
    for (int i = 0; i < kBlock; ++i) {
      const float v = d * static_cast<float>(Code32(src[b], i));
      if constexpr (Block::kHasMin) {
        dst[b * kBlock + i] = v + m;
      } else {
        dst[b * kBlock + i] = v;
      }
    }
  }
}

// 32-blocks × Q8: x_i = d·code_i (+ m), so a block contributes
//   float(Σ code_i·a_i)·(d·da)  [+ m·(da·float(Σ a_i))]
// (the activation block carries Σ a_i; the integer sum is exact); added to acc
// in that order, block by block.
template <typename Block>
float Dot32(const Block* w, const ActBlockQ8* a, int64_t n_blocks) {
  float acc = 0.0f;
  for (int64_t ib = 0; ib < n_blocks; ++ib) {
    int32_t s = 0;
    for (int i = 0; i < kBlock; ++i) s += Code32(w[ib], i) * a[ib].q[i];
    acc += static_cast<float>(s) * (HalfToFloat(w[ib].d) * a[ib].d);
    if constexpr (Block::kHasMin) {
      acc += HalfToFloat(w[ib].m) * (a[ib].d * static_cast<float>(a[ib].sum));
    }
  }
  return acc;
}

}  // namespace

void Dequantize(const BlockQ8_0* src, int64_t n_blocks, float* dst) {
  Dequantize32(src, n_blocks, dst);
}
void Dequantize(const BlockQ4_0* src, int64_t n_blocks, float* dst) {
  Dequantize32(src, n_blocks, dst);
}
void Dequantize(const BlockQ4_1* src, int64_t n_blocks, float* dst) {
  Dequantize32(src, n_blocks, dst);
}
void Dequantize(const BlockQ5_0* src, int64_t n_blocks, float* dst) {
  Dequantize32(src, n_blocks, dst);
}
void Dequantize(const BlockQ5_1* src, int64_t n_blocks, float* dst) {
  Dequantize32(src, n_blocks, dst);
}

float Dot(const BlockQ8_0* w, const ActBlockQ8* a, int64_t n_blocks) {
  return Dot32(w, a, n_blocks);
}
float Dot(const BlockQ4_0* w, const ActBlockQ8* a, int64_t n_blocks) {
  return Dot32(w, a, n_blocks);
}
float Dot(const BlockQ4_1* w, const ActBlockQ8* a, int64_t n_blocks) {
  return Dot32(w, a, n_blocks);
}
float Dot(const BlockQ5_0* w, const ActBlockQ8* a, int64_t n_blocks) {
  return Dot32(w, a, n_blocks);
}
float Dot(const BlockQ5_1* w, const ActBlockQ8* a, int64_t n_blocks) {
  return Dot32(w, a, n_blocks);
}

void Quantize(const float* src, int64_t n_blocks, BlockQ8_0* dst) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * kBlock;
    float amax = 0.0f;
    for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = FloatToHalf(d);
    for (int i = 0; i < kBlock; ++i) dst[b].qs[i] = static_cast<int8_t>(std::lround(x[i] * id));
  }
}

void Quantize(const float* src, int64_t n_blocks, BlockQ4_0* dst) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * kBlock;
    // The signed value of largest magnitude maps to -8, so the full [-8, 7]
    // range is used on the side that needs it.
    const float vmax = SignedMax(x);
    const float d = vmax / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = FloatToHalf(d);
    for (int i = 0; i < kBlock / 2; ++i) {
      const int q0 = std::min(15, static_cast<int>(x[i] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[i + kBlock / 2] * id + 8.5f));
      dst[b].qs[i] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void Quantize(const float* src, int64_t n_blocks, BlockQ4_1* dst) {
  uint8_t q[kBlock];
  for (int64_t b = 0; b < n_blocks; ++b) {
    QuantizeAffine(src + b * kBlock, 15, &dst[b].d, &dst[b].m, q);
    PackNibbles(q, dst[b].qs);
  }
}

void Quantize(const float* src, int64_t n_blocks, BlockQ5_1* dst) {
  uint8_t q[kBlock];
  for (int64_t b = 0; b < n_blocks; ++b) {
    QuantizeAffine(src + b * kBlock, 31, &dst[b].d, &dst[b].m, q);
    PackNibbles(q, dst[b].qs);
    PackFifthBits(q, dst[b].qh);
  }
}

void Quantize(const float* src, int64_t n_blocks, BlockQ5_0* dst) {
  uint8_t q[kBlock];
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * kBlock;
    // The signed value of largest magnitude maps to −16, so the full [−16, 15]
    // range is used on the side that needs it (as Q4_0 does with −8).
    dst[b].d = SaturatingHalf(SignedMax(x) / -16.0f);
    const float d = HalfToFloat(dst[b].d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < kBlock; ++i) q[i] = static_cast<uint8_t>(ClampRound(x[i] * id + 16.0f, 31));
    PackNibbles(q, dst[b].qs);
    PackFifthBits(q, dst[b].qh);
  }
}

}  // namespace strata::kernels::internal
