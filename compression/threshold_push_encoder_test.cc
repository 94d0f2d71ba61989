#include "compression/threshold_push_encoder.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

// Options.table_thresholds: each table's blocks encode with its own
// threshold; `threshold` is for tables beyond the list.
TEST(ThresholdPushEncoderTest, ThresholdPerTable) {
  ThresholdPushEncoder::Options o;
  o.adaptive = false;
  o.threshold = 0.25;
  o.table_thresholds = {0.5, 2.0};
  ThresholdPushEncoder enc(o, {4, 4, 4});
  const std::vector<float> u = {1.0f, 1.0f, 0.0f, 0.0f};
  std::string bytes;
  for (uint32_t t = 0; t < 3; ++t) {
    ASSERT_TRUE(enc.Encode(t, 0, 0, u, &bytes).ok());
    ThresholdPushEncoder::Stats s = enc.TakeStats();
    EXPECT_EQ(s.threshold_sum,
              o.threshold * (t == 2) + (t < 2 ? o.table_thresholds[t] : 0.0))
        << t;
    // Table 1's 2.0 is above the update: nothing is sent.
    EXPECT_EQ(bytes.empty(), t == 1) << t;
    EXPECT_EQ(s.selected, t == 1 ? 0 : 2) << t;
  }
}

}  // namespace
}  // namespace shardps
