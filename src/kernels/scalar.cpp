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

float DotRow(TensorType t, const uint8_t* w, const uint8_t* act, int64_t n) {
  switch (t) {
    case TensorType::kF32:
      return Dot(reinterpret_cast<const BlockF32*>(w), reinterpret_cast<const BlockF32::Act*>(act),
                 n / BlockF32::kSize);
    case TensorType::kF16:
      return Dot(reinterpret_cast<const BlockF16*>(w), reinterpret_cast<const BlockF16::Act*>(act),
                 n / BlockF16::kSize);
    case TensorType::kBF16:
      return Dot(reinterpret_cast<const BlockBF16*>(w),
                 reinterpret_cast<const BlockBF16::Act*>(act), n / BlockBF16::kSize);
    case TensorType::kQ8_0:
      return Dot(reinterpret_cast<const BlockQ8_0*>(w),
                 reinterpret_cast<const BlockQ8_0::Act*>(act), n / BlockQ8_0::kSize);
    case TensorType::kQ4_0:
      return Dot(reinterpret_cast<const BlockQ4_0*>(w),
                 reinterpret_cast<const BlockQ4_0::Act*>(act), n / BlockQ4_0::kSize);
    case TensorType::kQ4_1:
      return Dot(reinterpret_cast<const BlockQ4_1*>(w),
                 reinterpret_cast<const BlockQ4_1::Act*>(act), n / BlockQ4_1::kSize);
    case TensorType::kQ5_0:
      return Dot(reinterpret_cast<const BlockQ5_0*>(w),
                 reinterpret_cast<const BlockQ5_0::Act*>(act), n / BlockQ5_0::kSize);
    case TensorType::kQ5_1:
      return Dot(reinterpret_cast<const BlockQ5_1*>(w),
                 reinterpret_cast<const BlockQ5_1::Act*>(act), n / BlockQ5_1::kSize);
    case TensorType::kQ4_K:
      return Dot(reinterpret_cast<const BlockQ4_K*>(w),
                 reinterpret_cast<const BlockQ4_K::Act*>(act), n / BlockQ4_K::kSize);
    case TensorType::kQ5_K:
      return Dot(reinterpret_cast<const BlockQ5_K*>(w),
                 reinterpret_cast<const BlockQ5_K::Act*>(act), n / BlockQ5_K::kSize);
    case TensorType::kQ6_K:
      return Dot(reinterpret_cast<const BlockQ6_K*>(w),
                 reinterpret_cast<const BlockQ6_K::Act*>(act), n / BlockQ6_K::kSize);
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
