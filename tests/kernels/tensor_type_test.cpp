#include "kernels/tensor_type.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace strata::kernels {
namespace {

TEST(TensorType, KnownTypesHaveGgmlBlockLayouts) {
  EXPECT_EQ(GetTypeInfo(TensorType::kQ8_0).block_bytes, 34);
  EXPECT_EQ(GetTypeInfo(TensorType::kQ4_0).block_bytes, 18);
  EXPECT_EQ(GetTypeInfo(TensorType::kQ4_K).block_size, 256);
  EXPECT_EQ(GetTypeInfo(TensorType::kQ6_K).block_bytes, 210);
  EXPECT_FALSE(GetTypeInfo(4).has_value());  // removed Q4_2
  EXPECT_EQ(*ParseTensorType("q8_0"), TensorType::kQ8_0);
  EXPECT_EQ(*ParseTensorType("BF16"), TensorType::kBF16);
  EXPECT_FALSE(ParseTensorType("q9_9").has_value());
  EXPECT_EQ(RowBytes(TensorType::kQ4_0, 64), 36u);
}

TEST(TensorType, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
      continue;
    }
    EXPECT_EQ(FloatToHalf(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(TensorType, FloatToHalfRoundsToNearestEven) {
  // Compare with rounding done in double over many floats spread across the range.
  for (int e = -30; e <= 17; ++e) {
    for (int k = 0; k < 2000; ++k) {
      const float f = std::ldexp(1.0f + static_cast<float>(k) / 2000.0f, e);
      const float back = HalfToFloat(FloatToHalf(f));
      if (std::isinf(back)) {
        EXPECT_GE(f, 65520.0f);
        continue;
      }
      // No other half is closer than the one chosen.
      const uint16_t h = FloatToHalf(f);
      for (int d : {-1, 1}) {
        const uint16_t nb = static_cast<uint16_t>(h + d);
        const float other = HalfToFloat(nb);
        if (std::isnan(other) || std::isinf(other)) continue;
        EXPECT_LE(std::fabs(static_cast<double>(back) - f),
                  std::fabs(static_cast<double>(other) - f))
            << f;
      }
    }
  }
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1e-9f), 0);
}

TEST(TensorType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(FloatToBf16(1.00390625f), 0x3f80);  // exactly halfway, rounds to even
  EXPECT_EQ(FloatToBf16(1.01171875f), 0x3f82);  // halfway above odd, rounds up
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
}

}  // namespace
}  // namespace strata::kernels
