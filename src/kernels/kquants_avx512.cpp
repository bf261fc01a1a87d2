// AVX-512 k-quant matrix products (Q4_K, Q5_K, Q6_K weights against Q8_K
// activations), for the AVX-512 kernel table (avx512.cpp). 512-bit
// int8·int8 → int16 → int32 products keep a whole super-block in integers.
// The matmul entry MatMulKQuantAvx512 is declared in internal/kernels_impl.h.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/internal/blocks.h"
#include "kernels/internal/kernels_impl.h"

#include "kernels/internal/avx512_begin.inc"

namespace strata::kernels::internal {
namespace {

#include "kernels/internal/matmul_tiles.inc"
// After the tiles: it uses their helpers.
#include "kernels/internal/avx512_matmul.inc"

// ---------------------------------------------------------------------------
// K-quants x Q8K activations.
//
// A super-block is walked in 4 chunks of 64 elements. Per chunk the weights
// become 64 unsigned bytes q (0..15, 0..31 or 0..63), laid out like the 64
// activation bytes a they meet, and vpdpbusd sums q·a over 4 neighbours into
// 16 int32 lanes, each inside one sub-block and below 2^15 in magnitude
// (4·63·127 = 32004). Two chunks' lanes pack (vpackssdw, exact) into 32 int16
// words, and vpdpwssd multiplies each word by its sub-block's scale into 16
// int32 lanes: 3 multiply instructions per 128 elements. The whole super-block
// stays in those lanes. Before the float step a row's lanes for the 4 tokens
// of a tile are summed (exactly, in integers) into one vector: its 128-bit
// lane L, element k holds token k's lanes 4L..4L+3 (TileSums). So one float
// accumulator serves 4 outputs, and the float work is done once per row and
// 4 tokens rather than per (row, token):
//   acc += (cvt(s)·d)·da_k − m,  m = dmin·m[2L]·S_k[2L] + dmin·m[2L+1]·S_k[2L+1]
// where S_k[j] = da_k·(bsums[2j] + bsums[2j+1]) and m is 0 for Q6_K (whose
// isum starts at −32·Σ sc·bsums instead). At the end token k's output is
// (lane 0 + lane 2) + (lane 1 + lane 3). Every step is lane-wise, so a
// token's bits do not depend on its place in a tile or on the other tokens;
// a lone token (decode) takes the same steps with itself in every element.
// The min factors are formed once per row, the token terms once per tile
// (TileTerms). Measured with kernels_bench (tokens:64, alternating runs of
// each): Q4_K 111-113 -> 130-158 GMAC/s, with the other changes of that
// commit (staged outputs, token terms formed once per chunk).
//
// vpackssdw(p, p') interleaves per 128-bit lane L: words 0..3 are p's lanes
// 4L..4L+3, words 4..7 p''s. The scale words of a chunk pair follow that order.

// 6-bit scales and mins of Q4_K/Q5_K as bytes: sc[0..7] (low 8), m[0..7] (high 8).
inline __m128i ScaleMinBytesK4(const uint8_t* scales) {
  const ScaleMinLanesK4 u = UnpackScaleMinLanesK4(scales);
  const __m128i v = _mm_set_epi64x(static_cast<int64_t>(u.hi), static_cast<int64_t>(u.lo));
  // Reorder to sc0..3, sc4..7, m0..3, m4..7.
  return _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15));
}

// One row's super-block of Q4_K/Q5_K, decoded once for all tokens of a tile.
struct PrepK4 {
  __m512i scales[2];  // words for chunk pairs (0, 1) and (2, 3), in vpackssdw order
  __m512 mins[2];     // 128-bit lane L: dmin·m[2L] ([0]) and dmin·m[2L+1] ([1]), exact
  __m512 d;
};
// The super-block terms of a tile's (up to) 4 tokens, formed once for all
// rows; 128-bit lane L, element k belongs to token k (zeros past the tile).
struct TileTerms {
  __m512 da;       // da_k
  __m512 sums[2];  // S_k[2L] ([0]) and S_k[2L+1] ([1]) (Q4_K/Q5_K only)
};

