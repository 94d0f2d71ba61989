#include "pserver/store/rows/row_codec.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

// Exactly representable values pass unchanged, whatever the random bits.
TEST(RowCodecTest, RepresentableValuesRoundTrip) {
  for (float x : {0.0f, -0.0f, 1.0f, -2.5f, 0.375f, 1024.0f, -2048.0f}) {
    for (uint32_t r : {0u, 1u, 0x7FFFu, 0xFFFFu}) {
      EXPECT_EQ(RowCodec::FromBf16(RowCodec::ToBf16(x, r)), x) << x;
      EXPECT_EQ(RowCodec::FromFp16(RowCodec::ToFp16(x, r, false)), x) << x;
    }
    EXPECT_EQ(RowCodec::FromFp16(RowCodec::ToFp16(x, 0, true)), x) << x;
    EXPECT_EQ(RowCodec::FromBf16(RowCodec::ToBf16Nearest(x)), x) << x;
  }
  // Half's subnormals: multiples of 2^-24.
  const float tiny = 3 * 5.9604644775390625e-08f;
  EXPECT_EQ(RowCodec::FromFp16(RowCodec::ToFp16(tiny, 0xFFFF, false)), tiny);
}

// Nearest rounding, ties to even, as the formats define it.
TEST(RowCodecTest, NearestRounding) {
  // 1 + 2^-8 is bf16's tie between 1 and 1 + 2^-7: to even (1).
  EXPECT_EQ(RowCodec::FromBf16(RowCodec::ToBf16Nearest(1.00390625f)), 1.0f);
  EXPECT_EQ(RowCodec::FromBf16(RowCodec::ToBf16Nearest(1.006f)), 1.0078125f);
  // Half: 1 + 2^-11 ties to 1, 1 + 3 * 2^-11 to 1 + 2^-9.
  EXPECT_EQ(RowCodec::FromFp16(RowCodec::ToFp16(1.00048828125f, 0, true)),
            1.0f);
  EXPECT_EQ(RowCodec::FromFp16(RowCodec::ToFp16(1.00146484375f, 0, true)),
            1.001953125f);
}

// Stochastic rounding is unbiased: the mean of many roundings of x, each
// with its own bits, is x to well within one step of the format; each
// rounding is one of x's two neighbours.
TEST(RowCodecTest, StochasticRoundingIsUnbiased) {
  std::mt19937 rng(3);
  for (float x : {0.1f, -0.3333f, 1.0e-3f, 12345.678f, 2.0e-6f, -7.7e-7f}) {
    double sum16 = 0, sumb = 0;
    const int n = 200000;
    const float b_lo = RowCodec::FromBf16(RowCodec::ToBf16(x, 0));
    for (int i = 0; i < n; ++i) {
      const uint32_t r = rng() & 0xFFFF;
      const float b = RowCodec::FromBf16(RowCodec::ToBf16(x, r));
      const float h = RowCodec::FromFp16(RowCodec::ToFp16(x, r, false));
      EXPECT_LE(std::fabs(b - x), std::fabs(x) / 128) << x;
      EXPECT_TRUE(b == b_lo || std::fabs(b) > std::fabs(b_lo)) << x;
      sumb += b;
      sum16 += h;
    }
    const double bf16_step = std::fabs(x) / 128;
    EXPECT_NEAR(sumb / n, x, bf16_step / 50) << x;
    const double fp16_step =
        std::max(std::fabs(x) / 1024.0, 5.9604644775390625e-08);
    EXPECT_NEAR(sum16 / n, x, fp16_step / 50) << x;
  }
}

// Finite values stay finite: past the format's range they saturate.
TEST(RowCodecTest, SaturatesInsteadOfInfinity) {
  const float big = std::numeric_limits<float>::max();
  EXPECT_TRUE(std::isfinite(RowCodec::FromBf16(RowCodec::ToBf16(big, 0xFFFF))));
  EXPECT_TRUE(std::isfinite(RowCodec::FromBf16(RowCodec::ToBf16Nearest(big))));
  EXPECT_EQ(RowCodec::FromFp16(RowCodec::ToFp16(1e6f, 0xFFFF, false)),
            65504.0f);
  EXPECT_EQ(RowCodec::FromFp16(RowCodec::ToFp16(-65519.0f, 0xFFFF, false)),
            -65504.0f);
  EXPECT_EQ(RowCodec::FromFp16(RowCodec::ToFp16(1e-9f, 0, true)), 0.0f);
}

// A row encodes and decodes through the codec; the same seed rounds the
// same way, another seed (another update) may not.
TEST(RowCodecTest, RowsAreDeterministicPerSeed) {
  for (auto type : {SparseTableOptions::BF16, SparseTableOptions::FP16,
                    SparseTableOptions::FLOAT32}) {
    RowCodec codec(type);
    std::vector<float> row(37);
    for (size_t i = 0; i < row.size(); ++i) row[i] = 0.01f * i - 0.17f;
    std::vector<uint8_t> a(row.size() * codec.bytes_per_float());
    std::vector<uint8_t> b(a.size()), c(a.size());
    codec.EncodeStochastic(row.data(), 37, 42, a.data());
    codec.EncodeStochastic(row.data(), 37, 42, b.data());
    codec.EncodeStochastic(row.data(), 37, 43, c.data());
    EXPECT_EQ(a, b);
    if (type != SparseTableOptions::FLOAT32) {
      EXPECT_NE(a, c);
    }
    std::vector<float> back(row.size());
    codec.Decode(a.data(), 37, back.data());
    const float rel = type == SparseTableOptions::BF16   ? 1.0f / 128
                      : type == SparseTableOptions::FP16 ? 1.0f / 1024
                                                         : 0.0f;
    for (size_t i = 0; i < row.size(); ++i) {
      EXPECT_LE(std::fabs(back[i] - row[i]), std::fabs(row[i]) * rel) << i;
    }
  }
}

}  // namespace
}  // namespace shardps
