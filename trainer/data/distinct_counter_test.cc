#include "trainer/data/distinct_counter.h"

#include <cmath>
#include <cstdint>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(DistinctCounterTest, ExactBelowK) {
  DistinctCounter c(100);
  EXPECT_EQ(c.Estimate(), 0);
  for (int round = 0; round < 3; ++round) {
    for (uint64_t id = 0; id < 99; ++id) c.Add(id * 7919);
  }
  EXPECT_EQ(c.Estimate(), 99);
}

TEST(DistinctCounterTest, EstimatesManyIdsWithinItsError) {
  // 1/sqrt(16384) = 0.8%; allow three times that.
  for (uint64_t n : {30000u, 300000u}) {
    DistinctCounter c;
    for (uint64_t i = 0; i < n; ++i) {
      c.Add(i);
      if (i % 3 == 0) c.Add(i);  // repeats change nothing
    }
    EXPECT_NEAR(c.Estimate() / n, 1.0, 0.025) << n;
  }
}

TEST(DistinctCounterTest, OrderDoesNotMatter) {
  DistinctCounter up, down;
  for (uint64_t i = 0; i < 50000; ++i) {
    up.Add(i << 20);
    down.Add((49999 - i) << 20);
  }
  EXPECT_EQ(up.Estimate(), down.Estimate());
}

}  // namespace
}  // namespace shardps