inline PrepK4 PrepareK4(const uint8_t* scales, uint16_t d, uint16_t dmin) {
  PrepK4 p;
  const __m128i bytes = ScaleMinBytesK4(scales);
  const __m512i words = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(bytes));
  // Chunk c holds sub-block 2c in its lanes 0..7 (128-bit lanes 0, 1) and 2c+1
  // in lanes 8..15: pair (0, 1) has sc0, sc2 in 128-bit lanes 0, 1 and sc1, sc3
  // in lanes 2, 3.
  const __m512i idx =
      _mm512_set_epi64(0x0003000300030003, 0x0001000100010001, 0x0003000300030003,
                       0x0001000100010001, 0x0002000200020002, 0, 0x0002000200020002, 0);
  p.scales[0] = _mm512_permutexvar_epi16(idx, words);
  p.scales[1] = _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16(4)), words);
  const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(bytes, bytes)));
  const __m512 dm = _mm512_zextps256_ps512(_mm256_mul_ps(m, _mm256_set1_ps(_cvtsh_ss(dmin))));
  const __m512i even = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
  p.mins[0] = _mm512_permutexvar_ps(even, dm);
  p.mins[1] = _mm512_permutexvar_ps(_mm512_add_epi32(even, _mm512_set1_epi32(1)), dm);
  p.d = _mm512_set1_ps(_cvtsh_ss(d));
  return p;
}

// S[j] = da·(bsums[2j] + bsums[2j+1]) of one token's super-block, j = 0..7.
inline __m256 PairSumsK4(const ActBlockQ8K& x) {
  const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
  const __m256 pairs = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, _mm256_set1_epi16(1)));
  return _mm256_mul_ps(pairs, _mm256_set1_ps(x.d));
}

// The terms of tokens xb[0..T-1] for Q4_K/Q5_K.
template <int T>
inline TileTerms TileTermsK4(const ActBlockQ8K* const xb[T]) {
  static_assert(T >= 1 && T <= 4, "a tile accumulator holds 4 tokens");
  if constexpr (T == 1) {
    // Decode: token 0's terms in every element k.
    const __m512i even = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    const __m512 sums = _mm512_castps256_ps512(PairSumsK4(*xb[0]));
    return {_mm512_set1_ps(xb[0]->d),
            {_mm512_permutexvar_ps(even, sums),
             _mm512_permutexvar_ps(_mm512_add_epi32(even, _mm512_set1_epi32(1)), sums)}};
  }
  float da[4] = {0, 0, 0, 0};
  __m256 sums[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    if (k < T) da[k] = xb[k]->d;
    sums[k] = k < T ? PairSumsK4(*xb[k]) : _mm256_setzero_ps();
  }
  TileTerms t;
  t.da = _mm512_broadcast_f32x4(_mm_loadu_ps(da));
  // Lane (L, k) takes token k's element 2L (+1): tokens 0, 1 are a's halves,
  // 2, 3 b's.
  const __m512 a = _mm512_insertf32x8(_mm512_castps256_ps512(sums[0]), sums[1], 1);
  const __m512 b = _mm512_insertf32x8(_mm512_castps256_ps512(sums[2]), sums[3], 1);
  const __m512i idx = _mm512_setr_epi32(0, 8, 16, 24, 2, 10, 18, 26, 4, 12, 20, 28, 6, 14, 22, 30);
  t.sums[0] = _mm512_permutex2var_ps(a, idx, b);
  t.sums[1] = _mm512_permutex2var_ps(a, _mm512_add_epi32(idx, _mm512_set1_epi32(1)), b);
  return t;
}

// The 64 codes of chunk c: low nibbles of qs[32c..32c+31], then their high nibbles.
inline __m512i ChunkNibblesK4(const uint8_t* qs, int c) {
  const __m512i v =
      _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c)));
  return _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), _mm512_set1_epi8(0x0F));
}

