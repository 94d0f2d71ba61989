#include "common/shard_map.h"

#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(ShardMapTest, TableHashIsStable) {
  // Fixed values: placement must not change between builds or machines.
  EXPECT_EQ(TableHash("fc1.weight"), TableHash("fc1.weight"));
  EXPECT_NE(TableHash("fc1.weight"), TableHash("fc1.bias"));
  EXPECT_EQ(TableHash(""), Mix64(0xcbf29ce484222325ULL));
}

TEST(ShardMapTest, BlocksAreSpreadRoundRobinFromTheTableHash) {
  const uint64_t h = TableHash("t");
  std::vector<int> count(3, 0);
  for (int b = 0; b < 30; ++b) {
    const int s = DenseBlockServer(h, b, 3);
    ASSERT_GE(s, 0);
    ASSERT_LT(s, 3);
    EXPECT_EQ(s, (h + b) % 3);
    ++count[s];
  }
  EXPECT_EQ(count, std::vector<int>({10, 10, 10}));
}

TEST(ShardMapTest, NumBlocksRoundsUp) {
  EXPECT_EQ(NumBlocks(10, 5), 2);
  EXPECT_EQ(NumBlocks(11, 5), 3);
  EXPECT_EQ(NumBlocks(1, 65536), 1);
}

TEST(ShardMapTest, SparseKeysSpreadEvenly) {
  std::vector<int> count(4, 0);
  for (uint64_t k = 0; k < 40000; ++k) ++count[SparseKeyServer(k, 4)];
  for (int c : count) EXPECT_NEAR(c, 10000, 400);
}

}  // namespace
}  // namespace shardps
