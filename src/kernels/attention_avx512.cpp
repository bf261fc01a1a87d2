// AVX-512 attention (AttendArgs in kernels/kernels.h). Per 16 positions the
// key rows are transposed once into a [head_dim][16] tile shared by every
// query of the group, so a query's 16 scores are head_dim FMAs with its own
// elements broadcast (two tiles at a time); exponentials are a vector
// polynomial; the value sums run 32 positions at a time for every group of 4
// queries, so a block's value rows come from memory once and from L1 for the
// other groups. Rows of the next tile or block are prefetched: KV blocks are
// scattered and the hardware prefetchers do not follow them. Every lane of
// every query runs the same sequence of operations whatever the group holds
// (masked FMAs skip positions beyond a query's own), which keeps results
// independent of the batch. F16 and Q8_0 rows are converted to floats as
// they are loaded, 16 elements at a time (KvLoad), so the arithmetic after
// the load is the F32 kernel's.
//
// kernels_bench (single thread, GMAC/s) before -> after the blocked value
// sums, two-tile scores, padded score rows and prefetching:
// 8 sequences sharing 992 of 1024 positions 48.6 -> 63-69 in cache and
// 41-48 -> 50 with the rows laid out as the KV pool holds them for 22
// layers; 64 queries of one sequence over 1024 positions 50.5 -> 71-73.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/internal/kernels_impl.h"

#include "kernels/internal/avx512_begin.inc"

namespace strata::kernels::internal {
namespace {

// e^x for the x <= 0 of a softmax: x = n·ln2 + r with |r| <= ln2/2, e^r by its
// Taylor series to degree 6 (relative error below 2e-7), scaled by 2^n.
// Inputs below -100 give e^-100 (about 4e-44, a denormal) instead of less.
inline __m512 Exp(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-100.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Loads of a KV row's elements, as floats, per element type T.
// The address of the element `off` elements from `base` (for Q8_0, the
// start of its block).
template <TensorType T>
inline const char* KvAt(const void* base, size_t off) {
  return static_cast<const char*>(base) + KvRowBytes(T, off);
}

template <TensorType T>
struct KvLoad;
template <>
struct KvLoad<TensorType::kF32> {
  // Elements [off, off + 16).
  static __m512 Load16(const void* base, size_t off) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + off);
  }
};
template <>
struct KvLoad<TensorType::kF16> {
  static __m512 Load16(const void* base, size_t off) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(KvAt<TensorType::kF16>(base, off))));
  }
};
template <>
struct KvLoad<TensorType::kQ8_0> {
  // off is a multiple of 16: half of one block, d·q.
  static __m512 Load16(const void* base, size_t off) {
    const char* block = KvAt<TensorType::kQ8_0>(base, off);
    uint16_t h;
    __builtin_memcpy(&h, block, sizeof(h));
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + off % 32));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
  }
};

inline __m512 Lo64(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
inline __m512 Hi64(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

// In place: r[c] lane j becomes the old r[j] lane c.
inline void Transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // Per 128-bit lane L, r[4i + k] then holds element 4L + k of rows 4i..4i+3.
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = Lo64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = Hi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = Lo64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = Hi64(t[4 * i + 1], t[4 * i + 3]);
  }
  __m512 out[16];
  for (int k = 0; k < 4; ++k) {
    const __m512 a = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);
    const __m512 b = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xDD);
    const __m512 c = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
    const __m512 d = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xDD);
    out[k] = _mm512_shuffle_f32x4(a, c, 0x88);
    out[4 + k] = _mm512_shuffle_f32x4(b, d, 0x88);
    out[8 + k] = _mm512_shuffle_f32x4(a, c, 0xDD);
    out[12 + k] = _mm512_shuffle_f32x4(b, d, 0xDD);
  }
  for (int c = 0; c < 16; ++c) r[c] = out[c];
}