// Q4_K and Q5_K: chunk c holds the nibbles of qs[32c..32c+31] (sub-blocks 2c
// and 2c+1); Q5_K adds their fifth bits.
struct PrepK4Qh : PrepK4 {
  __m512i qh;  // qh[0..31] in both halves
};
template <typename B>
struct K4Kind {
  using Block = B;
  static constexpr bool kFifthBit = Block::kBits == 5;
  using Prep = std::conditional_t<kFifthBit, PrepK4Qh, PrepK4>;
  // Forced inline: GCC's heuristics otherwise left the Q5_K one out of line
  // in the batch path (kernels_bench Q5_K tokens:64 measured ~5 % slower).
  [[gnu::always_inline]] static Prep Prepare(const Block& b) {
    if constexpr (kFifthBit) {
      Prep p;
      static_cast<PrepK4&>(p) = PrepareK4(b.scales, b.d, b.dmin);
      p.qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh)));
      return p;
    } else {
      return PrepareK4(b.scales, b.d, b.dmin);
    }
  }
  static __m512i Init(const Prep&, __m256i) { return _mm512_setzero_si512(); }
  static __m512i Codes(const Block& b, const Prep& p, int c) {
    if constexpr (kFifthBit) {
      // Sub-block 2c's fifth bits are bit 2c of qh[l], sub-block 2c+1's bit 2c+1.
      const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c))),
                                             _mm256_set1_epi8(static_cast<char>(2 << (2 * c))), 1);
      const __m512i nib = ChunkNibblesK4(b.qs, c);
      return _mm512_mask_add_epi8(nib, _mm512_test_epi8_mask(p.qh, bit), nib, _mm512_set1_epi8(16));
    } else {
      static_cast<void>(p);
      return ChunkNibblesK4(b.qs, c);
    }
  }
  static __m512i PairScales(const Prep& p, int pair) { return p.scales[pair]; }
  template <int T>
  static TileTerms Terms(const ActBlockQ8K* const xb[T]) {
    return TileTermsK4<T>(xb);
  }
  static __m512 Finish(__m512 acc, __m512i sums, const Prep& p, const TileTerms& t) {
    // Only the final add depends on acc, so the chain through the super-blocks
    // is one add long.
    const __m512 m = _mm512_fmadd_ps(p.mins[1], t.sums[1], _mm512_mul_ps(p.mins[0], t.sums[0]));
    return _mm512_add_ps(acc,
                         _mm512_fmsub_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sums), p.d), t.da, m));
  }
};

struct Q6KKind {
  using Block = BlockQ6_K;
  struct Prep {
    __m512i scales[2];  // words for chunk pairs (0, 1) and (2, 3), in vpackssdw order
    __m256i offset;     // words: −32·scales[g] (pairs with bsums[g])
    __m512 d;
  };
  [[gnu::always_inline]] static Prep Prepare(const Block& b) {
    Prep p;
    const __m256i words =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    // Chunk c holds sub-block 4c + L in its 128-bit lane L: pair (0, 1) has
    // sc[L] in words 0..3 and sc[4 + L] in words 4..7 of lane L.
    const __m512i idx = _mm512_set_epi64(0x0007000700070007, 0x0003000300030003, 0x0006000600060006,
                                         0x0002000200020002, 0x0005000500050005, 0x0001000100010001,
                                         0x0004000400040004, 0);
    p.scales[0] = _mm512_permutexvar_epi16(idx, _mm512_zextsi256_si512(words));
    p.scales[1] = _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16(8)),
                                           _mm512_zextsi256_si512(words));
    p.offset = _mm256_mullo_epi16(words, _mm256_set1_epi16(-32));
    p.d = _mm512_set1_ps(_cvtsh_ss(b.d));
    return p;
  }
  // Σ_g (−32·sc_g)·bsums[g] in lanes 0..7: the offset of q − 32, exact.
  static __m512i Init(const Prep& p, __m256i bsums) {
    return _mm512_zextsi256_si512(_mm256_madd_epi16(p.offset, bsums));
  }
  // Chunk c = elements 64c..64c+63 (h = c/2, e = c%2): low 4 bits from
  // ql[64h..64h+63] (low nibbles for e = 0, high for e = 1), the 2 high bits
  // from qh[32h + l]: bits 4e..4e+1 for the first 32, 4e+2..4e+3 for the next.
  [[gnu::always_inline]] static __m512i Codes(const Block& b, const Prep&, int c) {
    const int h = c / 2, e = c % 2;
    __m512i low = _mm512_loadu_si512(b.ql + 64 * h);
    if (e == 1) low = _mm512_srli_epi16(low, 4);
    const __m512i qh =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h)));
    // Move the wanted 2 bits to bits 4..5 of each byte (16-bit shifts; the bits
    // that cross into a neighbouring byte are masked off).
    const __m512i hi =
        e == 0 ? _mm512_sllv_epi16(
                     qh, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1))
               : _mm512_srlv_epi16(
                     qh, _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1));
    // (low & 0x0F) | (hi & 0x30)
    return _mm512_ternarylogic_epi32(low, _mm512_set1_epi8(0x0F),
                                     _mm512_and_si512(hi, _mm512_set1_epi8(0x30)), 0xEA);
  }
  static __m512i PairScales(const Prep& p, int pair) { return p.scales[pair]; }
  template <int T>
  static TileTerms Terms(const ActBlockQ8K* const xb[T]) {
    if constexpr (T == 1) return {_mm512_set1_ps(xb[0]->d), {}};
    float da[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
    for (int k = 0; k < T; ++k) da[k] = xb[k]->d;
    return {_mm512_broadcast_f32x4(_mm_loadu_ps(da)), {}};
  }
  static __m512 Finish(__m512 acc, __m512i sums, const Prep& p, const TileTerms& t) {
    return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sums), p.d), t.da));
  }
};

