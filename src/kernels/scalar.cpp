// The scalar kernels: the reference every SIMD table is tested against. Plain
// loops in a fixed order; no ISA-specific code.
#include <cmath>
#include <cstring>

#include "kernels/internal/blocks.h"
#include "kernels/internal/kernels_impl.h"
#include "util/status.h"

namespace strata::kernels::internal {
namespace {

// Q8 (blocks of 32) and Q8K (blocks of 256): d = max|x|/127, q = round(x/d)
// (ties to even), clamped to ±127 (NaN products, as from a subnormal max whose
// reciprocal overflows, become −127: fmax returns its non-NaN operand). The
// SIMD tables reproduce these bytes exactly.
void QuantizeActScalar(ActFormat fmt, const float* x, int64_t n, void* out) {
  if (fmt == ActFormat::kF32) {
    std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (fmt == ActFormat::kQ8K) {
    auto* blocks = static_cast<ActBlockQ8K*>(out);
    for (int64_t ib = 0; ib < n / kQK_K; ++ib) {
      const float* xb = x + ib * kQK_K;
      float amax = 0.0f;
      for (int i = 0; i < kQK_K; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 127.0f / amax : 0.0f;
      ActBlockQ8K& b = blocks[ib];
      b.d = d;
      for (int i = 0; i < kQK_K; ++i) {
        const float q = std::nearbyint(xb[i] * id);
        b.q[i] = static_cast<int8_t>(std::fmin(127.0f, std::fmax(-127.0f, q)));
      }
      for (int g = 0; g < kQK_K / 16; ++g) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += b.q[16 * g + i];
        b.bsums[g] = static_cast<int16_t>(sum);
      }
    }
    return;
  }
  auto* blocks = static_cast<ActBlockQ8*>(out);
  for (int64_t ib = 0; ib < n / 32; ++ib) {
    const float* xb = x + ib * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 127.0f / amax : 0.0f;
    ActBlockQ8& b = blocks[ib];
    b.d = d;
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      const float q = std::nearbyint(xb[i] * id);
      b.q[i] = static_cast<int8_t>(std::fmin(127.0f, std::fmax(-127.0f, q)));
      sum += b.q[i];
    }
    b.sum = sum;
  }
}

float DotF32(const float* w, const float* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += w[i] * x[i];
  return acc;
}

float DotF16(const uint8_t* w, const float* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, w + 2 * i, 2);
    acc += HalfToFloat(h) * x[i];
  }
  return acc;
}

float DotBF16(const uint8_t* w, const float* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, w + 2 * i, 2);
    acc += Bf16ToFloat(h) * x[i];
  }
  return acc;
}

float DotQ8_0(const BlockQ8_0* w, const ActBlockQ8* a, int64_t nb) {
  float acc = 0.0f;
  for (int64_t ib = 0; ib < nb; ++ib) {
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) s += static_cast<int32_t>(w[ib].qs[i]) * a[ib].q[i];
    acc += static_cast<float>(s) * (HalfToFloat(w[ib].d) * a[ib].d);
  }
  return acc;
}

float DotQ4_0(const BlockQ4_0* w, const ActBlockQ8* a, int64_t nb) {
  float acc = 0.0f;
  for (int64_t ib = 0; ib < nb; ++ib) {
    int32_t s = 0;
    for (int i = 0; i < 16; ++i) {
      s += ((w[ib].qs[i] & 15) - 8) * a[ib].q[i];
      s += ((w[ib].qs[i] >> 4) - 8) * a[ib].q[i + 16];
    }
    acc += static_cast<float>(s) * (HalfToFloat(w[ib].d) * a[ib].d);
  }
  return acc;
}

// Q4_1/Q5_1 × Q8: x_i = d·q_i + m, so a block contributes
//   (d·da)·float(Σ q_i·a_i) + m·(da·float(Σ a_i))
// (the activation block carries Σ a_i); added to acc in that order, block by block.
template <typename Block, bool kFifthBit>
float DotAffine32(const Block* w, const ActBlockQ8* a, int64_t nb) {
  float acc = 0.0f;
  for (int64_t ib = 0; ib < nb; ++ib) {
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) {
      int q = Nibble32(w[ib].qs, i);
      if constexpr (kFifthBit) q |= FifthBit32(w[ib].qh, i) << 4;
      s += q * a[ib].q[i];
    }
    acc += (HalfToFloat(w[ib].d) * a[ib].d) * static_cast<float>(s);
    acc += HalfToFloat(w[ib].m) * (a[ib].d * static_cast<float>(a[ib].sum));
  }
  return acc;
}

// Q5_0 × Q8: x_i = d·(q_i − 16); the integer sum is exact, as for Q4_0.
float DotQ5_0(const BlockQ5_0* w, const ActBlockQ8* a, int64_t nb) {
  float acc = 0.0f;
  for (int64_t ib = 0; ib < nb; ++ib) {
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = Nibble32(w[ib].qs, i) | (FifthBit32(w[ib].qh, i) << 4);
      s += (q - 16) * a[ib].q[i];
    }
    acc += static_cast<float>(s) * (HalfToFloat(w[ib].d) * a[ib].d);
  }
  return acc;
}

// K-quant weights × Q8K activations. Per super-block b, with the sub-block
// scales sc_j and mins m_j (integers) and a_i the activation's int8 values:
//   isum_b = Σ_j sc_j · Σ_{i in sub-block j} q_i·a_i         (int32, exact)
//   imin_b = Σ_j m_j · Σ_{i in sub-block j} a_i  (from bsums) (int32, exact)
// and then, in float, for b = 0, 1, ... in order:
//   acc += (d_b·da_b)·float(isum_b);  acc -= (dmin_b·da_b)·float(imin_b)
// Q6_K has no mins: isum_b = Σ_j sc_j·(Σ q_i·a_i − 32·Σ a_i), acc += (d_b·da_b)·float(isum_b).
// The integer sums are exact (|isum_b| < 2^28 for every type), so any order of
// the integer work gives the same bits; only the float steps above are ordered.

