// AVX2 attention (AttendArgs in kernels/kernels.h), one pass over the rows
// with an online softmax. Positions go in blocks of 32: the key rows of a
// block are transposed once into four [head_dim][8] tiles shared by every
// query that reads them (every query of the call where the runs share the
// rows), each query's 32 scores are head_dim FMAs per tile with its own
// elements broadcast, and then each query's running maximum, sum and value
// sums (kept in its output) are updated: the sums are scaled by
// e^(old max − new max) when the maximum grows, the block's exponentials
// added. So every key and value row is read once per call whatever the
// context length, and the scratch is one block of scores per query. F16 and
// Q8_0 rows are converted to floats as they are loaded (KvLoad8).
//
// Batch invariance: block boundaries are fixed positions (multiples of 32),
// and a query's scores, maxima, sums and value FMAs run in the same order
// whichever queries share the call; a query skips the positions past its
// own (a branch per query, so rows it must not see never reach it, even as
// NaN·0).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/internal/kernels_impl.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace strata::kernels::internal {
namespace {

constexpr int32_t kBlock = 32;  // positions per block: four 8-position tiles

// The address of the element `off` elements from `base` (for Q8_0, the
// start of its block).
template <TensorType T>
inline const char* KvAt(const void* base, size_t off) {
  return static_cast<const char*>(base) + KvRowBytes(T, off);
}

template <TensorType T>
struct KvLoad8;
template <>
struct KvLoad8<TensorType::kF32> {
  // Elements [off, off + 8).
  static __m256 Load8(const void* base, size_t off) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + off);
  }
};
template <>
struct KvLoad8<TensorType::kF16> {
  static __m256 Load8(const void* base, size_t off) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(KvAt<TensorType::kF16>(base, off))));
  }
};
template <>
struct KvLoad8<TensorType::kQ8_0> {
  // off is a multiple of 8: a quarter of one block, d·q.
  static __m256 Load8(const void* base, size_t off) {
    const char* block = KvAt<TensorType::kQ8_0>(base, off);
    uint16_t h;
    __builtin_memcpy(&h, block, sizeof(h));
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + off % 32));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  }
};

// e^x for the x <= 0 of a softmax: x = n·ln2 + r with |r| <= ln2/2, e^r by
// its Taylor series to degree 6 (relative error below 2e-7), scaled by 2^n
// through the exponent bits. Inputs below -87 give e^-87 (about 1.6e-38,
// the smallest such power that is a normal float).
inline __m256 Exp(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723212e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

inline float Sum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
inline float Max8(__m256 v) {
  const __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
}

// In place: r[c] lane j becomes the old r[j] lane c.
inline void Transpose8(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 2; ++i) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
    r[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
  }
}

// The np (<= 32) key rows of positions p0.. at `row_off`, transposed into
// four tiles kt[t] = [head_dim][8] (rows past np are zero).
template <TensorType T>
void TransposeKeys(const AttendArgs& a, const size_t* row_off, int64_t p0, int64_t np, float* kt) {
  const int64_t hd = a.head_dim;
  for (int t = 0; t < 4; ++t) {
    float* tile = kt + t * 8 * hd;
    const int64_t base = p0 + 8 * t;
    const int64_t n = std::clamp<int64_t>(np - 8 * t, 0, 8);
    for (int64_t i0 = 0; i0 < hd; i0 += 8) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) {
        r[j] = j < n ? KvLoad8<T>::Load8(a.k_base, row_off[base + j] + static_cast<size_t>(i0))
                     : _mm256_setzero_ps();
      }
      Transpose8(r);
      for (int c = 0; c < 8; ++c) _mm256_store_ps(tile + (i0 + c) * 8, r[c]);
    }
  }
}