// Token k's 16 lanes summed by fours: 128-bit lane L, element k of the result
// is isum[k] lanes 4L..4L+3 (integer adds, exact whatever their order); tokens
// k >= T give 0.
template <int T>
inline __m512i TileSums(const __m512i isum[T]) {
  static_assert(T >= 1 && T <= 4, "a tile accumulator holds 4 tokens");
  if constexpr (T == 1) {
    // Decode: the same sums with fewer shuffles (element k > 0 repeats token 0).
    const __m512i s = _mm512_add_epi32(isum[0], _mm512_shuffle_epi32(isum[0], _MM_PERM_CDAB));
    return _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_BADC));
  }
  const __m512i z = _mm512_setzero_si512();
  const __m512i i0 = isum[0], i1 = T > 1 ? isum[1] : z;
  const __m512i i2 = T > 2 ? isum[2] : z, i3 = T > 3 ? isum[3] : z;
  const __m512i s01 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(i0, i1), _mm512_unpackhi_epi32(i0, i1));
  const __m512i s23 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(i2, i3), _mm512_unpackhi_epi32(i2, i3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

// Token k's output from a row's tile accumulator: (lane 0 + lane 2) + (lane 1 + lane 3).
inline __m128 TileOutputs(__m512 acc) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// One super-block of R rows against T tokens, accumulated into acc. `prep(i)`
// is row i's decoded scales, `codes(i, c)` its 64 codes of chunk c; the
// direct and the pre-decoded paths below both run exactly this sequence, so
// they give the same bits.
template <typename K, int R, int T, typename PrepAt, typename CodesAt>
inline void AccumulateSuperBlock(const PrepAt& prep, const CodesAt& codes,
                                 const ActBlockQ8K* const xb[T], const TileTerms& tt,
                                 __m512 acc[R]) {
  __m512i isum[R][T];
#pragma GCC unroll 8
  for (int j = 0; j < T; ++j) {
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[j]->bsums));
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) isum[i][j] = K::Init(prep(i), bsums);
  }
#pragma GCC unroll 2
  for (int pair = 0; pair < 2; ++pair) {
    __m512i q0[R], q1[R], s[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      q0[i] = codes(i, 2 * pair);
      q1[i] = codes(i, 2 * pair + 1);
      s[i] = K::PairScales(prep(i), pair);
    }
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const __m512i x0 = _mm512_loadu_si512(xb[j]->q + 128 * pair);
      const __m512i x1 = _mm512_loadu_si512(xb[j]->q + 128 * pair + 64);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q0[i], x0);
        const __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q1[i], x1);
        isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_packs_epi32(d0, d1), s[i]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) acc[i] = K::Finish(acc[i], TileSums<T>(isum[i]), prep(i), tt);
}

// Writes a row tile's outputs: token t0 + k of row r0 + i from acc[i].
template <int R, int T>
inline void StoreTile(const MatMulArgs& a, int64_t r0, int64_t t0, const __m512 acc[R]) {
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    alignas(16) float o[4];
    _mm_store_ps(o, TileOutputs(acc[i]));
#pragma GCC unroll 4
    for (int k = 0; k < T; ++k) a.out[(t0 + k) * a.out_stride + r0 + i] = o[k];
  }
}

// A row's super-block with its scales and codes decoded, for the tiles of
// many tokens to share (KQuantDecodedTiles).
template <typename K>
struct DecodedSuperBlock {
  typename K::Prep prep;
  __m512i codes[4];
};

template <typename K>
struct KQuantMicro {
  using Block = typename K::Block;
  // Decode (one token): the token's terms of each super-block, formed once
  // for all rows rather than once per row. Rows longer than kMaxTermBlocks
  // super-blocks form them as they go.
  static constexpr int64_t kMaxTermBlocks = 64;
  TileTerms token_terms[kMaxTermBlocks];
  bool have_token_terms = false;

