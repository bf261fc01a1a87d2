// The scalar kernels: the reference every SIMD table is tested against. Plain
// loops in a fixed order; no ISA-specific code.
#include <cmath>
#include <cstring>

#include "model/internal/blocks.h"
#include "model/internal/kernels_impl.h"
#include "util/status.h"

namespace strata::model::internal {
namespace {

void QuantizeActScalar(ActFormat fmt, const float* x, int64_t n, void* out) {
  if (fmt == ActFormat::kF32) {
    std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
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
      const int q = static_cast<int>(std::nearbyint(xb[i] * id));
      b.q[i] = static_cast<int8_t>(q);
      sum += q;
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
  static const KernelTable kTable{Isa::kScalar, &QuantizeActScalar, &MatMulScalar};
  return kTable;
}

}  // namespace strata::model::internal
