// AVX-512 attention (AttendArgs in model/kernels.h). Per 16 positions the
// key rows are transposed once into a [head_dim][16] tile shared by every
// query of the group, so a query's 16 scores are head_dim FMAs with its own
// elements broadcast; exponentials are a vector polynomial; the value rows are
// read once per 4 queries. Every lane of every query runs the same sequence of
// operations whatever the group holds (masked FMAs skip positions beyond a
// query's own), which keeps results independent of the batch.
#include <immintrin.h>

#include <cstdint>

#include "model/internal/kernels_impl.h"

#include "model/internal/avx512_begin.inc"

namespace strata::model::internal {
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
template <int G>
void ScoreGroup(const AttendArgs& a, int m0, const float* kt, int64_t p0, float* scores,
                int64_t stride) {
  __m512 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  for (int64_t i = 0; i < a.head_dim; ++i) {
    const __m512 k = _mm512_load_ps(kt + i * 16);
    for (int g = 0; g < G; ++g) acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(a.q[m0 + g][i]), k, acc[g]);
  }
  const __m512 scale = _mm512_set1_ps(a.scale);
  for (int g = 0; g < G; ++g) {
    _mm512_storeu_ps(scores + (m0 + g) * stride + p0, _mm512_mul_ps(acc[g], scale));
  }
}

// out[m][d0 .. d0 + 16C) of G queries: value rows in position order, each
// query's lanes updated only at its own positions, then scaled by 1/Σ.
template <int G, int C>
void ValueGroup(const AttendArgs& a, int m0, int64_t d0, const float* scores, int64_t stride,
                const float* inv) {
  __m512 acc[G][C];
  int32_t n_max = 0;
  for (int g = 0; g < G; ++g) {
    for (int c = 0; c < C; ++c) acc[g][c] = _mm512_setzero_ps();
    n_max = a.n_pos[m0 + g] > n_max ? a.n_pos[m0 + g] : n_max;
  }
  int32_t n_min = n_max;
  for (int g = 0; g < G; ++g) n_min = a.n_pos[m0 + g] < n_min ? a.n_pos[m0 + g] : n_min;
  // Positions every query of the group has: plain FMAs (the same rounding as
  // the masked ones below, so a query's result does not depend on the split).
  int32_t p = 0;
  for (; p < n_min; ++p) {
    const float* v = a.v_base + a.row_off[m0][p] + d0;
    __m512 vv[C];
    for (int c = 0; c < C; ++c) vv[c] = _mm512_loadu_ps(v + 16 * c);
    for (int g = 0; g < G; ++g) {
      const __m512 w = _mm512_set1_ps(scores[(m0 + g) * stride + p]);
      for (int c = 0; c < C; ++c) acc[g][c] = _mm512_fmadd_ps(w, vv[c], acc[g][c]);
    }
  }
  for (; p < n_max; ++p) {
    const float* v = a.v_base + a.row_off[m0][p] + d0;
    __m512 vv[C];
    for (int c = 0; c < C; ++c) vv[c] = _mm512_loadu_ps(v + 16 * c);
    for (int g = 0; g < G; ++g) {
      const __mmask16 live = p < a.n_pos[m0 + g] ? __mmask16(0xFFFF) : __mmask16(0);
      const __m512 w = _mm512_set1_ps(scores[(m0 + g) * stride + p]);
      for (int c = 0; c < C; ++c) acc[g][c] = _mm512_mask3_fmadd_ps(w, vv[c], acc[g][c], live);
    }
  }
  for (int g = 0; g < G; ++g) {
    const __m512 s = _mm512_set1_ps(inv[m0 + g]);
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(a.out[m0 + g] + d0 + 16 * c, _mm512_mul_ps(acc[g][c], s));
  }
}