  void FormTokenTerms(const MatMulArgs& a) {
    const int64_t nb = a.n / kQK_K;
    if (a.n_tokens != 1 || nb > kMaxTermBlocks) return;
    const ActBlockQ8K* x = RowPtr<ActBlockQ8K>(a.act, a.act_row_bytes, 0);
    for (int64_t b = 0; b < nb; ++b) {
      const ActBlockQ8K* xb[1] = {x + b};
      token_terms[b] = K::template Terms<1>(xb);
    }
    have_token_terms = true;
  }

  // The direct path: each tile decodes its rows' super-blocks itself.
  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const Block* w[R];
    const ActBlockQ8K* x[T];
    TileRowPtrs(a, r0, t0, w, x);
    __m512 acc[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
    const int64_t nb = a.n / kQK_K;
    for (int64_t b = 0; b < nb; ++b) {
      typename K::Prep p[R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) p[i] = K::Prepare(w[i][b]);
      const ActBlockQ8K* xb[T];
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) xb[j] = x[j] + b;
      const TileTerms tt = T == 1 && have_token_terms ? token_terms[b] : K::template Terms<T>(xb);
      AccumulateSuperBlock<K, R, T>([&](int i) -> const typename K::Prep& { return p[i]; },
                                    [&](int i, int c) { return K::Codes(w[i][b], p[i], c); }, xb,
                                    tt, acc);
    }
    StoreTile<R, T>(a, r0, t0, acc);
  }
};

// The pre-decoded path, for batches of tokens: the scales and codes of a row
// tile's super-blocks are decoded once per token chunk (kDecodedBlocks at a
// time, 16 KiB for 4 rows) and every token tile of the chunk reads them from
// L1, instead of each token tile decoding them again. The accumulators live
// in `acc_store` between runs of super-blocks. Same arithmetic as the direct
// path, in the same order, so the two give the same bits. The object (about
// 125 KiB, most of it `terms`) lives on the calling thread's stack.
// kDecodedBlocks = 8 measured best (kernels_bench Q4_K tokens:64: 4 -> 111,
// 8 -> 114, 16 -> 92 GMAC/s; at 16 the decoded blocks and accumulators fill
// the 48 KiB L1 data cache; after the tile sums, 4 -> 137-144, 8 -> 149).
inline constexpr int64_t kDecodedBlocks = 8;
inline constexpr int kDecodedRows = 4;
inline constexpr int kDecodedTokens = 4;  // one tile accumulator holds 4 tokens (TileSums)
inline constexpr int64_t kStagedRows = 16;

