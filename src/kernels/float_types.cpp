// Float types: F32, F16, BF16 (layouts in kernels/internal/blocks.h). Their
// reference codecs are the exact conversions of kernels/tensor_type.h, and their
// reference dot product adds w_i·x_i in element order in float.
#include <cstring>

#include "kernels/internal/blocks.h"
#include "kernels/tensor_type.h"

namespace strata::kernels::internal {
namespace {

// How each float type's element becomes a float and back.
inline float ToFloat(const BlockF32& b) { return b.v; }
inline float ToFloat(const BlockF16& b) { return HalfToFloat(b.h); }
inline float ToFloat(const BlockBF16& b) { return Bf16ToFloat(b.h); }
inline void FromFloat(float f, BlockF16* b) { b->h = FloatToHalf(f); }
inline void FromFloat(float f, BlockBF16* b) { b->h = FloatToBf16(f); }

template <typename Block>
void DequantizeFloat(const Block* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = ToFloat(src[i]);
}
template <typename Block>
void QuantizeFloat(const float* src, int64_t n, Block* dst) {
  for (int64_t i = 0; i < n; ++i) FromFloat(src[i], &dst[i]);
}
template <typename Block>
float DotFloat(const Block* w, const float* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += ToFloat(w[i]) * x[i];
  return acc;
}

}  // namespace

// F32 rows are copied as bytes (NaN payloads included).
void Dequantize(const BlockF32* src, int64_t n, float* dst) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void Quantize(const float* src, int64_t n, BlockF32* dst) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void Dequantize(const BlockF16* src, int64_t n, float* dst) { DequantizeFloat(src, n, dst); }
void Dequantize(const BlockBF16* src, int64_t n, float* dst) { DequantizeFloat(src, n, dst); }
void Quantize(const float* src, int64_t n, BlockF16* dst) { QuantizeFloat(src, n, dst); }
void Quantize(const float* src, int64_t n, BlockBF16* dst) { QuantizeFloat(src, n, dst); }

float Dot(const BlockF32* w, const float* x, int64_t n) { return DotFloat(w, x, n); }
float Dot(const BlockF16* w, const float* x, int64_t n) { return DotFloat(w, x, n); }
float Dot(const BlockBF16* w, const float* x, int64_t n) { return DotFloat(w, x, n); }

}  // namespace strata::kernels::internal
