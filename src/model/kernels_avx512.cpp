// AVX-512 kernels (F, BW, VL, DQ and VNNI): F32/F16/BF16 weights with 16-wide
// FMAs, Q8_0/Q4_0 weights with VNNI int8 dot products. Selected at run time
// when the CPU has every one of these extensions.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "model/internal/blocks.h"
#include "model/internal/kernels_impl.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
// GCC 12's AVX-512 headers build "undefined" vectors by self-assignment, which
// its own -Wuninitialized then reports wherever they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::model::internal {
namespace {

#include "model/internal/matmul_tiles.inc"

inline float Hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float Hsum512(__m512 v) {
  return Hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

template <typename T>
inline const T* RowPtr(const uint8_t* base, size_t row_bytes, int64_t row) {
  return reinterpret_cast<const T*>(base + static_cast<size_t>(row) * row_bytes);
}

// Loads 16 weights of a float-like type as floats; `mask` selects the valid
// lanes of a final partial vector (masked lanes read nothing and are zero).
struct F32Load {
  static __m512 Load(const void* p, int64_t k, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(p) + k);
  }
};
struct F16Load {
  static __m512 Load(const void* p, int64_t k, __mmask16 mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(p) + k));
  }
};
struct Bf16Load {
  static __m512 Load(const void* p, int64_t k, __mmask16 mask) {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(p) + k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

// Float weights x F32 activations: one 16-lane accumulator per output.
template <typename L>
struct FloatMicro {
  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const void* w[R];
    const float* x[T];
    for (int i = 0; i < R; ++i) w[i] = RowPtr<uint8_t>(a.w, a.w_row_bytes, r0 + i);
    for (int j = 0; j < T; ++j) x[j] = RowPtr<float>(a.act, a.act_row_bytes, t0 + j);
    __m512 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < a.n; k += 16) {
      const int64_t left = a.n - k;
      const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      __m512 wv[R];
      for (int i = 0; i < R; ++i) wv[i] = L::Load(w[i], k, mask);
      for (int j = 0; j < T; ++j) {
        const __m512 xv = _mm512_maskz_loadu_ps(mask, x[j] + k);
        for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.out_stride + r0 + i] = Hsum512(acc[i][j]);
  }
};

// 8-bit blocks x Q8 activations with VNNI. vpdpbusd multiplies unsigned by
// signed bytes, so weights are made unsigned by an offset (w + 128 for Q8_0,
// the raw nibble for Q4_0) and the offset times the activation block's sum is
// subtracted through the accumulator's starting value.
template <typename Block>
struct QuantMicro {
  template <int R, int T>
  void Tile(const MatMulArgs& a, int64_t r0, int64_t t0) {
    const Block* w[R];
    const ActBlockQ8* x[T];
    for (int i = 0; i < R; ++i) w[i] = RowPtr<Block>(a.w, a.w_row_bytes, r0 + i);
    for (int j = 0; j < T; ++j) x[j] = RowPtr<ActBlockQ8>(a.act, a.act_row_bytes, t0 + j);
    __m256 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
    const int64_t nb = a.n / 32;
    for (int64_t b = 0; b < nb; ++b) {
      __m256i wu[R];
      float dw[R];
      for (int i = 0; i < R; ++i) {
        wu[i] = Unsigned(w[i][b]);
        dw[i] = _cvtsh_ss(w[i][b].d);
      }
      for (int j = 0; j < T; ++j) {
        const ActBlockQ8& xb = x[j][b];
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
        const __m256i init = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-kOffset * xb.sum));
        for (int i = 0; i < R; ++i) {
          const __m256i p = _mm256_dpbusd_epi32(init, wu[i], xq);
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[i] * xb.d), acc[i][j]);
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.out[(t0 + j) * a.out_stride + r0 + i] = Hsum256(acc[i][j]);
  }

  static constexpr int kOffset = sizeof(Block) == sizeof(BlockQ8_0) ? 128 : 8;
  static __m256i Unsigned(const BlockQ8_0& b) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  static __m256i Unsigned(const BlockQ4_0& b) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
  }
};

// Same values as the scalar quantizer, bit for bit.
void QuantizeAct(ActFormat fmt, const float* x, int64_t n, void* out) {
  if (fmt != ActFormat::kQ8) {
    ScalarKernels().quantize_act(fmt, x, n, out);
    return;
  }
  auto* blocks = static_cast<ActBlockQ8*>(out);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t ib = 0; ib < n / 32; ++ib) {
    const __m512 v0 = _mm512_loadu_ps(x + ib * 32);
    const __m512 v1 = _mm512_loadu_ps(x + ib * 32 + 16);
    const __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
    const float amax = _mm512_reduce_max_ps(m);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 127.0f / amax : 0.0f;
    const __m512 s = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, s));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, s));
    ActBlockQ8& b = blocks[ib];
    b.d = d;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b.q), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b.q + 16), _mm512_cvtepi32_epi8(q1));
    b.sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

void MatMul(const MatMulArgs& a) {
  switch (a.w_type) {
    case TensorType::kF32: {
      FloatMicro<F32Load> m;
      tiles::Drive<4, 4>(m, a);
      return;
    }
    case TensorType::kF16: {
      FloatMicro<F16Load> m;
      tiles::Drive<4, 4>(m, a);
      return;
    }
    case TensorType::kBF16: {
      FloatMicro<Bf16Load> m;
      tiles::Drive<4, 4>(m, a);
      return;
    }
    case TensorType::kQ8_0: {
      QuantMicro<BlockQ8_0> m;
      tiles::Drive<4, 4>(m, a);
      return;
    }
    case TensorType::kQ4_0: {
      QuantMicro<BlockQ4_0> m;
      tiles::Drive<4, 4>(m, a);
      return;
    }
    default:
      ScalarKernels().matmul(a);
      return;
  }
}

}  // namespace
}  // namespace strata::model::internal

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace strata::model::internal {

const KernelTable* Avx512Kernels() {
  static const bool supported =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c");
  static const KernelTable kTable{Isa::kAvx512, &QuantizeAct, &MatMul};
  return supported ? &kTable : nullptr;
}

}  // namespace strata::model::internal
