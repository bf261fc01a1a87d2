// AVX2 kernels (with FMA and F16C): F32/F16/BF16 weights with 8-wide FMAs,
// Q8_0/Q4_0 weights with 16-bit multiply-adds. For CPUs without the AVX-512
// set kernels_avx512.cpp needs.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "model/internal/blocks.h"
#include "model/internal/kernels_impl.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace strata::model::internal {
namespace {

#include "model/internal/matmul_tiles.inc"

inline float Hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <typename T>
inline const T* RowPtr(const uint8_t* base, size_t row_bytes, int64_t row) {
  return reinterpret_cast<const T*>(base + static_cast<size_t>(row) * row_bytes);
}

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

template <typename L>
struct FloatMicro {
  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const void* w[R];
    const float* x[T];
    for (int i = 0; i < R; ++i) w[i] = RowPtr<uint8_t>(a.w, a.w_row_bytes, r0 + i);
    for (int j = 0; j < T; ++j) x[j] = RowPtr<float>(a.act, a.act_row_bytes, t0 + j);
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
struct Q8_0Micro {
  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const BlockQ8_0* w[R];
    const ActBlockQ8* x[T];
    for (int i = 0; i < R; ++i) w[i] = RowPtr<BlockQ8_0>(a.w, a.w_row_bytes, r0 + i);
    for (int j = 0; j < T; ++j) x[j] = RowPtr<ActBlockQ8>(a.act, a.act_row_bytes, t0 + j);
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
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[i] * xb.d), acc[i][j]);
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.out_stride + r0 + i] = Hsum256(acc[i][j]);
  }
};

// Q4_0 x Q8: raw nibbles (0..15) times x, minus 8 times the block's sum.
struct Q4_0Micro {
  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const BlockQ4_0* w[R];
    const ActBlockQ8* x[T];
    for (int i = 0; i < R; ++i) w[i] = RowPtr<BlockQ4_0>(a.w, a.w_row_bytes, r0 + i);
    for (int j = 0; j < T; ++j) x[j] = RowPtr<ActBlockQ8>(a.act, a.act_row_bytes, t0 + j);
    __m256 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < a.n / 32; ++b) {
      __m256i wu[R];
      float dw[R];
      for (int i = 0; i < R; ++i) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i][b].qs));
        wu[i] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low4);
        dw[i] = _cvtsh_ss(w[i][b].d);
      }
      for (int j = 0; j < T; ++j) {
        const ActBlockQ8& xb = x[j][b];
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
        const __m256i corr = _mm256_setr_epi32(-8 * xb.sum, 0, 0, 0, 0, 0, 0, 0);
        for (int i = 0; i < R; ++i) {
          const __m256i p = _mm256_add_epi32(
              _mm256_madd_epi16(_mm256_maddubs_epi16(wu[i], xq), ones), corr);
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[i] * xb.d), acc[i][j]);
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.out_stride + r0 + i] = Hsum256(acc[i][j]);
  }
};

// Same values as the scalar quantizer, bit for bit.
void QuantizeAct(ActFormat fmt, const float* x, int64_t n, void* out) {
  if (fmt != ActFormat::kQ8) {
    ScalarKernels().quantize_act(fmt, x, n, out);
    return;
  }
  auto* blocks = static_cast<ActBlockQ8*>(out);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t ib = 0; ib < n / 32; ++ib) {
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + ib * 32 + k * 8);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 s = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], s));
    const __m256i sum32 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), order);
    ActBlockQ8& b = blocks[ib];
    b.d = d;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.q), bytes);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum32), _mm256_extracti128_si256(sum32, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    b.sum = _mm_cvtsi128_si32(s4);
  }
}

void MatMul(const MatMulArgs& a) {
  switch (a.w_type) {
    case TensorType::kF32: {
      FloatMicro<F32Load> m;
      tiles::Drive<2, 4>(m, a);
      return;
    }
    case TensorType::kF16: {
      FloatMicro<F16Load> m;
      tiles::Drive<2, 4>(m, a);
      return;
    }
    case TensorType::kBF16: {
      FloatMicro<Bf16Load> m;
      tiles::Drive<2, 4>(m, a);
      return;
    }
    case TensorType::kQ8_0: {
      Q8_0Micro m;
      tiles::Drive<2, 4>(m, a);
      return;
    }
    case TensorType::kQ4_0: {
      Q4_0Micro m;
      tiles::Drive<2, 4>(m, a);
      return;
    }
    default:
      ScalarKernels().matmul(a);
      return;
  }
}

}  // namespace
}  // namespace strata::model::internal

#pragma GCC pop_options

namespace strata::model::internal {

const KernelTable* Avx2Kernels() {
  static const bool supported = __builtin_cpu_supports("avx2") &&
                                __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  static const KernelTable kTable{Isa::kAvx2, &QuantizeAct, &MatMul};
  return supported ? &kTable : nullptr;
}

}  // namespace strata::model::internal
