// AVX-512 k-quant matrix products (Q4_K, Q5_K, Q6_K weights against Q8_K
// activations), for the AVX-512 kernel table (kernels_avx512.cpp). 512-bit
// int8·int8 → int16 → int32 products keep a whole super-block in integers.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "model/internal/blocks.h"
#include "model/internal/kernels_impl.h"
#include "util/status.h"

#include "model/internal/avx512_begin.inc"

namespace strata::model::internal {
namespace {

#include "model/internal/matmul_tiles.inc"
#include "model/internal/avx512_matmul.inc"

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
// stays in those lanes (each below 2^24), converted to float once:
//   acc += (cvt(isum)·d)·da                      (Q6_K: isum starts at −32·Σ sc·bsums)
//   acc −= [dmin·m_j]_j · [da·(bsums[2j] + bsums[2j+1])]_j   (Q4_K, Q5_K; 8 lanes)
// with one 16-lane float accumulator per output, reduced at the end. The
// factors of the min term are formed once per row and once per token.
//
// vpackssdw(p, p') interleaves per 128-bit lane L: words 0..3 are p's lanes
// 4L..4L+3, words 4..7 p''s. The scale words of a chunk pair follow that order.

// 6-bit scales and mins of Q4_K/Q5_K as bytes: sc[0..7] (low 8), m[0..7] (high 8).
inline __m128i ScaleMinBytesK4(const uint8_t* scales) {
  uint64_t b07;
  uint32_t b811;
  std::memcpy(&b07, scales, sizeof(b07));
  std::memcpy(&b811, scales + 8, sizeof(b811));
  const uint64_t u2 = b811;
  // [sc0..3, m0..3]: the low 6 bits of bytes 0..7. [sc4..7, m4..7]: the low,
  // then high, nibbles of bytes 8..11, with the top 2 bits of bytes 0..7 above.
  const uint64_t lo = b07 & 0x3f3f3f3f3f3f3f3full;
  const uint64_t hi = ((u2 | (u2 << 28)) & 0x0f0f0f0f0f0f0f0full) |
                      (((b07 >> 6) & 0x0303030303030303ull) << 4);
  // Reorder to sc0..3, sc4..7, m0..3, m4..7.
  const __m128i v = _mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo));
  return _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15));
}

// One row's super-block of Q4_K/Q5_K, decoded once for all tokens of a tile.
struct PrepK4 {
  __m512i scales[2];  // words for chunk pairs (0, 1) and (2, 3), in vpackssdw order
  __m512 mins;        // lanes 0..7: dmin·m[j] (exact); 8..15: 0
  __m512 d;
};
// One token's super-block terms, formed once for all rows of a tile.
struct TokenTerms {
  __m512 da;    // the activation scale, broadcast
  __m512 sums;  // lanes 0..7: da·(bsums[2j] + bsums[2j+1]); 8..15: 0 (Q4_K/Q5_K only)
};

inline PrepK4 PrepareK4(const uint8_t* scales, uint16_t d, uint16_t dmin) {
  PrepK4 p;
  const __m128i bytes = ScaleMinBytesK4(scales);
  const __m512i words = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(bytes));
  // Chunk c holds sub-block 2c in its lanes 0..7 (128-bit lanes 0, 1) and 2c+1
  // in lanes 8..15: pair (0, 1) has sc0, sc2 in 128-bit lanes 0, 1 and sc1, sc3
  // in lanes 2, 3.
  const __m512i idx = _mm512_set_epi64(0x0003000300030003, 0x0001000100010001, 0x0003000300030003,
                                       0x0001000100010001, 0x0002000200020002, 0,
                                       0x0002000200020002, 0);
  p.scales[0] = _mm512_permutexvar_epi16(idx, words);
  p.scales[1] = _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16(4)), words);
  const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(bytes, bytes)));
  p.mins = _mm512_zextps256_ps512(_mm256_mul_ps(m, _mm256_set1_ps(_cvtsh_ss(dmin))));
  p.d = _mm512_set1_ps(_cvtsh_ss(d));
  return p;
}

