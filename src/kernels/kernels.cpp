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
using internal::BlockQ4_0;
using internal::BlockQ4_1;
using internal::BlockQ4_K;
using internal::BlockQ5_0;
using internal::BlockQ5_1;
using internal::BlockQ5_K;
using internal::BlockQ6_K;
using internal::BlockQ8_0;
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
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case TensorType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, h + i, sizeof(v));
        dst[i] = HalfToFloat(v);
      }
      return;
    }
    case TensorType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, h + i, sizeof(v));
        dst[i] = Bf16ToFloat(v);
      }
      return;
    }
    case TensorType::kQ8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t ib = 0; ib < n / 32; ++ib) {
        const float d = HalfToFloat(b[ib].d);
        for (int i = 0; i < 32; ++i) dst[ib * 32 + i] = d * static_cast<float>(b[ib].qs[i]);
      }
      return;
    }
    case TensorType::kQ4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t ib = 0; ib < n / 32; ++ib) {
        const float d = HalfToFloat(b[ib].d);
        for (int i = 0; i < 16; ++i) {
          dst[ib * 32 + i] = d * static_cast<float>((b[ib].qs[i] & 15) - 8);
          dst[ib * 32 + i + 16] = d * static_cast<float>((b[ib].qs[i] >> 4) - 8);
        }
      }
      return;
    }
    case TensorType::kQ4_1:
      internal::DequantizeQ4_1(static_cast<const BlockQ4_1*>(src), n / 32, dst);
      return;
    case TensorType::kQ5_0:
      internal::DequantizeQ5_0(static_cast<const BlockQ5_0*>(src), n / 32, dst);
      return;
    case TensorType::kQ5_1:
      internal::DequantizeQ5_1(static_cast<const BlockQ5_1*>(src), n / 32, dst);
      return;
    case TensorType::kQ4_K:
      internal::DequantizeQ4K(static_cast<const BlockQ4_K*>(src), n / kQK_K, dst);
      return;
    case TensorType::kQ5_K:
      internal::DequantizeQ5K(static_cast<const BlockQ5_K*>(src), n / kQK_K, dst);
      return;
    case TensorType::kQ6_K:
      internal::DequantizeQ6K(static_cast<const BlockQ6_K*>(src), n / kQK_K, dst);
      return;
    default:
      STRATA_CHECK_MSG(false, "DequantizeRow: no codec for this type (check HasCodec)");
      return;
  }
}

void QuantizeRow(TensorType type, const float* src, int64_t n, void* dst) {
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case TensorType::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t v = FloatToHalf(src[i]);
        std::memcpy(h + i, &v, sizeof(v));
      }
      return;
    }
    case TensorType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t v = FloatToBf16(src[i]);
        std::memcpy(h + i, &v, sizeof(v));
      }
      return;
    }
    case TensorType::kQ8_0: {
      auto* b = static_cast<BlockQ8_0*>(dst);
      for (int64_t ib = 0; ib < n / 32; ++ib) {
        const float* x = src + ib * 32;
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[ib].d = FloatToHalf(d);
        for (int i = 0; i < 32; ++i) {
          b[ib].qs[i] = static_cast<int8_t>(std::lround(x[i] * id));
        }
      }
      return;
    }
    case TensorType::kQ4_0: {
      auto* b = static_cast<BlockQ4_0*>(dst);
      for (int64_t ib = 0; ib < n / 32; ++ib) {
        const float* x = src + ib * 32;
        // The signed value of largest magnitude maps to -8, so the full [-8, 7]
        // range is used on the side that needs it.
        float amax = 0.0f, vmax = 0.0f;
        for (int i = 0; i < 32; ++i) {
          if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            vmax = x[i];
          }
        }
        const float d = vmax / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[ib].d = FloatToHalf(d);
        for (int i = 0; i < 16; ++i) {
          const int q0 = std::min(15, static_cast<int>(x[i] * id + 8.5f));
          const int q1 = std::min(15, static_cast<int>(x[i + 16] * id + 8.5f));
          b[ib].qs[i] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    case TensorType::kQ4_1:
      internal::QuantizeQ4_1(src, n / 32, static_cast<BlockQ4_1*>(dst));
      return;
    case TensorType::kQ5_0:
      internal::QuantizeQ5_0(src, n / 32, static_cast<BlockQ5_0*>(dst));
      return;
    case TensorType::kQ5_1:
      internal::QuantizeQ5_1(src, n / 32, static_cast<BlockQ5_1*>(dst));
      return;
    case TensorType::kQ4_K:
      internal::QuantizeQ4K(src, n / kQK_K, static_cast<BlockQ4_K*>(dst));
      return;
    case TensorType::kQ5_K:
      internal::QuantizeQ5K(src, n / kQK_K, static_cast<BlockQ5_K*>(dst));
      return;
    case TensorType::kQ6_K:
      internal::QuantizeQ6K(src, n / kQK_K, static_cast<BlockQ6_K*>(dst));
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
