// AVX2 kernels (with FMA and F16C): F32/F16/BF16 weights with 8-wide FMAs,
// the 32-blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) and the k-quants (Q4_K, Q5_K,
// Q6_K) with 16-bit multiply-adds. For CPUs without the AVX-512 set
// avx512.cpp needs. The matmul entries (one template per micro-kernel family,
// instantiated at the end for the types the traits table gives them) are
// declared in internal/kernels_impl.h.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/internal/blocks.h"
#include "kernels/internal/kernels_impl.h"
#include "kernels/internal/packed_layout.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace strata::kernels::internal {
namespace {

#include "kernels/internal/matmul_tiles.inc"
#include "kernels/internal/packed_matmul.inc"
#include "kernels/internal/simd_shared.inc"

// Loads 8 weights as floats from `p` (element k), or the `left` < 8 remaining
// ones padded with zeros.
struct F32Load {
  static __m256 Load(const void* p, int64_t k, int64_t left) {
    const float* f = static_cast<const float*>(p) + k;
    if (left >= 8) return _mm256_loadu_ps(f);
    float tmp[8] = {};
    std::memcpy(tmp, f, static_cast<size_t>(left) * sizeof(float));
    return _mm256_loadu_ps(tmp);
  }
};
struct F16Load {
  static __m256 Load(const void* p, int64_t k, int64_t left) {
    const uint16_t* h = static_cast<const uint16_t*>(p) + k;
    if (left >= 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
    uint16_t tmp[8] = {};
    std::memcpy(tmp, h, static_cast<size_t>(left) * sizeof(uint16_t));
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tmp)));
  }
};
struct Bf16Load {
  static __m256 Load(const void* p, int64_t k, int64_t left) {
    const uint16_t* h = static_cast<const uint16_t*>(p) + k;
    __m128i v;
    if (left >= 8) {
      v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h));
    } else {
      uint16_t tmp[8] = {};
      std::memcpy(tmp, h, static_cast<size_t>(left) * sizeof(uint16_t));
      v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tmp));
    }
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  }
};

// The loader of each float type.
template <typename Block>
struct FloatLoad;
template <>
struct FloatLoad<BlockF32> : F32Load {};
template <>
struct FloatLoad<BlockF16> : F16Load {};
template <>
struct FloatLoad<BlockBF16> : Bf16Load {};

template <typename Block>
struct FloatMicro {
  using L = FloatLoad<Block>;
  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const void* w[R];
    const float* x[T];
    TileRowPtrs(a, r0, t0, w, x);
    __m256 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < a.n; k += 8) {
      const int64_t left = a.n - k;
      __m256 wv[R];
      for (int i = 0; i < R; ++i) wv[i] = L::Load(w[i], k, left);
      for (int j = 0; j < T; ++j) {
        const __m256 xv = F32Load::Load(x[j], k, left);
        for (int i = 0; i < R; ++i) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.out_stride + r0 + i] = Hsum256(acc[i][j]);
  }
};

// Q8_0 x Q8: |w| times x with w's sign (maddubs needs one unsigned operand and
// the pair sums stay below 2^15), then pairs of 16-bit sums to 32 bits.
template <typename Block>
struct Signed8Micro {
  static_assert(Block::kBits == 8 && !Block::kHasMin, "int8 codes, x = d·q");
  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const Block* w[R];
    const ActBlockQ8* x[T];
    TileRowPtrs(a, r0, t0, w, x);
    __m256 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < a.n / 32; ++b) {
      __m256i wq[R], wabs[R];
      float dw[R];
      for (int i = 0; i < R; ++i) {
        wq[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i][b].qs));
        wabs[i] = _mm256_abs_epi8(wq[i]);
        dw[i] = _cvtsh_ss(w[i][b].d);
      }
      for (int j = 0; j < T; ++j) {
        const ActBlockQ8& xb = x[j][b];
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
        for (int i = 0; i < R; ++i) {
          const __m256i p16 = _mm256_maddubs_epi16(wabs[i], _mm256_sign_epi8(xq, wq[i]));
          const __m256i p = _mm256_madd_epi16(p16, ones);
          acc[i][j] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[i] * xb.d), acc[i][j]);
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.out_stride + r0 + i] = Hsum256(acc[i][j]);
  }
};

