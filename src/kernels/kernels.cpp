#include "kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/internal/blocks.h"
#include "kernels/internal/kernels_impl.h"
#include "util/status.h"

namespace strata::kernels {

using internal::ActBlockQ8;
using internal::ActBlockQ8K;
using internal::kQK_K;

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

ActFormat ActFormatFor(TensorType weight_type) {
  switch (weight_type) {
    case TensorType::kQ8_0:
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
      return ActFormat::kQ8;
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
      return ActFormat::kQ8K;
    default:
      return ActFormat::kF32;
  }
}

int64_t ActBlockSize(ActFormat fmt) {
  switch (fmt) {
    case ActFormat::kF32:
      return 1;
    case ActFormat::kQ8:
      return 32;
    case ActFormat::kQ8K:
      return kQK_K;
  }
  return 1;
}

size_t ActRowBytes(ActFormat fmt, int64_t n) {
  switch (fmt) {
    case ActFormat::kF32:
      return static_cast<size_t>(n) * sizeof(float);
    case ActFormat::kQ8:
      return static_cast<size_t>(n / 32) * sizeof(ActBlockQ8);
    case ActFormat::kQ8K:
      return static_cast<size_t>(n / kQK_K) * sizeof(ActBlockQ8K);
  }
  return 0;
}

const KernelTable* GetKernels(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return &internal::ScalarKernels();
    case Isa::kAvx2:
      return internal::Avx2Kernels();
    case Isa::kAvx512:
      return internal::Avx512Kernels();
  }
  return nullptr;
}

const KernelTable& BestKernels() {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (const KernelTable* k = GetKernels(isa)) return *k;
  }
  return internal::ScalarKernels();
}

bool HasCodec(TensorType type) { return IsComputeSupported(type); }

void DequantizeRow(TensorType type, const void* src, int64_t n, float* dst) {
  switch (type) {
    case TensorType::kF32:
      internal::Dequantize(static_cast<const internal::BlockF32*>(src),
                           n / internal::BlockF32::kSize, dst);
      return;
    case TensorType::kF16:
      internal::Dequantize(static_cast<const internal::BlockF16*>(src),
                           n / internal::BlockF16::kSize, dst);
      return;
    case TensorType::kBF16:
      internal::Dequantize(static_cast<const internal::BlockBF16*>(src),
                           n / internal::BlockBF16::kSize, dst);
      return;
    case TensorType::kQ8_0:
      internal::Dequantize(static_cast<const internal::BlockQ8_0*>(src),
                           n / internal::BlockQ8_0::kSize, dst);
      return;
    case TensorType::kQ4_0:
      internal::Dequantize(static_cast<const internal::BlockQ4_0*>(src),
                           n / internal::BlockQ4_0::kSize, dst);
      return;
    case TensorType::kQ4_1:
      internal::Dequantize(static_cast<const internal::BlockQ4_1*>(src),
                           n / internal::BlockQ4_1::kSize, dst);
      return;
    case TensorType::kQ5_0:
      internal::Dequantize(static_cast<const internal::BlockQ5_0*>(src),
                           n / internal::BlockQ5_0::kSize, dst);
      return;
    case TensorType::kQ5_1:
      internal::Dequantize(static_cast<const internal::BlockQ5_1*>(src),
                           n / internal::BlockQ5_1::kSize, dst);
      return;
    case TensorType::kQ4_K:
      internal::Dequantize(static_cast<const internal::BlockQ4_K*>(src),
                           n / internal::BlockQ4_K::kSize, dst);
      return;
    case TensorType::kQ5_K:
      internal::Dequantize(static_cast<const internal::BlockQ5_K*>(src),
                           n / internal::BlockQ5_K::kSize, dst);
      return;
    case TensorType::kQ6_K:
      internal::Dequantize(static_cast<const internal::BlockQ6_K*>(src),
                           n / internal::BlockQ6_K::kSize, dst);
      return;
    default:
      STRATA_CHECK_MSG(false, "DequantizeRow: no codec for this type (check HasCodec)");
      return;
  }
}

void QuantizeRow(TensorType type, const float* src, int64_t n, void* dst) {
  switch (type) {
    case TensorType::kF32:
      internal::Quantize(src, n / internal::BlockF32::kSize, static_cast<internal::BlockF32*>(dst));
      return;
    case TensorType::kF16:
      internal::Quantize(src, n / internal::BlockF16::kSize, static_cast<internal::BlockF16*>(dst));
      return;
    case TensorType::kBF16:
      internal::Quantize(src, n / internal::BlockBF16::kSize,
                         static_cast<internal::BlockBF16*>(dst));
      return;
    case TensorType::kQ8_0:
      internal::Quantize(src, n / internal::BlockQ8_0::kSize,
                         static_cast<internal::BlockQ8_0*>(dst));
      return;
    case TensorType::kQ4_0:
      internal::Quantize(src, n / internal::BlockQ4_0::kSize,
                         static_cast<internal::BlockQ4_0*>(dst));
      return;
    case TensorType::kQ4_1:
      internal::Quantize(src, n / internal::BlockQ4_1::kSize,
                         static_cast<internal::BlockQ4_1*>(dst));
      return;
    case TensorType::kQ5_0:
      internal::Quantize(src, n / internal::BlockQ5_0::kSize,
                         static_cast<internal::BlockQ5_0*>(dst));
      return;
    case TensorType::kQ5_1:
      internal::Quantize(src, n / internal::BlockQ5_1::kSize,
                         static_cast<internal::BlockQ5_1*>(dst));
      return;
    case TensorType::kQ4_K:
      internal::Quantize(src, n / internal::BlockQ4_K::kSize,
                         static_cast<internal::BlockQ4_K*>(dst));
      return;
    case TensorType::kQ5_K:
      internal::Quantize(src, n / internal::BlockQ5_K::kSize,
                         static_cast<internal::BlockQ5_K*>(dst));
      return;
    case TensorType::kQ6_K:
      internal::Quantize(src, n / internal::BlockQ6_K::kSize,
                         static_cast<internal::BlockQ6_K*>(dst));
      return;
    default:
      STRATA_CHECK_MSG(false, "QuantizeRow: no codec for this type (check HasCodec)");
      return;
  }
}

float ReferenceDot(TensorType type, const void* w_row, const void* act_row, int64_t n) {
  float out = 0.0f;
  MatMulArgs a;
  a.w_type = type;
  a.w = static_cast<const uint8_t*>(w_row);
  a.w_row_bytes = RowBytes(type, n);
  a.row_begin = 0;
  a.row_end = 1;
  a.act = static_cast<const uint8_t*>(act_row);
  a.act_row_bytes = ActRowBytes(ActFormatFor(type), n);
  a.n_tokens = 1;
  a.n = n;
  a.out = &out;
  a.out_stride = 1;
  internal::ScalarKernels().matmul(a);
  return out;
}

}  // namespace strata::kernels