// The 64 codes of chunk c: low nibbles of qs[32c..32c+31], then their high nibbles.
inline __m512i ChunkNibblesK4(const uint8_t* qs, int c) {
  const __m512i v =
      _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c)));
  return _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), _mm512_set1_epi8(0x0F));
}

struct Q4KKind {
  using Block = BlockQ4_K;
  // Whether batches share one decode of a row tile (KQuantDecodedTiles).
  // Measured with kernels_bench (tokens:64): Q4_K 100 -> 111-114 GMAC/s;
  // Q5_K unchanged; Q6_K, whose codes cost little to form, slower (107-113 ->
  // 101-104, three alternating runs of each).
  static constexpr bool kShareDecode = true;
  using Prep = PrepK4;
  static Prep Prepare(const Block& b) { return PrepareK4(b.scales, b.d, b.dmin); }
  static __m512i Init(const Prep&, __m256i) { return _mm512_setzero_si512(); }
  static __m512i Codes(const Block& b, const Prep&, int c) { return ChunkNibblesK4(b.qs, c); }
  static __m512i PairScales(const Prep& p, int pair) { return p.scales[pair]; }
  static TokenTerms Token(const ActBlockQ8K& x) {
    const float da = x.d;
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
    const __m256 pairs = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, _mm256_set1_epi16(1)));
    return {_mm512_set1_ps(da), _mm512_zextps256_ps512(_mm256_mul_ps(pairs, _mm256_set1_ps(da)))};
  }
  static __m512 Finish(__m512 acc, __m512i isum, const Prep& p, const TokenTerms& t) {
    acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(isum), p.d), t.da, acc);
    return _mm512_fnmadd_ps(p.mins, t.sums, acc);
  }
};

struct Q5KKind {
  using Block = BlockQ5_K;
  static constexpr bool kShareDecode = false;
  struct Prep : PrepK4 {
    __m512i qh;  // qh[0..31] in both halves
  };
  static Prep Prepare(const Block& b) {
    Prep p;
    static_cast<PrepK4&>(p) = PrepareK4(b.scales, b.d, b.dmin);
    p.qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh)));
    return p;
  }
  static __m512i Init(const Prep&, __m256i) { return _mm512_setzero_si512(); }
  static __m512i Codes(const Block& b, const Prep& p, int c) {
    // Sub-block 2c's fifth bits are bit 2c of qh[l], sub-block 2c+1's bit 2c+1.
    const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c))),
                                           _mm256_set1_epi8(static_cast<char>(2 << (2 * c))), 1);
    const __m512i nib = ChunkNibblesK4(b.qs, c);
    return _mm512_mask_add_epi8(nib, _mm512_test_epi8_mask(p.qh, bit), nib, _mm512_set1_epi8(16));
  }
  static __m512i PairScales(const Prep& p, int pair) { return p.scales[pair]; }
  static TokenTerms Token(const ActBlockQ8K& x) { return Q4KKind::Token(x); }
  static __m512 Finish(__m512 acc, __m512i isum, const Prep& p, const TokenTerms& t) {
    return Q4KKind::Finish(acc, isum, p, t);
  }
};

struct Q6KKind {
  using Block = BlockQ6_K;
  static constexpr bool kShareDecode = false;
  struct Prep {
    __m512i scales[2];  // words for chunk pairs (0, 1) and (2, 3), in vpackssdw order
    __m256i offset;     // words: −32·scales[g] (pairs with bsums[g])
    __m512 d;
  };
  static Prep Prepare(const Block& b) {
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
  static __m512i Codes(const Block& b, const Prep&, int c) {
    const int h = c / 2, e = c % 2;
    __m512i low = _mm512_loadu_si512(b.ql + 64 * h);
    if (e == 1) low = _mm512_srli_epi16(low, 4);
    const __m512i qh =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h)));
    // Move the wanted 2 bits to bits 4..5 of each byte (16-bit shifts; the bits
    // that cross into a neighbouring byte are masked off).
    const __m512i hi =
        e == 0 ? _mm512_sllv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1))
               : _mm512_srlv_epi16(qh, _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1));
    // (low & 0x0F) | (hi & 0x30)
    return _mm512_ternarylogic_epi32(low, _mm512_set1_epi8(0x0F),
                                     _mm512_and_si512(hi, _mm512_set1_epi8(0x30)), 0xEA);
  }
  static __m512i PairScales(const Prep& p, int pair) { return p.scales[pair]; }
  static TokenTerms Token(const ActBlockQ8K& x) { return {_mm512_set1_ps(x.d), _mm512_setzero_ps()}; }
  static __m512 Finish(__m512 acc, __m512i isum, const Prep& p, const TokenTerms& t) {
    return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(isum), p.d), t.da, acc);
  }
};