// Scores of G queries for 16 positions: one FMA chain over the head
// dimension per query, in dimension order. Up to 8 chains run side by side
// (an FMA's latency is 4 cycles and two issue per cycle).
// Positions per block of the value pass (their rows of one head, 8 KiB at
// head_dim 64, stay in L1 while every group of the tile walks them).
constexpr int32_t kValueBlock = 32;

// Scores of G queries for 16·NT positions (NT transposed key tiles, one after
// the other in kt): one FMA chain over the head dimension per query and tile,
// in dimension order. G·NT chains run side by side (an FMA's latency is 4
// cycles and two issue per cycle), and each broadcast query element serves NT
// tiles.
template <int G, int NT>
void ScoreGroup(const AttendArgs& a, int m0, const float* kt, int64_t p0, float* scores,
                int64_t stride) {
  const int64_t tile_floats = 16 * a.head_dim;
  __m512 acc[G][NT];
  for (int g = 0; g < G; ++g) {
    for (int t = 0; t < NT; ++t) acc[g][t] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < a.head_dim; ++i) {
    __m512 k[NT];
    for (int t = 0; t < NT; ++t) k[t] = _mm512_load_ps(kt + t * tile_floats + i * 16);
    for (int g = 0; g < G; ++g) {
      const __m512 q = _mm512_set1_ps(a.q[m0 + g][i]);
      for (int t = 0; t < NT; ++t) acc[g][t] = _mm512_fmadd_ps(q, k[t], acc[g][t]);
    }
  }
  const __m512 scale = _mm512_set1_ps(a.scale);
  for (int g = 0; g < G; ++g) {
    for (int t = 0; t < NT; ++t) {
      _mm512_storeu_ps(scores + (m0 + g) * stride + p0 + 16 * t, _mm512_mul_ps(acc[g][t], scale));
    }
  }
}

