// The scalar kernel table: the reference every SIMD table is tested against.
// Plain loops in a fixed order; no ISA-specific code. Its matmul entries are
// the block types' reference dot products (internal/blocks.h), one Dot per
// output (type_traits.cpp).
#include <cmath>
#include <cstring>

#include "kernels/internal/blocks.h"
#include "kernels/internal/kernels_impl.h"

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

}  // namespace

void SwiGluScalar(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

const KernelTable& ScalarKernels() {
  static const KernelTable kTable{Isa::kScalar,
                                  &QuantizeActScalar,
                                  &MatMulByType<Isa::kScalar>,
                                  &AttendScalar,
                                  &PrefersPackedByType<Isa::kScalar>,
                                  &SwiGluScalar};
  return kTable;
}

}  // namespace strata::kernels::internal
