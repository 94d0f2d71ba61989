#include "compression/value_encoding.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(ValueEncodingTest, RoundTripsEachEncoding) {
  const std::vector<float> v = {0.0f, 1.0f, -2.5f, 0.333333f, 1e-3f};
  for (ValueEncoding e : {FLOAT32, FLOAT16, BFLOAT16}) {
    std::string bytes;
    EncodeValues(v, e, &bytes);
    EXPECT_EQ(bytes.size(), v.size() * BytesPerValue(e));
    std::vector<float> back(v.size());
    ASSERT_TRUE(DecodeValues(bytes, e, absl::MakeSpan(back)).ok());
    for (size_t i = 0; i < v.size(); ++i) {
      const float tol = e == FLOAT32 ? 0 : e == FLOAT16 ? 1e-3f : 8e-3f;
      EXPECT_NEAR(back[i], v[i], tol * std::max(1.0f, std::fabs(v[i])))
          << ValueEncoding_Name(e) << " " << i;
    }
  }
}

TEST(ValueEncodingTest, WrongLengthOrEncodingIsInvalid) {
  std::vector<float> out(3);
  EXPECT_EQ(
      DecodeValues(std::string(5, 'x'), FLOAT16, absl::MakeSpan(out)).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      DecodeValues(std::string(12, 'x'), THRESHOLD, absl::MakeSpan(out)).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      DecodeValues(std::string(12, '\0'), FLOAT32, absl::MakeSpan(out)).ok());
}

}  // namespace
}  // namespace shardps
