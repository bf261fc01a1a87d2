// AVX-512 kernels (F, BW, VL, DQ and VNNI): F32/F16/BF16 weights with 16-wide
// FMAs, the 32-blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) with 256-bit VNNI int8 dot
// products; the k-quants (Q4_K, Q5_K, Q6_K) are in kquants_avx512.cpp.
// Selected at run time when the CPU has every one of these extensions. The
// matmul entries (one template per micro-kernel family, instantiated at the end
// for the types the traits table gives them) are declared in
// internal/kernels_impl.h.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/internal/blocks.h"
#include "kernels/internal/kernels_impl.h"
#include "kernels/internal/packed_layout.h"

#include "kernels/internal/avx512_begin.inc"

namespace strata::kernels::internal {
namespace {

#include "kernels/internal/matmul_tiles.inc"
// After the tiles: they use their helpers.
#include "kernels/internal/avx512_matmul.inc"
#include "kernels/internal/simd_shared.inc"
// The 256-bit packed Q8_0 kernel, as AVX2 runs it (not yet measured against
// the plain AVX-512 kernel: the traits table does not prefer it here).
#include "kernels/internal/packed_matmul.inc"

// Loads 16 weights of a float type as floats from element k of row `p`;
// `mask` selects the valid lanes of a final partial vector (masked lanes read
// nothing and are zero).
template <typename Block>
struct FloatLoad;
template <>
struct FloatLoad<BlockF32> {
  static __m512 Load(const BlockF32* p, int64_t k, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(p) + k);
  }
};
template <>
struct FloatLoad<BlockF16> {
  static __m512 Load(const BlockF16* p, int64_t k, __mmask16 mask) {
    return _mm512_cvtph_ps(
        _mm256_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(p) + k));
  }
};
template <>
struct FloatLoad<BlockBF16> {
  static __m512 Load(const BlockBF16* p, int64_t k, __mmask16 mask) {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(p) + k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

// Float weights x F32 activations: one 16-lane accumulator per output.
template <typename Block>
struct FloatMicro {
  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const Block* w[R];
    const float* x[T];
    TileRowPtrs(a, r0, t0, w, x);
    __m512 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < a.n; k += 16) {
      const int64_t left = a.n - k;
      const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      __m512 wv[R];
      for (int i = 0; i < R; ++i) wv[i] = FloatLoad<Block>::Load(w[i], k, mask);
      for (int j = 0; j < T; ++j) {
        const __m512 xv = _mm512_maskz_loadu_ps(mask, x[j] + k);
        for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.out_stride + r0 + i] = Hsum512(acc[i][j]);
  }
};

// 32-blocks x Q8 activations with VNNI. vpdpbusd multiplies unsigned by
// signed bytes, so weights are made unsigned by an offset (Codes32: w + 128 for
// Q8_0, the raw 4- or 5-bit code for the others) and the offset times the
// activation block's sum is subtracted through the accumulator's starting
// value. Q4_1/Q5_1 add their min m through lane 0: acc += [m, 0, ..., 0] ·
// (da·Σa), after the block's scaled integer sum.
inline __m256i AddFifthBits(__m256i q, const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  return _mm256_mask_add_epi8(q, static_cast<__mmask32>(bits), q, _mm256_set1_epi8(16));
}

// Two consecutive 32-blocks per 512-bit step: lanes 0..7 hold block b's 8
// partial sums, lanes 8..15 block b+1's, so one vpdpbusd, one conversion, one
// scale product and one FMA cover 64 weights. The per-lane scale is dw·dx of
// the lane's block, formed from a row vector [dw_b ×8, dw_b+1 ×8] and a token
// vector [dx_b ×8, dx_b+1 ×8]. An odd last block runs the same steps on the
// low half. Every output is computed by the same sequence whatever the tile.
template <typename Block>
struct QuantMicro {
  using K = Codes32<Block>;
  // Token-side terms of a block pair, formed once for all rows of a tile.
  struct TokenPair {
    __m512i q;         // the two blocks' 64 activation bytes
    __m512i init;      // lane 0: −offset·Σq_b, lane 8: −offset·Σq_b+1
    __m512 d;          // [dx_b ×8, dx_b+1 ×8]
    __m512 min_terms;  // lane 0: dx_b·Σq_b, lane 8: dx_b+1·Σq_b+1 (blocks with a min)
  };
  static TokenPair Token(const ActBlockQ8& x0, const ActBlockQ8& x1) {
    TokenPair t;
    t.q = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0.q))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1.q)), 1);
    t.init = _mm512_maskz_set1_epi32(0x0001, -K::kOffset * x0.sum);
    t.init = _mm512_mask_set1_epi32(t.init, 0x0100, -K::kOffset * x1.sum);
    t.d = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(x0.d), _mm512_set1_ps(x1.d));
    if constexpr (K::kHasMin) {
      t.min_terms = _mm512_maskz_mov_ps(0x0001, _mm512_set1_ps(x0.d * static_cast<float>(x0.sum)));
      t.min_terms = _mm512_mask_mov_ps(t.min_terms, 0x0100,
                                       _mm512_set1_ps(x1.d * static_cast<float>(x1.sum)));
    }
    return t;
  }
  // Row-side terms of a block pair, formed once for all tokens of a tile.
  struct RowPair {
    __m512i u;    // 64 unsigned weight codes
    __m512 d;     // [dw_b ×8, dw_b+1 ×8]
    __m512 mins;  // lane 0: m_b, lane 8: m_b+1 (blocks with a min)
  };
  static RowPair Row(const Block& w0, const Block& w1) {
    RowPair r;
    r.u = _mm512_inserti64x4(_mm512_castsi256_si512(K::Unsigned(w0)), K::Unsigned(w1), 1);
    r.d = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(_cvtsh_ss(w0.d)),
                               _mm512_set1_ps(_cvtsh_ss(w1.d)));
    if constexpr (K::kHasMin) {
      r.mins = _mm512_maskz_mov_ps(0x0001, _mm512_set1_ps(_cvtsh_ss(w0.m)));
      r.mins = _mm512_mask_mov_ps(r.mins, 0x0100, _mm512_set1_ps(_cvtsh_ss(w1.m)));
    }
    return r;
  }
  static __m512 Step(__m512 acc, const RowPair& w, const TokenPair& x) {
    const __m512i p = _mm512_dpbusd_epi32(x.init, w.u, x.q);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(w.d, x.d), acc);
    if constexpr (K::kHasMin) acc = _mm512_fmadd_ps(w.mins, x.min_terms, acc);
    return acc;
  }

  // One token: its block-pair terms are formed once for every row, then each
  // row runs the same Step sequence as Tile (so the outputs are identical to
  // a batched product's) as one sequential stream of weights.
  void Decode(const MatMulArgs& a) {
    const ActBlockQ8* x = RowPtr<ActBlockQ8>(a.act, a.act_row_bytes, 0);
    const int64_t nb = a.n / 32;
    // 64-byte aligned storage for the vectors (TokenPair is an implicit-
    // lifetime type; the allocator's alignment is not relied on).
    const size_t n_pairs = static_cast<size_t>((nb + 1) / 2);
    std::vector<uint8_t> storage(n_pairs * sizeof(TokenPair) + alignof(TokenPair));
    const uintptr_t base = reinterpret_cast<uintptr_t>(storage.data());
    TokenPair* tx = reinterpret_cast<TokenPair*>((base + alignof(TokenPair) - 1) &
                                                 ~(uintptr_t{alignof(TokenPair)} - 1));
    for (int64_t b = 0; b < nb; b += 2) tx[b / 2] = Token(x[b], x[b + (b + 1 < nb)]);
    if (nb % 2 != 0) MaskHigh(tx[n_pairs - 1]);
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      const Block* w = RowPtr<Block>(a.w, a.w_row_bytes, r);
      __m512 acc = _mm512_setzero_ps();
      int64_t b = 0;
      for (; b + 2 <= nb; b += 2) acc = Step(acc, Row(w[b], w[b + 1]), tx[b / 2]);
      if (b < nb) acc = Step(acc, Row(w[b], w[b]), tx[n_pairs - 1]);
      a.out[r] = Hsum512(acc);
    }
  }
  // An odd last block: the pair's high half contributes nothing (no bytes,
  // no offset, scale 0).
  static void MaskHigh(TokenPair& t) {
    const __mmask16 lo = 0x00FF;
    t.q = _mm512_maskz_mov_epi32(lo, t.q);
    t.init = _mm512_maskz_mov_epi32(lo, t.init);
    t.d = _mm512_maskz_mov_ps(lo, t.d);
    if constexpr (K::kHasMin) t.min_terms = _mm512_maskz_mov_ps(lo, t.min_terms);
  }

  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const Block* w[R];
    const ActBlockQ8* x[T];
    TileRowPtrs(a, r0, t0, w, x);
    __m512 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
    const int64_t nb = a.n / 32;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      RowPair rw[R];
      for (int i = 0; i < R; ++i) rw[i] = Row(w[i][b], w[i][b + 1]);
      for (int j = 0; j < T; ++j) {
        const TokenPair tx = Token(x[j][b], x[j][b + 1]);
        for (int i = 0; i < R; ++i) acc[i][j] = Step(acc[i][j], rw[i], tx);
      }
    }
    if (b < nb) {
      for (int j = 0; j < T; ++j) {
        TokenPair tx = Token(x[j][b], x[j][b]);
        MaskHigh(tx);
        for (int i = 0; i < R; ++i) acc[i][j] = Step(acc[i][j], Row(w[i][b], w[i][b]), tx);
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.out_stride + r0 + i] = Hsum512(acc[i][j]);
  }
};