template <typename K>
struct KQuantDecodedTiles {
  using Block = typename K::Block;
  using Decoded = DecodedSuperBlock<K>;
  Decoded dec[kDecodedRows][kDecodedBlocks];
  __m512 acc_store[tiles::kTokenChunk / 4][kDecodedRows];  // [token tile][row]
  // A chunk's outputs for kStagedRows rows, copied out one token row at a
  // time. Writing each row tile's 4 outputs per token straight into `out`
  // touched 64 lines that lie a multiple of 4 KiB apart (the row count is
  // usually a power of two), all in one L1 set; staging measured 8 % faster
  // (kernels_bench Q4_K tokens:64).
  alignas(64) float staged[tiles::kTokenChunk][kStagedRows];
  // The token tiles' terms of each super-block, formed once per chunk rather
  // than once per row tile, for rows of up to kMaxTermBlocks super-blocks.
  static constexpr int64_t kMaxTermBlocks = 32;
  TileTerms terms[tiles::kTokenChunk / 4][kMaxTermBlocks];
  bool have_terms = false;

  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t t0, int64_t b0, int64_t nb, int64_t tc) {
    __m512 acc[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc[i] = acc_store[tc / 4][i];
    const ActBlockQ8K* x[T];
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j)
      x[j] = RowPtr<ActBlockQ8K>(a.act, a.act_row_bytes, t0 + tc + j) + b0;
    for (int64_t b = 0; b < nb; ++b) {
      const ActBlockQ8K* xb[T];
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) xb[j] = x[j] + b;
      const TileTerms tt = have_terms ? terms[tc / 4][b0 + b] : K::template Terms<T>(xb);
      AccumulateSuperBlock<K, R, T>(
          [&](int i) -> const typename K::Prep& { return dec[i][b].prep; },
          [&](int i, int c) { return dec[i][b].codes[c]; }, xb, tt, acc);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc_store[tc / 4][i] = acc[i];
  }

  template <int R>
  void TokenTiles(const MatMulArgs& a, int64_t t0, int64_t nt, int64_t b0, int64_t nb) {
    int64_t tc = 0;
    for (; tc + kDecodedTokens <= nt; tc += kDecodedTokens)
      Tile<R, kDecodedTokens>(a, t0, b0, nb, tc);
    switch (nt - tc) {
      case 3:
        Tile<R, 3>(a, t0, b0, nb, tc);
        break;
      case 2:
        Tile<R, 2>(a, t0, b0, nb, tc);
        break;
      case 1:
        Tile<R, 1>(a, t0, b0, nb, tc);
        break;
      default:
        break;
    }
  }

  void Run(const MatMulArgs& a) {
    const int64_t n_blocks = a.n / kQK_K;
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += tiles::kTokenChunk) {
      const int64_t nt = tiles::MinI64(a.n_tokens - t0, tiles::kTokenChunk);
      FormTerms(a, t0, nt, n_blocks);
      for (int64_t rg = a.row_begin; rg < a.row_end; rg += kStagedRows) {
        const int64_t rg_end = tiles::MinI64(rg + kStagedRows, a.row_end);
        for (int64_t r0 = rg; r0 < rg_end; r0 += kDecodedRows) {
          const int nr = static_cast<int>(tiles::MinI64(kDecodedRows, rg_end - r0));
          RowTile(a, t0, nt, r0, nr, n_blocks);
          Stage(nt, r0 - rg, nr);
        }
        CopyOut(a, t0, nt, rg, rg_end);
      }
    }
  }

 private:
  template <int T>
  void FormTileTerms(const MatMulArgs& a, int64_t t, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      const ActBlockQ8K* xb[T];
      for (int j = 0; j < T; ++j) xb[j] = RowPtr<ActBlockQ8K>(a.act, a.act_row_bytes, t + j) + b;
      terms[(t % tiles::kTokenChunk) / 4][b] = K::template Terms<T>(xb);
    }
  }

  void FormTerms(const MatMulArgs& a, int64_t t0, int64_t nt, int64_t n_blocks) {
    have_terms = n_blocks <= kMaxTermBlocks;
    if (!have_terms) return;
    for (int64_t tc = 0; tc < nt; tc += 4) {
      switch (tiles::MinI64(4, nt - tc)) {
        case 4:
          FormTileTerms<4>(a, t0 + tc, n_blocks);
          break;
        case 3:
          FormTileTerms<3>(a, t0 + tc, n_blocks);
          break;
        case 2:
          FormTileTerms<2>(a, t0 + tc, n_blocks);
          break;
        default:
          FormTileTerms<1>(a, t0 + tc, n_blocks);
          break;
      }
    }
  }

  // Super-blocks b..b+nb−1 of rows r..r+nr−1, into L2 ahead of their decode.
  static void PrefetchWeights(const MatMulArgs& a, int64_t r, int nr, int64_t b, int64_t nb) {
    const size_t bytes = static_cast<size_t>(nb) * sizeof(Block);
    for (int i = 0; i < nr; ++i) {
      const char* from =
          reinterpret_cast<const char*>(RowPtr<Block>(a.w, a.w_row_bytes, r + i) + b);
      for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(from + o, _MM_HINT_T1);
    }
  }

  // Rows r0..r0+nr−1 against tokens t0..t0+nt−1, into acc_store.
  void RowTile(const MatMulArgs& a, int64_t t0, int64_t nt, int64_t r0, int nr, int64_t n_blocks) {
    for (int64_t g = 0; g < (nt + 3) / 4; ++g)
      for (int i = 0; i < kDecodedRows; ++i) acc_store[g][i] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < n_blocks; b0 += kDecodedBlocks) {
      const int64_t nb = tiles::MinI64(kDecodedBlocks, n_blocks - b0);
      for (int i = 0; i < nr; ++i) {
        const Block* w = RowPtr<Block>(a.w, a.w_row_bytes, r0 + i) + b0;
        for (int64_t b = 0; b < nb; ++b) {
          dec[i][b].prep = K::Prepare(w[b]);
          for (int c = 0; c < 4; ++c) dec[i][b].codes[c] = K::Codes(w[b], dec[i][b].prep, c);
        }
      }
      // The next chunk's weights are asked for (into L2) while this chunk's
      // products run: each chunk is read from memory in one burst, which the
      // hardware prefetchers start too late for. kernels_bench tokens:32 (64
      // MB of weights), three alternating runs: Q4_K 118-122 -> 129-137,
      // Q6_K 108-118 -> 125-128 GMAC/s; tokens:64 (in cache) the same.
      if (b0 + kDecodedBlocks < n_blocks) {  // the row tile's next super-blocks
        PrefetchWeights(a, r0, nr, b0 + kDecodedBlocks,
                        tiles::MinI64(kDecodedBlocks, n_blocks - b0 - kDecodedBlocks));
      } else if (r0 + kDecodedRows < a.row_end) {  // the next row tile's first ones
        PrefetchWeights(
            a, r0 + kDecodedRows,
            static_cast<int>(tiles::MinI64(kDecodedRows, a.row_end - r0 - kDecodedRows)), 0,
            tiles::MinI64(kDecodedBlocks, n_blocks));
      }
      switch (nr) {
        case 4:
          TokenTiles<4>(a, t0, nt, b0, nb);
          break;
        case 3:
          TokenTiles<3>(a, t0, nt, b0, nb);
          break;
        case 2:
          TokenTiles<2>(a, t0, nt, b0, nb);
          break;
        default:
          TokenTiles<1>(a, t0, nt, b0, nb);
          break;
      }
    }
  }

  // The staged outputs of rows rg..rg_end−1 into `out`: one 64-byte store
  // per token for a whole group (a library call per 64 bytes measured 1.8 %
  // of a serving profile), else a copy of the rows there are.
  void CopyOut(const MatMulArgs& a, int64_t t0, int64_t nt, int64_t rg, int64_t rg_end) const {
    static_assert(kStagedRows == 16, "one zmm store per token");
    if (rg_end - rg == kStagedRows) {
      for (int64_t t = 0; t < nt; ++t)
        _mm512_storeu_ps(a.out + (t0 + t) * a.out_stride + rg, _mm512_load_ps(staged[t]));
      return;
    }
    for (int64_t t = 0; t < nt; ++t)
      std::memcpy(a.out + (t0 + t) * a.out_stride + rg, staged[t],
                  static_cast<size_t>(rg_end - rg) * sizeof(float));
  }

  // The row tile's outputs into columns col..col+3 of `staged`, one 16-byte
  // store per token (lanes past nr hold zeros and are never copied out).
  void Stage(int64_t nt, int64_t col, int nr) {
    for (int64_t t = 0; t < nt; t += 4) {
      __m128 o[kDecodedRows];
      for (int i = 0; i < kDecodedRows; ++i)
        o[i] = i < nr ? TileOutputs(acc_store[t / 4][i]) : _mm_setzero_ps();
      _MM_TRANSPOSE4_PS(o[0], o[1], o[2], o[3]);
      for (int64_t k = 0; k < tiles::MinI64(4, nt - t); ++k)
        _mm_storeu_ps(&staged[t + k][col], o[k]);
    }
  }
};