// Scores of G queries from m0 for the 32 positions of the tiles: one FMA
// chain over the head dimension per query and tile, in dimension order.
template <int G>
void ScoreGroup(const AttendArgs& a, int m0, const float* kt, float* scores) {
  const int64_t hd = a.head_dim;
  __m256 acc[G][4];
  for (int g = 0; g < G; ++g) {
    for (int t = 0; t < 4; ++t) acc[g][t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < hd; ++i) {
    __m256 k[4];
    for (int t = 0; t < 4; ++t) k[t] = _mm256_load_ps(kt + t * 8 * hd + i * 8);
    for (int g = 0; g < G; ++g) {
      const __m256 q = _mm256_broadcast_ss(a.q[m0 + g] + i);
      for (int t = 0; t < 4; ++t) acc[g][t] = _mm256_fmadd_ps(q, k[t], acc[g][t]);
    }
  }
  const __m256 scale = _mm256_set1_ps(a.scale);
  for (int g = 0; g < G; ++g) {
    for (int t = 0; t < 4; ++t) {
      _mm256_storeu_ps(scores + (m0 + g) * kBlock + 8 * t, _mm256_mul_ps(acc[g][t], scale));
    }
  }
}

void ScoreQueries(const AttendArgs& a, int m_begin, int m_end, const float* kt, float* scores) {
  int m = m_begin;
  for (; m + 2 <= m_end; m += 2) ScoreGroup<2>(a, m, kt, scores);
  if (m < m_end) ScoreGroup<1>(a, m, kt, scores);
}

// Asks for the rows of positions [p_begin, p_end) at `row_off` ahead of
// their use (rows of scattered KV blocks the hardware prefetchers do not
// foresee): head_dim elements of each.
template <TensorType T>
inline void PrefetchRows(const void* base, const size_t* row_off, int64_t p_begin, int64_t p_end,
                         int64_t head_dim) {
  const int64_t lines =
      static_cast<int64_t>((KvRowBytes(T, static_cast<size_t>(head_dim)) + 63) / 64);
  for (int64_t p = p_begin; p < p_end; ++p) {
    const char* row = KvAt<T>(base, row_off[p]);
    for (int64_t i = 0; i < lines; ++i) _mm_prefetch(row + 64 * i, _MM_HINT_T0);
  }
}

// Adds positions [p_begin, p_end) of G queries of one run, weighted by
// their exponentials in `scores`, to their value sums out[m][d0 .. d0 + 8C),
// first scaling those sums by alpha[m]. A query's lanes change only at its
// own positions.
template <TensorType T, int G, int C>
void ValueGroup(const AttendArgs& a, int m0, int64_t d0, const float* scores, const float* alpha,
                int32_t p_begin, int32_t p_end) {
  __m256 acc[G][C];
  for (int g = 0; g < G; ++g) {
    const __m256 s = _mm256_set1_ps(alpha[m0 + g]);
    for (int c = 0; c < C; ++c) {
      acc[g][c] = _mm256_mul_ps(_mm256_loadu_ps(a.out[m0 + g] + d0 + 8 * c), s);
    }
  }
  const size_t* row_off = a.row_off[m0];
  for (int32_t p = p_begin; p < p_end; ++p) {
    const size_t v = row_off[p] + static_cast<size_t>(d0);
    __m256 vv[C];
    for (int c = 0; c < C; ++c) vv[c] = KvLoad8<T>::Load8(a.v_base, v + 8 * c);
    for (int g = 0; g < G; ++g) {
      if (p >= a.n_pos[m0 + g]) continue;
      const __m256 w = _mm256_broadcast_ss(scores + (m0 + g) * kBlock + (p - p_begin));
      for (int c = 0; c < C; ++c) acc[g][c] = _mm256_fmadd_ps(w, vv[c], acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(a.out[m0 + g] + d0 + 8 * c, acc[g][c]);
  }
}

template <TensorType T, int G>
void ValueGroupC(const AttendArgs& a, int m0, int64_t d0, int c, const float* scores,
                 const float* alpha, int32_t p_begin, int32_t p_end) {
  switch (c) {
    case 4:
      ValueGroup<T, G, 4>(a, m0, d0, scores, alpha, p_begin, p_end);
      return;
    case 3:
      ValueGroup<T, G, 3>(a, m0, d0, scores, alpha, p_begin, p_end);
      return;
    case 2:
      ValueGroup<T, G, 2>(a, m0, d0, scores, alpha, p_begin, p_end);
      return;
    default:
      ValueGroup<T, G, 1>(a, m0, d0, scores, alpha, p_begin, p_end);
      return;
  }
}

template <TensorType T>
void AttendTyped(const AttendArgs& a) {
  const int nq = a.n_q;
  const int64_t hd = a.head_dim;
  // Scratch: a block of scores per query, then the four key tiles (32-byte aligned).
  float* scores = a.scratch;
  const uintptr_t tile_at = reinterpret_cast<uintptr_t>(scores + nq * kBlock);
  float* kt = reinterpret_cast<float*>((tile_at + 31) & ~uintptr_t{31});

  // Runs: consecutive queries with the same rows (the tokens of one sequence).
  int run_begin[kMaxAttendQueries + 1];
  int32_t run_max[kMaxAttendQueries];
  int n_runs = 0;
  int32_t n_max = 0;
  for (int m = 0; m < nq; ++m) {
    if (m == 0 || a.row_off[m] != a.row_off[m - 1]) {
      run_begin[n_runs] = m;
      run_max[n_runs] = 0;
      ++n_runs;
    }
    run_max[n_runs - 1] = std::max(run_max[n_runs - 1], a.n_pos[m]);
    n_max = std::max(n_max, a.n_pos[m]);
  }
  run_begin[n_runs] = nq;

  float run_m[kMaxAttendQueries], run_l[kMaxAttendQueries], alpha[kMaxAttendQueries];
  for (int m = 0; m < nq; ++m) {
    run_m[m] = -__builtin_inff();
    run_l[m] = 0.0f;
    for (int64_t i = 0; i < hd; i += 8) _mm256_storeu_ps(a.out[m] + i, _mm256_setzero_ps());
  }

  for (int32_t pb = 0; pb < n_max; pb += kBlock) {
    // Scores: one set of tiles for every query where the runs share the
    // block's rows, else one per run, up to the run's own last position.
    if (pb + kBlock <= a.shared_pos) {
      PrefetchRows<T>(a.k_base, a.row_off[0], pb + kBlock,
                      std::min<int64_t>(pb + 2 * kBlock, a.shared_pos), hd);
      TransposeKeys<T>(a, a.row_off[0], pb, kBlock, kt);
      ScoreQueries(a, 0, nq, kt, scores);
    } else {
      for (int r = 0; r < n_runs; ++r) {
        if (pb >= run_max[r]) continue;
        PrefetchRows<T>(a.k_base, a.row_off[run_begin[r]], pb + kBlock,
                        std::min<int64_t>(pb + 2 * kBlock, run_max[r]), hd);
        TransposeKeys<T>(a, a.row_off[run_begin[r]], pb, std::min(kBlock, run_max[r] - pb), kt);
        ScoreQueries(a, run_begin[r], run_begin[r + 1], kt, scores);
      }
    }
    // The online softmax: each query's new maximum, the scale of what it
    // has summed so far, and this block's exponentials (zero past its
    // last position) added to its sum.
    for (int m = 0; m < nq; ++m) {
      const int32_t n = a.n_pos[m] - pb;
      if (n <= 0) {
        alpha[m] = 1.0f;
        continue;
      }
      float* s = scores + m * kBlock;
      __m256 live[4];
      __m256 vmax = _mm256_set1_ps(-__builtin_inff());
      for (int t = 0; t < 4; ++t) {
        const __m256i lane =
            _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(8 * t));
        live[t] = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
        vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(_mm256_set1_ps(-__builtin_inff()),
                                                    _mm256_loadu_ps(s + 8 * t), live[t]));
      }
      const float m_new = std::max(run_m[m], Max8(vmax));
      alpha[m] = _mm256_cvtss_f32(Exp(_mm256_set1_ps(run_m[m] - m_new)));
      run_m[m] = m_new;
      const __m256 mx = _mm256_set1_ps(m_new);
      __m256 vsum = _mm256_setzero_ps();
      for (int t = 0; t < 4; ++t) {
        const __m256 e = _mm256_and_ps(Exp(_mm256_sub_ps(_mm256_loadu_ps(s + 8 * t), mx)), live[t]);
        _mm256_storeu_ps(s + 8 * t, e);
        vsum = _mm256_add_ps(vsum, e);
      }
      run_l[m] = run_l[m] * alpha[m] + Sum8(vsum);
    }
    // Values: per group of two queries of a run and 32 dimensions, the
    // block's rows read once from memory and from L1 by the other groups.
    for (int r = 0; r < n_runs; ++r) {
      if (pb >= run_max[r]) continue;
      const int32_t pe = std::min(pb + kBlock, run_max[r]);
      if (r == 0 || pe > a.shared_pos) {
        PrefetchRows<T>(a.v_base, a.row_off[run_begin[r]], pb, pe, hd);
      }
      for (int64_t d0 = 0; d0 < hd; d0 += 32) {
        const int c = hd - d0 >= 32 ? 4 : static_cast<int>((hd - d0) / 8);
        int m = run_begin[r];
        for (; m + 2 <= run_begin[r + 1]; m += 2) {
          ValueGroupC<T, 2>(a, m, d0, c, scores, alpha, pb, pe);
        }
        if (m < run_begin[r + 1]) ValueGroupC<T, 1>(a, m, d0, c, scores, alpha, pb, pe);
      }
    }
  }
  for (int m = 0; m < nq; ++m) {
    const __m256 inv = _mm256_set1_ps(1.0f / run_l[m]);
    for (int64_t i = 0; i < hd; i += 8) {
      _mm256_storeu_ps(a.out[m] + i, _mm256_mul_ps(_mm256_loadu_ps(a.out[m] + i), inv));
    }
  }
}

}  // namespace

