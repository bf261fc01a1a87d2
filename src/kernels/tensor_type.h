// kernels/tensor_type.h — GGML tensor element types: ids, block layouts, sizes,
// and the exact F16/BF16 conversions.
//
// Promise: every type id that may appear in a GGUF file is known here with its
// block size and bytes per block, so the reader can size any tensor and name an
// unsupported type in its error. `IsComputeSupported` says which types the
// kernels can multiply. These facts come from the traits table
// (kernels/type_traits.h). Byte layouts of the supported types are documented in
// docs/formats/gguf.md.
//
// Threading: pure functions and constants.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace strata::kernels {

// Ids as stored in GGUF tensor infos (ggml's numbering).
enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct TypeInfo {
  std::string_view name;  // "Q8_0"
  int32_t block_size;     // elements per block
  int32_t block_bytes;    // bytes per block
};

// nullopt for an id no GGUF type has.
std::optional<TypeInfo> GetTypeInfo(uint32_t type_id);
inline TypeInfo GetTypeInfo(TensorType t) { return *GetTypeInfo(static_cast<uint32_t>(t)); }
inline std::string_view TypeName(TensorType t) { return GetTypeInfo(t).name; }

// Parses a type name, case-insensitive ("q8_0", "F16").
std::optional<TensorType> ParseTensorType(std::string_view name);

// Types the kernels can use as weights (matrix-vector / matrix-matrix products).
bool IsComputeSupported(TensorType t);
// Their names in id order, comma-separated ("F32, F16, Q4_0, ..."), for messages.
std::string ComputeSupportedTypeNames();

// Bytes of `n` elements; n must be a multiple of the block size.
inline uint64_t RowBytes(TensorType t, int64_t n) {
  const TypeInfo info = GetTypeInfo(t);
  return static_cast<uint64_t>(n / info.block_size) * static_cast<uint64_t>(info.block_bytes);
}

// IEEE half <-> float, round-to-nearest-even, with subnormals, inf and NaN.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

// bfloat16 <-> float (round-to-nearest-even; NaN stays NaN).
inline float Bf16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace strata::kernels