// The other 32-blocks x Q8: unsigned codes (the raw 4- or 5-bit q) times x,
// minus the offset (8 for Q4_0, 16 for Q5_0) times the block's sum, added in
// integers; Q4_1/Q5_1 add their min m through lane 0: acc += [m, 0, ..., 0] ·
// (da·Σa), after the block's scaled integer sum.

// AddFifthBits (simd_shared.inc): byte i takes qh byte i/8, keeps bit i%8, and
// compares.
inline __m256i AddFifthBits(__m256i q, const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(bits)),
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(16)));
}

template <typename Block>
struct Small32Micro {
  // maddubs pairs of 255·127 would saturate int16: Q8_0 takes Signed8Micro.
  static_assert(Block::kBits < 8, "4- or 5-bit codes");
  using K = Codes32<Block>;
  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const Block* w[R];
    const ActBlockQ8* x[T];
    TileRowPtrs(a, r0, t0, w, x);
    __m256 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < a.n / 32; ++b) {
      __m256i wu[R];
      float dw[R];
      __m256 mw[R];
      for (int i = 0; i < R; ++i) {
        wu[i] = K::Unsigned(w[i][b]);
        dw[i] = _cvtsh_ss(w[i][b].d);
        if constexpr (K::kHasMin) mw[i] = _mm256_setr_ps(_cvtsh_ss(w[i][b].m), 0, 0, 0, 0, 0, 0, 0);
      }
      for (int j = 0; j < T; ++j) {
        const ActBlockQ8& xb = x[j][b];
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
        const __m256i corr = _mm256_setr_epi32(-K::kOffset * xb.sum, 0, 0, 0, 0, 0, 0, 0);
        for (int i = 0; i < R; ++i) {
          const __m256i p =
              _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wu[i], xq), ones), corr);
          acc[i][j] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[i] * xb.d), acc[i][j]);
          if constexpr (K::kHasMin) {
            acc[i][j] = _mm256_fmadd_ps(mw[i], _mm256_set1_ps(xb.d * static_cast<float>(xb.sum)),
                                        acc[i][j]);
          }
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.out_stride + r0 + i] = Hsum256(acc[i][j]);
  }
};

// ---------------------------------------------------------------------------
// K-quants x Q8K activations.
//
// A super-block is walked in 8 pieces of 32 elements. Per piece the weights
// become 32 unsigned bytes q (0..15, 0..31 or 0..63) laid out like the 32
// activation bytes they meet; vpmaddubsw forms the int16 pair sums q·a
// (|sum| ≤ 2·63·127 < 2^15: never saturates) and vpmaddwd multiplies them by
// the sub-block scale into 8 int32 lanes. The whole super-block stays in those
// lanes (each below 2^24), converted to float once:
//   acc += cvt(isum)·(d·da)                      (Q6_K: isum starts at −32·Σ sc·bsums)
//   acc −= cvt(Σ_j m_j·bsums pairs)·(dmin·da)     (Q4_K, Q5_K)
// with one 8-lane float accumulator per output, reduced at the end.