// Below this many tokens a row tile's decode is shared by too few token tiles
// to pay for writing it out.
inline constexpr int64_t kDecodedMinTokens = 8;

template <typename K>
void KQuantMatMul(const MatMulArgs& a) {
  if (a.n_tokens >= kDecodedMinTokens) {
    KQuantDecodedTiles<K> m;
    m.Run(a);
    return;
  }
  KQuantMicro<K> m;
  m.FormTokenTerms(a);
  tiles::Drive<4, 4>(m, a);
}

// Which kind a block type takes.
template <typename Block>
using KQuantKind = std::conditional_t<std::is_same_v<Block, BlockQ6_K>, Q6KKind, K4Kind<Block>>;

}  // namespace

template <typename Block>
void MatMulKQuantAvx512(const MatMulArgs& a) {
  KQuantMatMul<KQuantKind<Block>>(a);
}

// The instantiations the traits table (type_traits.cpp) names.
template void MatMulKQuantAvx512<BlockQ4_K>(const MatMulArgs&);
template void MatMulKQuantAvx512<BlockQ5_K>(const MatMulArgs&);
template void MatMulKQuantAvx512<BlockQ6_K>(const MatMulArgs&);

}  // namespace strata::kernels::internal

#include "kernels/internal/avx512_end.inc"
