// Placement of dense blocks and sparse keys on the pservers, cut into
// bounded chunks.
#include "trainer/client/placement.h"

#include <set>
#include <utility>
#include <vector>

#include "common/placement/shard_map.h"
#include "common/transport/wire_limits.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(PlanChunksTest, EveryBlockOnceAndChunksBounded) {
  std::vector<DenseTableLayout> tables = {
      {"big", 3'000'000, 65536}, {"small", 10, 65536}, {"odd", 200'001, 1000}};
  const auto chunks = PlanChunks(tables, 3, kMaxChunkBytes);
  ASSERT_EQ(chunks.size(), 3u);
  std::set<std::pair<uint32_t, uint32_t>> seen;
  int64_t values = 0;
  for (const auto& server : chunks) {
    for (const auto& chunk : server) {
      size_t bytes = 0;
      for (const BlockPlacement& p : chunk) {
        EXPECT_TRUE(seen.insert({p.table_id, p.block}).second);
        bytes += p.size * sizeof(float);
        values += p.size;
        EXPECT_EQ(p.offset, int64_t{p.block} * tables[p.table_id].block_size);
      }
      EXPECT_LE(bytes, kMaxChunkBytes);
    }
  }
  EXPECT_EQ(values, 3'000'000 + 10 + 200'001);
}

TEST(SplitKeysTest, EveryKeyOnceOnItsServerAndChunksBounded) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 5000; ++k) keys.push_back(k * 2654435761u);
  const int dim = 16;
  // Room for 100 keys and rows per chunk.
  const size_t max_bytes = 100 * (sizeof(uint64_t) + dim * sizeof(float));
  const auto chunks = SplitKeys(keys, dim, 3, max_bytes, false);
  ASSERT_EQ(chunks.size(), 3u);
  std::set<uint32_t> seen;
  for (int s = 0; s < 3; ++s) {
    for (const auto& chunk : chunks[s]) {
      EXPECT_LE(chunk.size(), 100u);
      EXPECT_FALSE(chunk.empty());
      for (uint32_t i : chunk) {
        EXPECT_TRUE(seen.insert(i).second);
        EXPECT_EQ(SparseKeyServer(keys[i], 3), s);
      }
    }
  }
  EXPECT_EQ(seen.size(), keys.size());
}

TEST(SplitKeysTest, EveryServerGetsAChunkWhenAsked) {
  const std::vector<uint64_t> one = {42};
  const auto sparse = SplitKeys(one, 4, 5, 1 << 20, false);
  const auto every = SplitKeys(one, 4, 5, 1 << 20, true);
  int with_chunks = 0;
  for (int s = 0; s < 5; ++s) {
    with_chunks += !sparse[s].empty();
    ASSERT_EQ(every[s].size(), 1u);
  }
  EXPECT_EQ(with_chunks, 1);
}

}  // namespace
}  // namespace shardps
