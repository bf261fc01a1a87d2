#include "kernels/tensor_type.h"

#include <cmath>

// The type facts (GetTypeInfo, ParseTensorType, IsComputeSupported) come from the
// traits table, kernels/type_traits.cpp.
namespace strata::kernels {

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
