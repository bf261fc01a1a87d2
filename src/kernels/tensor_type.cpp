#include "kernels/tensor_type.h"

#include <array>
#include <cctype>
#include <cmath>

namespace strata::kernels {
namespace {

struct Entry {
  uint32_t id;
  TypeInfo info;
};

// Block sizes and bytes per block of every GGUF tensor type (see docs/formats/gguf.md).
constexpr std::array<Entry, 32> kTypes = {{
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},      {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},  {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},   {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
}};

}  // namespace

std::optional<TypeInfo> GetTypeInfo(uint32_t type_id) {
  for (const auto& e : kTypes) {
    if (e.id == type_id) return e.info;
  }
  return std::nullopt;
}

std::optional<TensorType> ParseTensorType(std::string_view name) {
  for (const auto& e : kTypes) {
    if (e.info.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::toupper(static_cast<unsigned char>(name[i])) == e.info.name[i];
    }
    if (same) return static_cast<TensorType>(e.id);
  }
  return std::nullopt;
}

bool IsComputeSupported(TensorType t) {
  switch (t) {
    case TensorType::kF32:
    case TensorType::kF16:
    case TensorType::kBF16:
    case TensorType::kQ8_0:
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
      return true;
    default:
      return false;
  }
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      // Subnormal half: value = mant * 2^-24; normalise into a float.
      const float v = std::ldexp(static_cast<float>(mant), -24);
      uint32_t vb;
      std::memcpy(&vb, &v, sizeof(vb));
      bits = sign | vb;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: round abs * 2^24 to an integer (ties to even).
    float a;
    std::memcpy(&a, &abs, sizeof(a));
    const float scaled = a * 16777216.0f;  // exact: scaling by a power of two
    const float r = std::nearbyint(scaled);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
  return static_cast<uint16_t>(sign | h);
}

}  // namespace strata::kernels