struct PrepK4 {
  alignas(32) int16_t sc[8];  // sub-block scales
  __m256i mins;               // m[j] at words 2j and 2j+1 (pairs with bsums)
  float d, dmin;
};
inline void PrepareK4(const uint8_t* scales, uint16_t d, uint16_t dmin, PrepK4* p) {
  const ScaleMinLanesK4 u = UnpackScaleMinLanesK4(scales);
  const __m128i bytes = _mm_set_epi64x(static_cast<int64_t>(u.hi), static_cast<int64_t>(u.lo));
  // Words: sc0..3, m0..3, sc4..7, m4..7.
  const __m256i words = _mm256_cvtepu8_epi16(bytes);
  const __m256i sc = _mm256_permutevar8x32_epi32(words, _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
  _mm_store_si128(reinterpret_cast<__m128i*>(p->sc), _mm256_castsi256_si128(sc));
  // Mins m0..m7 as bytes, each twice.
  const __m128i m = _mm_shuffle_epi8(
      bytes, _mm_setr_epi8(4, 4, 5, 5, 6, 6, 7, 7, 12, 12, 13, 13, 14, 14, 15, 15));
  p->mins = _mm256_cvtepu8_epi16(m);
  p->d = _cvtsh_ss(d);
  p->dmin = _cvtsh_ss(dmin);
}
inline __m256i ScaleWords(const int16_t* w) {
  return _mm256_broadcastw_epi16(_mm_cvtsi32_si128(*w));
}

// Q4_K and Q5_K: piece g is sub-block g, the nibbles of qs[32·(g/2) ..] (low
// for even g); Q5_K adds bit g of qh[l] as bit 4 (16-bit shifts; the bits that
// cross into a neighbouring byte are masked off).
struct PrepK4Qh : PrepK4 {
  __m256i qh;
};
template <typename B>
struct K4Kind {
  using Block = B;
  static constexpr bool kFifthBit = Block::kBits == 5;
  using Prep = std::conditional_t<kFifthBit, PrepK4Qh, PrepK4>;
  static void Prepare(const Block& b, Prep* p) {
    PrepareK4(b.scales, b.d, b.dmin, p);
    if constexpr (kFifthBit) p->qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
  }
  static __m256i Init(const Prep&, __m256i) { return _mm256_setzero_si256(); }
  static void Piece(const Block& b, const Prep& p, int g, __m256i* q, __m256i* s) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (g / 2)));
    const __m256i nib =
        _mm256_and_si256(g % 2 == 0 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
    if constexpr (kFifthBit) {
      const __m256i hb = g < 4 ? _mm256_slli_epi16(p.qh, 4 - g) : _mm256_srli_epi16(p.qh, g - 4);
      *q = _mm256_or_si256(nib, _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
    } else {
      *q = nib;
    }
    *s = ScaleWords(p.sc + g);
  }
  static __m256 Finish(__m256 acc, __m256i isum, const Prep& p, float da, __m256i bsums) {
    const __m256i imin = _mm256_madd_epi16(p.mins, bsums);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(p.d * da), acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_set1_ps(p.dmin * da), acc);
  }
};

struct Q6KKind {
  using Block = BlockQ6_K;
  struct Prep {
    alignas(32) int16_t sc[16];  // signed sub-block scales
    __m256i offset;              // words: −32·sc[g] (pairs with bsums[g])
    float d;
  };
  static void Prepare(const Block& b, Prep* p) {
    const __m256i words =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(p->sc), words);
    p->offset = _mm256_mullo_epi16(words, _mm256_set1_epi16(-32));
    p->d = _cvtsh_ss(b.d);
  }
  static __m256i Init(const Prep& p, __m256i bsums) { return _mm256_madd_epi16(p.offset, bsums); }
  // Piece g = elements 32g..32g+31 (h = g/4, k = g%4): low 4 bits from
  // ql[64h + 32·(k%2) + l] (low nibbles for k < 2), high 2 bits are bits
  // 2k..2k+1 of qh[32h + l]; sub-blocks 2g (first 16) and 2g+1.
  static void Piece(const Block& b, const Prep& p, int g, __m256i* q, __m256i* s) {
    const int h = g / 4, k = g % 4;
    const __m256i ql =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32 * (k % 2)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
    const __m256i low =
        _mm256_and_si256(k < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0F));
    // Bits 2k..2k+1 to bits 4..5 (16-bit shifts; crossing bits are masked off).
    const __m256i hb = k < 2 ? _mm256_slli_epi16(qh, 4 - 2 * k) : _mm256_srli_epi16(qh, 2 * k - 4);
    *q = _mm256_or_si256(low, _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
    // Words 0..7 take sc[2g], words 8..15 sc[2g+1].
    int32_t pair;
    std::memcpy(&pair, p.sc + 2 * g, sizeof(pair));
    *s = _mm256_shuffle_epi8(_mm256_set1_epi32(pair),
                             _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3,
                                              2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
  }
  static __m256 Finish(__m256 acc, __m256i isum, const Prep& p, float da, __m256i) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(p.d * da), acc);
  }
};