// x·id clamped and rounded as simd_shared.inc says.
inline __m512i QuantizeLanes(__m512 v, __m512 id) {
  const __m512 lim = _mm512_set1_ps(127.0f);
  const __m512 c = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, id), -lim), lim);
  return _mm512_cvtps_epi32(c);
}

// Largest magnitude of 16·k floats; NaN elements are ignored (as std::fmax does).
inline float AbsMax(const float* x, int k) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 m = _mm512_setzero_ps();
  for (int i = 0; i < k; ++i)
    m = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * i)), m);
  return _mm512_reduce_max_ps(m);
}

void QuantizeQ8(const float* x, int64_t n, ActBlockQ8* blocks) {
  for (int64_t ib = 0; ib < n / 32; ++ib) {
    const float amax = AbsMax(x + ib * 32, 2);
    const float d = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(d != 0.0f ? 127.0f / amax : 0.0f);
    const __m512i q0 = QuantizeLanes(_mm512_loadu_ps(x + ib * 32), id);
    const __m512i q1 = QuantizeLanes(_mm512_loadu_ps(x + ib * 32 + 16), id);
    ActBlockQ8& b = blocks[ib];
    b.d = d;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b.q), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b.q + 16), _mm512_cvtepi32_epi8(q1));
    b.sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

