#include "kernels/kernels.h"

#include "kernels/internal/blocks.h"
#include "kernels/internal/kernels_impl.h"

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

bool IsKvType(TensorType t) {
  return t == TensorType::kF32 || t == TensorType::kF16 || t == TensorType::kQ8_0;
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

// ActFormatFor, HasCodec, DequantizeRow and QuantizeRow read the traits table
// (type_traits.cpp).

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
