#include "kernels/half.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(HalfTest, ExactValuesRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f,
                  5.9604645e-08f /* smallest subnormal */, 1024.0f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(f)), f) << f;
  }
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
}

TEST(HalfTest, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: rounds to 1 (even).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: to even.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)),
            0x3c01);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);  // below the Inf boundary
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // rounds to Inf
}

TEST(HalfTest, SpecialValues) {
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  EXPECT_EQ(HalfToFloat(FloatToHalf(std::numeric_limits<float>::infinity())),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(FloatToHalf(1e-10f), 0);  // underflows to zero
  // Subnormal rounding: 1.5 * 2^-24 rounds to 2 * 2^-24 (even).
  EXPECT_EQ(FloatToHalf(1.5f * 5.9604645e-08f), 2);
}

TEST(HalfTest, RelativeErrorBound) {
  for (float f = 1e-4f; f < 6e4f; f *= 1.37f) {
    const float back = HalfToFloat(FloatToHalf(f));
    EXPECT_LE(std::fabs(back - f), f * std::ldexp(1.0f, -11) * 1.0001f) << f;
  }
}

TEST(Bfloat16Test, RoundTripAndRounding) {
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(1.0f)), 1.0f);
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1).
  EXPECT_EQ(FloatToBfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(std::nanf("")))));
  // The largest float rounds up past bfloat16's largest finite value.
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(std::numeric_limits<float>::max())),
            std::numeric_limits<float>::infinity());
  for (float f = 1e-30f; f < 1e30f; f *= 3.1f) {
    const float back = Bfloat16ToFloat(FloatToBfloat16(f));
    EXPECT_LE(std::fabs(back - f), f * std::ldexp(1.0f, -8) * 1.0001f) << f;
  }
}

}  // namespace
}  // namespace shardps
