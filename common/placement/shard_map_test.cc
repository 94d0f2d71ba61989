#include "common/placement/shard_map.h"

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

TEST(ShardMapTest, ReplicasFollowTheShardAroundTheRing) {
  EXPECT_EQ(ReplicaServers(0, 1, 3), (std::vector<int>{0}));
  EXPECT_EQ(ReplicaServers(1, 2, 3), (std::vector<int>{1, 2}));
  EXPECT_EQ(ReplicaServers(2, 2, 3), (std::vector<int>{2, 0}));
  EXPECT_EQ(ReplicaServers(2, 3, 3), (std::vector<int>{2, 0, 1}));
  // Each pserver is primary of one shard and backup of R-1 others.
  std::vector<int> held(4, 0);
  for (int s = 0; s < 4; ++s) {
    for (int p : ReplicaServers(s, 3, 4)) ++held[p];
  }
  EXPECT_EQ(held, (std::vector<int>{3, 3, 3, 3}));
}

TEST(ShardMapTest, ThePrimaryIsTheFirstLiveReplica) {
  EXPECT_EQ(PrimaryServer(1, 2, 3, {0, 1, 2}), 1);
  EXPECT_EQ(PrimaryServer(1, 2, 3, {0, 2}), 2);   // 1 died: its backup
  EXPECT_EQ(PrimaryServer(2, 2, 3, {0, 1}), 0);   // wraps around the ring
  EXPECT_EQ(PrimaryServer(2, 2, 3, {1}), -1);     // both replicas gone
  EXPECT_EQ(PrimaryServer(2, 1, 3, {0, 1}), -1);  // no replication
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