template <typename K>
struct KQuantMicro {
  using Block = typename K::Block;
  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const Block* w[R];
    const ActBlockQ8K* x[T];
    TileRowPtrs(a, r0, t0, w, x);
    __m256 acc[R][T];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
    const int64_t nb = a.n / kQK_K;
    for (int64_t b = 0; b < nb; ++b) {
      typename K::Prep p[R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) K::Prepare(w[i][b], &p[i]);
      __m256i isum[R][T];
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[j][b].bsums));
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) isum[i][j] = K::Init(p[i], bsums);
      }
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        __m256i q[R], s[R];
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) K::Piece(w[i][b], p[i], g, &q[i], &s[i]);
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j) {
          const __m256i xq =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[j][b].q + 32 * g));
#pragma GCC unroll 8
          for (int i = 0; i < R; ++i) {
            isum[i][j] = _mm256_add_epi32(isum[i][j],
                                          _mm256_madd_epi16(_mm256_maddubs_epi16(q[i], xq), s[i]));
          }
        }
      }
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const float da = x[j][b].d;
        const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[j][b].bsums));
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) acc[i][j] = K::Finish(acc[i][j], isum[i][j], p[i], da, bsums);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.out_stride + r0 + i] = Hsum256(acc[i][j]);
  }
};

// x·id clamped and rounded as simd_shared.inc says.
inline __m256i QuantizeLanes(__m256 v, __m256 id) {
  const __m256 lim = _mm256_set1_ps(127.0f);
  const __m256 c = _mm256_min_ps(
      _mm256_max_ps(_mm256_mul_ps(v, id), _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim);
  return _mm256_cvtps_epi32(c);
}

// Largest magnitude of 8·k floats; NaN elements are ignored (as std::fmax does).
inline float AbsMax(const float* x, int k) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < k; ++i)
    m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * i)), m);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// 32 codes from 32 floats, as bytes in element order; `sum32` gets their 8-lane partial sums.
inline __m256i QuantizeBytes32(const float* x, __m256 id, __m256i* sum32) {
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = QuantizeLanes(_mm256_loadu_ps(x + 8 * k), id);
  *sum32 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
  const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void QuantizeQ8(const float* x, int64_t n, ActBlockQ8* blocks) {
  for (int64_t ib = 0; ib < n / 32; ++ib) {
    const float amax = AbsMax(x + ib * 32, 4);
    const float d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 127.0f / amax : 0.0f);
    __m256i sum32;
    const __m256i bytes = QuantizeBytes32(x + ib * 32, id, &sum32);
    ActBlockQ8& b = blocks[ib];
    b.d = d;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.q), bytes);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum32), _mm256_extracti128_si256(sum32, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    b.sum = _mm_cvtsi128_si32(s4);
  }
}

void QuantizeQ8K(const float* x, int64_t n, ActBlockQ8K* blocks) {
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t ib = 0; ib < n / kQK_K; ++ib) {
    const float* xb = x + ib * kQK_K;
    const float amax = AbsMax(xb, kQK_K / 8);
    const float d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 127.0f / amax : 0.0f);
    ActBlockQ8K& b = blocks[ib];
    b.d = d;
    // Piece k (32 codes, groups 2k and 2k+1): 8 lanes of sums of 4 codes,
    // lanes 0..3 for group 2k, 4..7 for 2k+1.
    __m256i sums[8];
    for (int k = 0; k < 8; ++k) {
      __m256i unused;
      const __m256i bytes = QuantizeBytes32(xb + 32 * k, id, &unused);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.q + 32 * k), bytes);
      sums[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, bytes), ones16);
    }
    // Two rounds of pairwise sums: per 128-bit lane L, [Σ sums[4m], Σ sums[4m+1],
    // Σ sums[4m+2], Σ sums[4m+3]] = groups 8m + L, 8m + 2 + L, 8m + 4 + L, 8m + 6 + L.
    const __m256i lo =
        _mm256_hadd_epi32(_mm256_hadd_epi32(sums[0], sums[1]), _mm256_hadd_epi32(sums[2], sums[3]));
    const __m256i hi =
        _mm256_hadd_epi32(_mm256_hadd_epi32(sums[4], sums[5]), _mm256_hadd_epi32(sums[6], sums[7]));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    // Groups 0..7 and 8..15 in order, then packed to words (the 128-bit lanes
    // of packs interleave, the 64-bit permute restores the order).
    const __m256i packed = _mm256_packs_epi32(_mm256_permutevar8x32_epi32(lo, order),
                                              _mm256_permutevar8x32_epi32(hi, order));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.bsums),
                        _mm256_permute4x64_epi64(packed, 0xD8));
  }
}