void QuantizeQ8K(const float* x, int64_t n, ActBlockQ8K* blocks) {
  const __m512i ones = _mm512_set1_epi8(1);
  // u (below) holds group 4k + L at int32 lane 4L + k.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int64_t ib = 0; ib < n / kQK_K; ++ib) {
    const float* xb = x + ib * kQK_K;
    const float amax = AbsMax(xb, kQK_K / 16);
    const float d = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(d != 0.0f ? 127.0f / amax : 0.0f);
    ActBlockQ8K& b = blocks[ib];
    b.d = d;
    // Each 64 codes: 16 lanes of sums of 4 consecutive codes (vpdpbusd by 1);
    // lanes 4L..4L+3 of chunk k hold group 4k + L.
    __m512i sums[4];
    for (int k = 0; k < 4; ++k) {
      const float* xk = xb + 64 * k;
      const __m128i b0 = _mm512_cvtepi32_epi8(QuantizeLanes(_mm512_loadu_ps(xk), id));
      const __m128i b1 = _mm512_cvtepi32_epi8(QuantizeLanes(_mm512_loadu_ps(xk + 16), id));
      const __m128i b2 = _mm512_cvtepi32_epi8(QuantizeLanes(_mm512_loadu_ps(xk + 32), id));
      const __m128i b3 = _mm512_cvtepi32_epi8(QuantizeLanes(_mm512_loadu_ps(xk + 48), id));
      const __m512i bytes = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(b1, b0)),
                                               _mm256_set_m128i(b3, b2), 1);
      _mm512_storeu_si512(b.q + 64 * k, bytes);
      sums[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, bytes);
    }
    // Sum each 128-bit lane's 4 partials: per 128-bit lane L, u = [Σ sums[0],
    // Σ sums[1], Σ sums[2], Σ sums[3]], i.e. groups L, 4 + L, 8 + L, 12 + L.
    const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(sums[0], sums[1]),
                                         _mm512_unpackhi_epi32(sums[0], sums[1]));
    const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(sums[2], sums[3]),
                                         _mm512_unpackhi_epi32(sums[2], sums[3]));
    const __m512i u =
        _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.bsums),
                        _mm512_cvtepi32_epi16(_mm512_permutexvar_epi32(order, u)));
  }
}

}  // namespace