// One super-block of R rows against T tokens, accumulated into acc. `prep(i)`
// is row i's decoded scales, `codes(i, c)` its 64 codes of chunk c; the
// direct and the pre-decoded paths below both run exactly this sequence, so
// they give the same bits.
template <typename K, int R, int T, typename PrepAt, typename CodesAt>
inline void AccumulateSuperBlock(const PrepAt& prep, const CodesAt& codes,
                                 const ActBlockQ8K* const xb[T], __m512 acc[R][T]) {
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
  for (int j = 0; j < T; ++j) {
    const TokenTerms tt = K::Token(*xb[j]);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc[i][j] = K::Finish(acc[i][j], isum[i][j], prep(i), tt);
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
  // The direct path: each tile decodes its rows' super-blocks itself.
  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const Block* w[R];
    const ActBlockQ8K* x[T];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) w[i] = RowPtr<Block>(a.w, a.w_row_bytes, r0 + i);
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) x[j] = RowPtr<ActBlockQ8K>(a.act, a.act_row_bytes, t0 + j);
    __m512 acc[R][T];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
    const int64_t nb = a.n / kQK_K;
    for (int64_t b = 0; b < nb; ++b) {
      typename K::Prep p[R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) p[i] = K::Prepare(w[i][b]);
      const ActBlockQ8K* xb[T];
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) xb[j] = x[j] + b;
      AccumulateSuperBlock<K, R, T>([&](int i) -> const typename K::Prep& { return p[i]; },
                                    [&](int i, int c) { return K::Codes(w[i][b], p[i], c); }, xb,
                                    acc);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.out_stride + r0 + i] = Hsum512(acc[i][j]);
  }
};

// The pre-decoded path, for batches of tokens: the scales and codes of a row
// tile's super-blocks are decoded once per token chunk (kDecodedBlocks at a
// time, 16 KiB for 4 rows) and every token tile of the chunk reads them from
// L1, instead of each token tile decoding them again. The accumulators live
// in `acc_store` between runs of super-blocks. Same arithmetic as the direct
// path, in the same order, so the two give the same bits. The object (32 KiB)
// lives on the calling thread's stack. kDecodedBlocks = 8 measured best
// (kernels_bench Q4_K tokens:64: 4 -> 111, 8 -> 114, 16 -> 92 GMAC/s; at 16
// the decoded blocks and accumulators fill the 48 KiB L1 data cache).
inline constexpr int64_t kDecodedBlocks = 8;
inline constexpr int kDecodedRows = 4;
inline constexpr int kDecodedTokens = 4;