// Adds positions [p_begin, p_end) to the value sums of G queries (of one
// run) in out[m][d0 .. d0 + 16C), which hold the sums of the positions before
// (from zero when p_begin is 0). Rows in position order, each query's lanes
// updated only at its own positions.
template <TensorType T, int G, int C>
[[gnu::noinline]] void ValueBlock(const AttendArgs& a, int m0, int64_t d0, const float* scores,
                                  int64_t stride, int32_t p_begin, int32_t p_end) {
  int32_t n_max = 0;
  int32_t n_min = a.n_pos[m0];
  for (int g = 0; g < G; ++g) {
    n_max = a.n_pos[m0 + g] > n_max ? a.n_pos[m0 + g] : n_max;
    n_min = a.n_pos[m0 + g] < n_min ? a.n_pos[m0 + g] : n_min;
  }
  const int32_t end = p_end < n_max ? p_end : n_max;
  if (p_begin >= end) return;
  __m512 acc[G][C];
  for (int g = 0; g < G; ++g) {
    for (int c = 0; c < C; ++c) {
      acc[g][c] = p_begin == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(a.out[m0 + g] + d0 + 16 * c);
    }
  }
  // Positions every query of the group has: plain FMAs (the same rounding as
  // the masked ones below, so a query's result does not depend on the split).
  int32_t p = p_begin;
  for (const int32_t plain_end = n_min < end ? n_min : end; p < plain_end; ++p) {
    const size_t v = a.row_off[m0][p] + static_cast<size_t>(d0);
    __m512 vv[C];
    for (int c = 0; c < C; ++c) vv[c] = KvLoad<T>::Load16(a.v_base, v + 16 * c);
    for (int g = 0; g < G; ++g) {
      const __m512 w = _mm512_set1_ps(scores[(m0 + g) * stride + p]);
      for (int c = 0; c < C; ++c) acc[g][c] = _mm512_fmadd_ps(w, vv[c], acc[g][c]);
    }
  }
  for (; p < end; ++p) {
    const size_t v = a.row_off[m0][p] + static_cast<size_t>(d0);
    __m512 vv[C];
    for (int c = 0; c < C; ++c) vv[c] = KvLoad<T>::Load16(a.v_base, v + 16 * c);
    for (int g = 0; g < G; ++g) {
      const __mmask16 live = p < a.n_pos[m0 + g] ? __mmask16(0xFFFF) : __mmask16(0);
      const __m512 w = _mm512_set1_ps(scores[(m0 + g) * stride + p]);
      for (int c = 0; c < C; ++c) acc[g][c] = _mm512_mask3_fmadd_ps(w, vv[c], acc[g][c], live);
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(a.out[m0 + g] + d0 + 16 * c, acc[g][c]);
  }
}

// Scores of queries [m_begin, m_end) for the 16·NT positions in kt.
template <int NT>
void ScoreQueries(const AttendArgs& a, int m_begin, int m_end, const float* kt, int64_t p0,
                  float* scores, int64_t stride) {
  int m = m_begin;
  for (; m + 8 <= m_end; m += 8) ScoreGroup<8, NT>(a, m, kt, p0, scores, stride);
  switch (m_end - m) {
    case 7:
      ScoreGroup<7, NT>(a, m, kt, p0, scores, stride);
      break;
    case 6:
      ScoreGroup<6, NT>(a, m, kt, p0, scores, stride);
      break;
    case 5:
      ScoreGroup<5, NT>(a, m, kt, p0, scores, stride);
      break;
    case 4:
      ScoreGroup<4, NT>(a, m, kt, p0, scores, stride);
      break;
    case 3:
      ScoreGroup<3, NT>(a, m, kt, p0, scores, stride);
      break;
    case 2:
      ScoreGroup<2, NT>(a, m, kt, p0, scores, stride);
      break;
    case 1:
      ScoreGroup<1, NT>(a, m, kt, p0, scores, stride);
      break;
    default:
      break;
  }
}

// The np (<= 16) key rows of positions p0.. at `row_off`, transposed into kt
// as [head_dim][16] (rows past np are zero).
template <TensorType T>
void TransposeKeys(const AttendArgs& a, const size_t* row_off, int64_t p0, int64_t np, float* kt) {
  for (int64_t i0 = 0; i0 < a.head_dim; i0 += 16) {
    __m512 r[16];
    if (np == 16) {
      for (int j = 0; j < 16; ++j) r[j] = KvLoad<T>::Load16(a.k_base, row_off[p0 + j] + i0);
    } else {
      for (int j = 0; j < 16; ++j) {
        r[j] = j < np ? KvLoad<T>::Load16(a.k_base, row_off[p0 + j] + i0) : _mm512_setzero_ps();
      }
    }
    Transpose16(r);
    for (int c = 0; c < 16; ++c) _mm512_store_ps(kt + (i0 + c) * 16, r[c]);
  }
}

// Asks for the rows of positions [p_begin, p_end) at `row_off`, elements
// d0 .. d0 + 16c of each, ahead of their use: rows of scattered KV blocks,
// 1 KiB or more apart, which the hardware prefetchers do not foresee.
template <TensorType T>
inline void PrefetchRows(const void* base, const size_t* row_off, int64_t p_begin, int64_t p_end,
                         int64_t d0, int64_t c) {
  const int64_t lines =
      static_cast<int64_t>((KvRowBytes(T, static_cast<size_t>(16 * c)) + 63) / 64);
  for (int64_t p = p_begin; p < p_end; ++p) {
    const char* row = KvAt<T>(base, row_off[p] + static_cast<size_t>(d0));
    for (int64_t i = 0; i < lines; ++i) _mm_prefetch(row + 64 * i, _MM_HINT_T0);
  }
}

// Scores of queries [m_begin, m_end) for the np (<= 32) positions from p0 at
// `row_off`, as one or two key tiles; first asks for the key rows of the next
// span, those below `ahead_end`.
template <TensorType T>
void ScoreSpan(const AttendArgs& a, const size_t* row_off, int m_begin, int m_end, int64_t p0,
               int64_t np, int64_t ahead_end, float* kt, float* scores, int64_t stride) {
  PrefetchRows<T>(a.k_base, row_off, p0 + 32, std::min<int64_t>(p0 + 64, ahead_end), 0,
                  a.head_dim / 16);
  TransposeKeys<T>(a, row_off, p0, np < 16 ? np : 16, kt);
  if (np <= 16) {
    ScoreQueries<1>(a, m_begin, m_end, kt, p0, scores, stride);
    return;
  }
  TransposeKeys<T>(a, row_off, p0 + 16, np - 16, kt + 16 * a.head_dim);
  ScoreQueries<2>(a, m_begin, m_end, kt, p0, scores, stride);
}

template <TensorType T, int G>
void ValueBlockC(const AttendArgs& a, int m0, int64_t d0, int c, const float* scores,
                 int64_t stride, int32_t p_begin, int32_t p_end) {
  switch (c) {
    case 4:
      ValueBlock<T, G, 4>(a, m0, d0, scores, stride, p_begin, p_end);
      return;
    case 3:
      ValueBlock<T, G, 3>(a, m0, d0, scores, stride, p_begin, p_end);
      return;
    case 2:
      ValueBlock<T, G, 2>(a, m0, d0, scores, stride, p_begin, p_end);
      return;
    default:
      ValueBlock<T, G, 1>(a, m0, d0, scores, stride, p_begin, p_end);
      return;
  }
}

template <TensorType T>
void AttendTyped(const AttendArgs& a) {
  const int nq = a.n_q;
  int32_t n_max = 0;
  for (int m = 0; m < nq; ++m) n_max = a.n_pos[m] > n_max ? a.n_pos[m] : n_max;
  // Score rows an odd number of 64-byte lines apart: rows a multiple of 4 KiB
  // apart would all fall in one L1 set.
  const int64_t stride = ((static_cast<int64_t>(n_max) + 15) / 16 | 1) * 16;
  float* scores = a.scratch;
  const uintptr_t tile_at = reinterpret_cast<uintptr_t>(scores + nq * stride);
  float* kt = reinterpret_cast<float*>((tile_at + 63) & ~uintptr_t{63});

  // Runs: consecutive queries with the same rows (the tokens of one sequence).
  int run_begin[kMaxAttendQueries + 1];
  int32_t run_max[kMaxAttendQueries];
  int n_runs = 0;
  for (int m = 0; m < nq; ++m) {
    if (m == 0 || a.row_off[m] != a.row_off[m - 1]) {
      run_begin[n_runs] = m;
      run_max[n_runs] = 0;
      ++n_runs;
    }
    run_max[n_runs - 1] = a.n_pos[m] > run_max[n_runs - 1] ? a.n_pos[m] : run_max[n_runs - 1];
  }
  run_begin[n_runs] = nq;

  // Scores, 32 positions at a time (two key tiles): one pair of tiles for
  // every query where the runs share the rows, else one per run, up to the
  // run's own last position.
  for (int64_t p0 = 0; p0 < n_max; p0 += 32) {
    if (p0 + 32 <= a.shared_pos) {
      ScoreSpan<T>(a, a.row_off[0], 0, nq, p0, 32, a.shared_pos, kt, scores, stride);
      continue;
    }
    for (int r = 0; r < n_runs; ++r) {
      if (p0 >= run_max[r]) continue;
      const int64_t np = run_max[r] - p0 < 32 ? run_max[r] - p0 : 32;
      ScoreSpan<T>(a, a.row_off[run_begin[r]], run_begin[r], run_begin[r + 1], p0, np, run_max[r],
                   kt, scores, stride);
    }
  }

  // Softmax of each query over its own positions: the max, then e^(s - max)
  // in place (zero past the query's last position) and their sum.
  float inv[kMaxAttendQueries];
  for (int m = 0; m < nq; ++m) {
    const int32_t n = a.n_pos[m];
    float* s = scores + m * stride;
    __m512 vmax = _mm512_set1_ps(-__builtin_inff());
    for (int64_t p0 = 0; p0 < n; p0 += 16) {
      const __mmask16 k = n - p0 >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - p0)) - 1);
      vmax = _mm512_mask_max_ps(vmax, k, vmax, _mm512_loadu_ps(s + p0));
    }
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t p0 = 0; p0 < n; p0 += 16) {
      const __mmask16 k = n - p0 >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - p0)) - 1);
      const __m512 e = _mm512_maskz_mov_ps(k, Exp(_mm512_sub_ps(_mm512_loadu_ps(s + p0), mx)));
      _mm512_storeu_ps(s + p0, e);
      vsum = _mm512_add_ps(vsum, e);
    }
    inv[m] = 1.0f / _mm512_reduce_add_ps(vsum);
  }

  // Values, kValueBlock positions at a time for every group of up to 4
  // queries of one run and 64 dimensions, so the block's value rows are read
  // from memory once and from L1 by the other groups (every group where the
  // runs share them); the sums wait in the outputs between blocks.
  for (int32_t pb = 0; pb < n_max; pb += kValueBlock) {
    const int32_t pe = n_max - pb > kValueBlock ? pb + kValueBlock : n_max;
    for (int64_t d0 = 0; d0 < a.head_dim; d0 += 64) {
      const int c = a.head_dim - d0 >= 64 ? 4 : static_cast<int>((a.head_dim - d0) / 16);
      for (int r = 0; r < n_runs; ++r) {
        if (pb >= run_max[r]) continue;
        // The next block's rows, once where the runs share them.
        if (r == 0 || pe + kValueBlock > a.shared_pos) {
          PrefetchRows<T>(a.v_base, a.row_off[run_begin[r]], pe,
                          std::min<int64_t>(pe + kValueBlock, run_max[r]), d0, c);
        }
        int m = run_begin[r];
        const int m_end = run_begin[r + 1];
        for (; m + 4 <= m_end; m += 4) ValueBlockC<T, 4>(a, m, d0, c, scores, stride, pb, pe);
        switch (m_end - m) {
          case 3:
            ValueBlockC<T, 3>(a, m, d0, c, scores, stride, pb, pe);
            break;
          case 2:
            ValueBlockC<T, 2>(a, m, d0, c, scores, stride, pb, pe);
            break;
          case 1:
            ValueBlockC<T, 1>(a, m, d0, c, scores, stride, pb, pe);
            break;
          default:
            break;
        }
      }
    }
  }
  for (int m = 0; m < nq; ++m) {
    const __m512 s = _mm512_set1_ps(inv[m]);
    for (int64_t i = 0; i < a.head_dim; i += 16) {
      _mm512_storeu_ps(a.out[m] + i, _mm512_mul_ps(_mm512_loadu_ps(a.out[m] + i), s));
    }
  }
}

}  // namespace

void AttendAvx512(const AttendArgs& a) {
  if (a.head_dim % 16 != 0) {
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

// The feed-forward's gate shares this file's exponential: 16 at a time, the
// tail masked (the same instructions on the lanes it keeps); sigmoid through
// z = e^-|g| as in SwiGluAvx2.
void SwiGluAvx512(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k =
        n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 g = _mm512_maskz_loadu_ps(k, gate + i);
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 mag = _mm512_abs_ps(g);
    const __m512 z = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(mag, _mm512_set1_ps(87.0f), _CMP_LE_OQ),
                                         Exp(_mm512_sub_ps(_mm512_setzero_ps(), mag)));
    const __m512 num =
        _mm512_mask_mov_ps(z, _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_GE_OQ), one);
    const __m512 silu = _mm512_mul_ps(g, _mm512_div_ps(num, _mm512_add_ps(one, z)));
    _mm512_mask_storeu_ps(gate + i, k, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(k, up + i)));
  }
}

}  // namespace strata::kernels::internal

#include "kernels/internal/avx512_end.inc"