// The matmul entries (internal/kernels_impl.h), one per micro-kernel family.
template <typename Block>
void MatMulFloatAvx512(const MatMulArgs& a) {
  FloatMicro<Block> m;
  tiles::Drive<4, 4>(m, a);
}
template <typename Block>
void MatMulQuant32Avx512(const MatMulArgs& a) {
  QuantMicro<Block> m;
  if (a.n_tokens == 1) {
    m.Decode(a);
    return;
  }
  tiles::Drive<4, 4>(m, a);
}

void MatMulPackedQ8Avx512(const MatMulArgs& a) { packed::Drive<packed::Q8Kernel, 4>(a); }
void MatMulPackedQ4KAvx512(const MatMulArgs& a) { packed::Drive<packed::Q4KKernel, 4>(a); }
void MatMulPackedQ6KAvx512(const MatMulArgs& a) { packed::Drive<packed::Q6KKernel, 4>(a); }
void MatMulPackedQ5KAvx512(const MatMulArgs& a) { packed::Drive<packed::Q5KKernel, 4>(a); }
template <typename Block>
void MatMulPackedLegacy32Avx512(const MatMulArgs& a) {
  packed::Drive<packed::Legacy32Kernel<Block>, 4>(a);
}
template void MatMulPackedLegacy32Avx512<BlockQ4_0>(const MatMulArgs&);
template void MatMulPackedLegacy32Avx512<BlockQ4_1>(const MatMulArgs&);
template void MatMulPackedLegacy32Avx512<BlockQ5_0>(const MatMulArgs&);
template void MatMulPackedLegacy32Avx512<BlockQ5_1>(const MatMulArgs&);

// The instantiations the traits table (type_traits.cpp) names.
template void MatMulFloatAvx512<BlockF32>(const MatMulArgs&);
template void MatMulFloatAvx512<BlockF16>(const MatMulArgs&);
template void MatMulFloatAvx512<BlockBF16>(const MatMulArgs&);
template void MatMulQuant32Avx512<BlockQ8_0>(const MatMulArgs&);
template void MatMulQuant32Avx512<BlockQ4_0>(const MatMulArgs&);
template void MatMulQuant32Avx512<BlockQ4_1>(const MatMulArgs&);
template void MatMulQuant32Avx512<BlockQ5_0>(const MatMulArgs&);
template void MatMulQuant32Avx512<BlockQ5_1>(const MatMulArgs&);

}  // namespace strata::kernels::internal

#include "kernels/internal/avx512_end.inc"

namespace strata::kernels::internal {

const KernelTable* Avx512Kernels() {
  static const bool supported =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c");
  static const KernelTable kTable{Isa::kAvx512,
                                  &QuantizeAct,
                                  &MatMulByType<Isa::kAvx512>,
                                  &AttendAvx512,
                                  &PrefersPackedByType<Isa::kAvx512>,
                                  &SwiGluAvx512};
  return supported ? &kTable : nullptr;
}

}  // namespace strata::kernels::internal
