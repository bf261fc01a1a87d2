// sampling/internal/fast_exp.h — a branch-free float exp. Private to sampling/.
//
// FastExp has a relative error below 2e-7 on [-87, 0] (checked against
// std::exp in tests/sampling/processors_test.cpp) and returns exactly 0 below
// -87, so a weight times a huge finite logit gap is 0, never NaN. It is plain
// arithmetic on bit patterns and value selects, so loops over it vectorise at
// -O3 with the baseline ISA (sampling/ builds with -fno-trapping-math, without
// which GCC will not if-convert float compares), and it gives the same bits on
// every x86-64 machine (no FMA contraction under -std=c++20).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace strata::sampling::internal {

inline float FastExp(float x) {
  float xc = x < -88.0f ? -88.0f : x;  // value selects, not std::min/max on references,
  xc = xc > 88.0f ? 88.0f : xc;        // so that loops if-convert
  // n = round(x / ln 2) by the 1.5 * 2^23 trick: the low mantissa bits hold n.
  const float t = xc * 1.44269504088896341f + 12582912.0f;
  const float n = t - 12582912.0f;
  const int32_t ni = std::bit_cast<int32_t>(t) - 0x4B400000;
  // r = x - n ln 2, in two parts for precision; |r| <= ln 2 / 2.
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  // Cephes expf polynomial for e^r.
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const float scale =
      std::bit_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(ni + 127) << 23));
  const float y = er * scale;
  return xc < -87.0f ? 0.0f : y;
}

// x = logit - shift, kept finite (a gap beyond float range becomes -3e38).
inline float Gap(float logit, float shift) {
  const float x = logit - shift;
  return x < -3.0e38f ? -3.0e38f : x;
}

}  // namespace strata::sampling::internal