void AttendAvx2(const AttendArgs& a) {
  if (a.head_dim % 8 != 0) {
    AttendScalar(a);
    return;
  }
  switch (a.kv_type) {
    case TensorType::kF16:
      AttendTyped<TensorType::kF16>(a);
      return;
    case TensorType::kQ8_0:
      AttendTyped<TensorType::kQ8_0>(a);
      return;
    default:
      AttendTyped<TensorType::kF32>(a);
      return;
  }
}

// The feed-forward's gate shares this file's exponential: 8 at a time, the
// tail through a padded copy so it takes the same instructions. With
// z = e^-|g| (never overflowing), sigmoid(g) = 1 / (1 + z) for g >= 0 and
// z / (1 + z) below; z is taken as 0 past |g| = 87, where g·sigmoid(g) is
// below 1e-35.
void SwiGluAvx2(float* gate, const float* up, int64_t n) {
  auto eight = [](const float* g8, const float* u8, float* out) {
    const __m256 g = _mm256_loadu_ps(g8);
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 mag = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), g);
    const __m256 z = _mm256_and_ps(Exp(_mm256_sub_ps(_mm256_setzero_ps(), mag)),
                                   _mm256_cmp_ps(mag, _mm256_set1_ps(87.0f), _CMP_LE_OQ));
    const __m256 num = _mm256_blendv_ps(z, one, _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_GE_OQ));
    const __m256 silu = _mm256_mul_ps(g, _mm256_div_ps(num, _mm256_add_ps(one, z)));
    _mm256_storeu_ps(out, _mm256_mul_ps(silu, _mm256_loadu_ps(u8)));
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) eight(gate + i, up + i, gate + i);
  if (i < n) {
    float g[8] = {}, u[8] = {}, out[8];
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    eight(g, u, out);
    std::copy(out, out + (n - i), gate + i);
  }
}

}  // namespace strata::kernels::internal

#pragma GCC pop_options