float DotQ4K(const BlockQ4_K* w, const ActBlockQ8K* a, int64_t nb) {
  float acc = 0.0f;
  for (int64_t ib = 0; ib < nb; ++ib) {
    const BlockQ4_K& wb = w[ib];
    const ActBlockQ8K& ab = a[ib];
    int32_t isum = 0, imin = 0;
    for (int j = 0; j < 8; ++j) {
      const ScaleMin sm = UnpackScaleMinK4(wb.scales, j);
      const uint8_t* q = wb.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) s += ((q[l] >> shift) & 15) * ab.q[32 * j + l];
      isum += sm.scale * s;
      imin += sm.min * (ab.bsums[2 * j] + ab.bsums[2 * j + 1]);
    }
    acc += (HalfToFloat(wb.d) * ab.d) * static_cast<float>(isum);
    acc -= (HalfToFloat(wb.dmin) * ab.d) * static_cast<float>(imin);
  }
  return acc;
}

float DotQ5K(const BlockQ5_K* w, const ActBlockQ8K* a, int64_t nb) {
  float acc = 0.0f;
  for (int64_t ib = 0; ib < nb; ++ib) {
    const BlockQ5_K& wb = w[ib];
    const ActBlockQ8K& ab = a[ib];
    int32_t isum = 0, imin = 0;
    for (int j = 0; j < 8; ++j) {
      const ScaleMin sm = UnpackScaleMinK4(wb.scales, j);
      const uint8_t* q = wb.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 15) | (((wb.qh[l] >> j) & 1) << 4);
        s += v * ab.q[32 * j + l];
      }
      isum += sm.scale * s;
      imin += sm.min * (ab.bsums[2 * j] + ab.bsums[2 * j + 1]);
    }
    acc += (HalfToFloat(wb.d) * ab.d) * static_cast<float>(isum);
    acc -= (HalfToFloat(wb.dmin) * ab.d) * static_cast<float>(imin);
  }
  return acc;
}

float DotQ6K(const BlockQ6_K* w, const ActBlockQ8K* a, int64_t nb) {
  float acc = 0.0f;
  for (int64_t ib = 0; ib < nb; ++ib) {
    const BlockQ6_K& wb = w[ib];
    const ActBlockQ8K& ab = a[ib];
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t s = 0;
      for (int l = 0; l < 16; ++l) s += QuantQ6K(wb, 16 * j + l) * ab.q[16 * j + l];
      isum += wb.scales[j] * (s - 32 * ab.bsums[j]);
    }
    acc += (HalfToFloat(wb.d) * ab.d) * static_cast<float>(isum);
  }
  return acc;
}

float DotRow(TensorType t, const uint8_t* w, const uint8_t* act, int64_t n) {
  switch (t) {
    case TensorType::kF32:
      return DotF32(reinterpret_cast<const float*>(w), reinterpret_cast<const float*>(act), n);
    case TensorType::kF16:
      return DotF16(w, reinterpret_cast<const float*>(act), n);
    case TensorType::kBF16:
      return DotBF16(w, reinterpret_cast<const float*>(act), n);
    case TensorType::kQ8_0:
      return DotQ8_0(reinterpret_cast<const BlockQ8_0*>(w),
                     reinterpret_cast<const ActBlockQ8*>(act), n / 32);
    case TensorType::kQ4_0:
      return DotQ4_0(reinterpret_cast<const BlockQ4_0*>(w),
                     reinterpret_cast<const ActBlockQ8*>(act), n / 32);
    case TensorType::kQ4_1:
      return DotAffine32<BlockQ4_1, false>(reinterpret_cast<const BlockQ4_1*>(w),
                                           reinterpret_cast<const ActBlockQ8*>(act), n / 32);
    case TensorType::kQ5_0:
      return DotQ5_0(reinterpret_cast<const BlockQ5_0*>(w),
                     reinterpret_cast<const ActBlockQ8*>(act), n / 32);
    case TensorType::kQ5_1:
      return DotAffine32<BlockQ5_1, true>(reinterpret_cast<const BlockQ5_1*>(w),
                                          reinterpret_cast<const ActBlockQ8*>(act), n / 32);
    case TensorType::kQ4_K:
      return DotQ4K(reinterpret_cast<const BlockQ4_K*>(w),
                    reinterpret_cast<const ActBlockQ8K*>(act), n / kQK_K);
    case TensorType::kQ5_K:
      return DotQ5K(reinterpret_cast<const BlockQ5_K*>(w),
                    reinterpret_cast<const ActBlockQ8K*>(act), n / kQK_K);
    case TensorType::kQ6_K:
      return DotQ6K(reinterpret_cast<const BlockQ6_K*>(w),
                    reinterpret_cast<const ActBlockQ8K*>(act), n / kQK_K);
    default:
      STRATA_CHECK_MSG(false, "scalar matmul: weight type without a kernel");
  }
  return 0.0f;
}

void MatMulScalar(const MatMulArgs& a) {
  for (int64_t r = a.row_begin; r < a.row_end; ++r) {
    const uint8_t* w = a.w + static_cast<size_t>(r) * a.w_row_bytes;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      a.out[t * a.out_stride + r] = DotRow(a.w_type, w, a.act + t * a.act_row_bytes, a.n);
    }
  }
}

}  // namespace

const KernelTable& ScalarKernels() {
  static const KernelTable kTable{Isa::kScalar, &QuantizeActScalar, &MatMulScalar, &AttendScalar};
  return kTable;
}

}  // namespace strata::kernels::internal