template <typename K>
struct KQuantDecodedTiles {
  using Block = typename K::Block;
  using Decoded = DecodedSuperBlock<K>;
  Decoded dec[kDecodedRows][kDecodedBlocks];
  __m512 acc_store[tiles::kTokenChunk][kDecodedRows];

  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t t0, int64_t b0, int64_t nb, int64_t tc) {
    __m512 acc[R][T];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) acc[i][j] = acc_store[tc + j][i];
    const ActBlockQ8K* x[T];
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) x[j] = RowPtr<ActBlockQ8K>(a.act, a.act_row_bytes, t0 + tc + j) + b0;
    for (int64_t b = 0; b < nb; ++b) {
      const ActBlockQ8K* xb[T];
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) xb[j] = x[j] + b;
      AccumulateSuperBlock<K, R, T>(
          [&](int i) -> const typename K::Prep& { return dec[i][b].prep; },
          [&](int i, int c) { return dec[i][b].codes[c]; }, xb, acc);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) acc_store[tc + j][i] = acc[i][j];
  }

  template <int R>
  void TokenTiles(const MatMulArgs& a, int64_t t0, int64_t nt, int64_t b0, int64_t nb) {
    int64_t tc = 0;
    for (; tc + kDecodedTokens <= nt; tc += kDecodedTokens) Tile<R, kDecodedTokens>(a, t0, b0, nb, tc);
    switch (nt - tc) {
      case 3: Tile<R, 3>(a, t0, b0, nb, tc); break;
      case 2: Tile<R, 2>(a, t0, b0, nb, tc); break;
      case 1: Tile<R, 1>(a, t0, b0, nb, tc); break;
      default: break;
    }
  }

  void Run(const MatMulArgs& a) {
    const int64_t n_blocks = a.n / kQK_K;
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += tiles::kTokenChunk) {
      const int64_t nt = tiles::MinI64(a.n_tokens - t0, tiles::kTokenChunk);
      for (int64_t r0 = a.row_begin; r0 < a.row_end; r0 += kDecodedRows) {
        const int nr = static_cast<int>(tiles::MinI64(kDecodedRows, a.row_end - r0));
        for (int64_t t = 0; t < nt; ++t)
          for (int i = 0; i < kDecodedRows; ++i) acc_store[t][i] = _mm512_setzero_ps();
        for (int64_t b0 = 0; b0 < n_blocks; b0 += kDecodedBlocks) {
          const int64_t nb = tiles::MinI64(kDecodedBlocks, n_blocks - b0);
          for (int i = 0; i < nr; ++i) {
            const Block* w = RowPtr<Block>(a.w, a.w_row_bytes, r0 + i) + b0;
            for (int64_t b = 0; b < nb; ++b) {
              dec[i][b].prep = K::Prepare(w[b]);
              for (int c = 0; c < 4; ++c) dec[i][b].codes[c] = K::Codes(w[b], dec[i][b].prep, c);
            }
          }
          switch (nr) {
            case 4: TokenTiles<4>(a, t0, nt, b0, nb); break;
            case 3: TokenTiles<3>(a, t0, nt, b0, nb); break;
            case 2: TokenTiles<2>(a, t0, nt, b0, nb); break;
            default: TokenTiles<1>(a, t0, nt, b0, nb); break;
          }
        }
        for (int64_t t = 0; t < nt; ++t)
          for (int i = 0; i < nr; ++i)
            a.out[(t0 + t) * a.out_stride + r0 + i] = Hsum512(acc_store[t][i]);
      }
    }
  }
};

// Below this many tokens a row tile's decode is shared by too few token tiles
// to pay for writing it out.
inline constexpr int64_t kDecodedMinTokens = 8;

template <typename K>
void KQuantMatMul(const MatMulArgs& a) {
  if constexpr (K::kShareDecode) {
    if (a.n_tokens >= kDecodedMinTokens) {
      KQuantDecodedTiles<K> m;
      m.Run(a);
      return;
    }
  }
  KQuantMicro<K> m;
  tiles::Drive<4, 4>(m, a);
}

}  // namespace

void MatMulKQuantAvx512(const MatMulArgs& a) {
  switch (a.w_type) {
    case TensorType::kQ4_K:
      KQuantMatMul<Q4KKind>(a);
      return;
    case TensorType::kQ5_K:
      KQuantMatMul<Q5KKind>(a);
      return;
    case TensorType::kQ6_K:
      KQuantMatMul<Q6KKind>(a);
      return;
    default:
      STRATA_CHECK_MSG(false, "MatMulKQuantAvx512 takes Q4_K, Q5_K and Q6_K weights");
  }
}

}  // namespace strata::model::internal

#include "model/internal/avx512_end.inc"