// Scores of queries [m_begin, m_end) for the 16 positions in kt.
void ScoreQueries(const AttendArgs& a, int m_begin, int m_end, const float* kt, int64_t p0,
                  float* scores, int64_t stride) {
  int m = m_begin;
  for (; m + 8 <= m_end; m += 8) ScoreGroup<8>(a, m, kt, p0, scores, stride);
  switch (m_end - m) {
    case 7: ScoreGroup<7>(a, m, kt, p0, scores, stride); break;
    case 6: ScoreGroup<6>(a, m, kt, p0, scores, stride); break;
    case 5: ScoreGroup<5>(a, m, kt, p0, scores, stride); break;
    case 4: ScoreGroup<4>(a, m, kt, p0, scores, stride); break;
    case 3: ScoreGroup<3>(a, m, kt, p0, scores, stride); break;
    case 2: ScoreGroup<2>(a, m, kt, p0, scores, stride); break;
    case 1: ScoreGroup<1>(a, m, kt, p0, scores, stride); break;
    default: break;
  }
}

// The np (<= 16) key rows of positions p0.. at `row_off`, transposed into kt
// as [head_dim][16] (rows past np are zero).
void TransposeKeys(const AttendArgs& a, const size_t* row_off, int64_t p0, int64_t np, float* kt) {
  for (int64_t i0 = 0; i0 < a.head_dim; i0 += 16) {
    __m512 r[16];
    if (np == 16) {
      for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_ps(a.k_base + row_off[p0 + j] + i0);
    } else {
      for (int j = 0; j < 16; ++j) {
        r[j] = j < np ? _mm512_loadu_ps(a.k_base + row_off[p0 + j] + i0) : _mm512_setzero_ps();
      }
    }
    Transpose16(r);
    for (int c = 0; c < 16; ++c) _mm512_store_ps(kt + (i0 + c) * 16, r[c]);
  }
}

template <int G>
void ValueGroupC(const AttendArgs& a, int m0, int64_t d0, int c, const float* scores,
                 int64_t stride, const float* inv) {
  switch (c) {
    case 4: ValueGroup<G, 4>(a, m0, d0, scores, stride, inv); return;
    case 3: ValueGroup<G, 3>(a, m0, d0, scores, stride, inv); return;
    case 2: ValueGroup<G, 2>(a, m0, d0, scores, stride, inv); return;
    default: ValueGroup<G, 1>(a, m0, d0, scores, stride, inv); return;
  }
}

}  // namespace

void AttendAvx512(const AttendArgs& a) {
  if (a.head_dim % 16 != 0) {
    AttendScalar(a);
    return;
  }
  const int nq = a.n_q;
  int32_t n_max = 0;
  for (int m = 0; m < nq; ++m) n_max = a.n_pos[m] > n_max ? a.n_pos[m] : n_max;
  const int64_t stride = (static_cast<int64_t>(n_max) + 15) / 16 * 16;
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

  // Scores, 16 positions at a time: one key tile for every query where the
  // runs share the rows, else one per run, up to the run's own last position.
  for (int64_t p0 = 0; p0 < n_max; p0 += 16) {
    if (p0 + 16 <= a.shared_pos) {
      TransposeKeys(a, a.row_off[0], p0, 16, kt);
      ScoreQueries(a, 0, nq, kt, p0, scores, stride);
      continue;
    }
    for (int r = 0; r < n_runs; ++r) {
      if (p0 >= run_max[r]) continue;
      const int64_t np = run_max[r] - p0 < 16 ? run_max[r] - p0 : 16;
      TransposeKeys(a, a.row_off[run_begin[r]], p0, np, kt);
      ScoreQueries(a, run_begin[r], run_begin[r + 1], kt, p0, scores, stride);
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

  // Values, 64 dimensions and up to 4 queries of one run at a time.
  for (int64_t d0 = 0; d0 < a.head_dim; d0 += 64) {
    const int c = a.head_dim - d0 >= 64 ? 4 : static_cast<int>((a.head_dim - d0) / 16);
    for (int r = 0; r < n_runs; ++r) {
      int m = run_begin[r];
      const int m_end = run_begin[r + 1];
      for (; m + 4 <= m_end; m += 4) ValueGroupC<4>(a, m, d0, c, scores, stride, inv);
      switch (m_end - m) {
        case 3: ValueGroupC<3>(a, m, d0, c, scores, stride, inv); break;
        case 2: ValueGroupC<2>(a, m, d0, c, scores, stride, inv); break;
        case 1: ValueGroupC<1>(a, m, d0, c, scores, stride, inv); break;
        default: break;
      }
    }
  }
}

}  // namespace strata::model::internal

#include "model/internal/avx512_end.inc"