// Which K-quant kind a block type takes.
template <typename Block>
using KQuantKind = std::conditional_t<std::is_same_v<Block, BlockQ6_K>, Q6KKind, K4Kind<Block>>;

}  // namespace

// The matmul entries (internal/kernels_impl.h), one per micro-kernel family.
template <typename Block>
void MatMulFloatAvx2(const MatMulArgs& a) {
  FloatMicro<Block> m;
  tiles::Drive<2, 4>(m, a);
}
template <typename Block>
void MatMulSigned8Avx2(const MatMulArgs& a) {
  Signed8Micro<Block> m;
  tiles::Drive<2, 4>(m, a);
}
template <typename Block>
void MatMulQuant32Avx2(const MatMulArgs& a) {
  Small32Micro<Block> m;
  tiles::Drive<2, 4>(m, a);
}
template <typename Block>
void MatMulKQuantAvx2(const MatMulArgs& a) {
  KQuantMicro<KQuantKind<Block>> m;
  tiles::Drive<2, 2>(m, a);
}

void MatMulPackedQ8Avx2(const MatMulArgs& a) { packed::Drive<packed::Q8Kernel, 4>(a); }
void MatMulPackedQ4KAvx2(const MatMulArgs& a) { packed::Drive<packed::Q4KKernel, 4>(a); }
void MatMulPackedQ6KAvx2(const MatMulArgs& a) { packed::Drive<packed::Q6KKernel, 4>(a); }
void MatMulPackedQ5KAvx2(const MatMulArgs& a) { packed::Drive<packed::Q5KKernel, 4>(a); }
template <typename Block>
void MatMulPackedLegacy32Avx2(const MatMulArgs& a) {
  packed::Drive<packed::Legacy32Kernel<Block>, 4>(a);
}
template void MatMulPackedLegacy32Avx2<BlockQ4_0>(const MatMulArgs&);
template void MatMulPackedLegacy32Avx2<BlockQ4_1>(const MatMulArgs&);
template void MatMulPackedLegacy32Avx2<BlockQ5_0>(const MatMulArgs&);
template void MatMulPackedLegacy32Avx2<BlockQ5_1>(const MatMulArgs&);

// The instantiations the traits table (type_traits.cpp) names.
template void MatMulFloatAvx2<BlockF32>(const MatMulArgs&);
template void MatMulFloatAvx2<BlockF16>(const MatMulArgs&);
template void MatMulFloatAvx2<BlockBF16>(const MatMulArgs&);
template void MatMulSigned8Avx2<BlockQ8_0>(const MatMulArgs&);
template void MatMulQuant32Avx2<BlockQ4_0>(const MatMulArgs&);
template void MatMulQuant32Avx2<BlockQ4_1>(const MatMulArgs&);
template void MatMulQuant32Avx2<BlockQ5_0>(const MatMulArgs&);
template void MatMulQuant32Avx2<BlockQ5_1>(const MatMulArgs&);
template void MatMulKQuantAvx2<BlockQ4_K>(const MatMulArgs&);
template void MatMulKQuantAvx2<BlockQ5_K>(const MatMulArgs&);
template void MatMulKQuantAvx2<BlockQ6_K>(const MatMulArgs&);

}  // namespace strata::kernels::internal

#pragma GCC pop_options

namespace strata::kernels::internal {

const KernelTable* Avx2Kernels() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                                __builtin_cpu_supports("f16c");
  static const KernelTable kTable{Isa::kAvx2,
                                  &QuantizeAct,
                                  &MatMulByType<Isa::kAvx2>,
                                  &AttendAvx2,
                                  &PrefersPackedByType<Isa::kAvx2>,
                                  &SwiGluAvx2};
  return supported ? &kTable : nullptr;
}

}  // namespace strata::kernels::internal
