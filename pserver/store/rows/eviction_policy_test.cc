#include "pserver/store/rows/eviction_policy.h"

#include <vector>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

SparseTableOptions Options(const char* text) {
  SparseTableOptions o;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &o)) << text;
  return o;
}

TEST(EvictionPolicyTest, ScoresByPolicy) {
  const float small[] = {0.1f, 0.0f}, big[] = {3.0f, 4.0f};
  RowUse old_often{/*last_step=*/10, /*updates=*/40, /*last_seconds=*/100};
  RowUse new_rare{/*last_step=*/90, /*updates=*/2, /*last_seconds=*/50};
  EvictionPolicy lru(Options("dim: 2"));
  EXPECT_LT(lru.Score(old_often, big, 2, 100),
            lru.Score(new_rare, big, 2, 100));
  EvictionPolicy lfu(Options("dim: 2 eviction { policy: LFU }"));
  EXPECT_EQ(lfu.Score(old_often, big, 2, 100), 40);
  EXPECT_GT(lfu.Score(old_often, big, 2, 100),
            lfu.Score(new_rare, big, 2, 100));
  // Decayed: 90 idle steps at a half-life of 10 leave 40 / 2^9.
  EvictionPolicy decayed(
      Options("dim: 2 eviction { policy: LFU lfu_half_life_steps: 10 }"));
  EXPECT_DOUBLE_EQ(decayed.Score(old_often, big, 2, 100), 40.0 / 512);
  EXPECT_DOUBLE_EQ(decayed.Score(new_rare, big, 2, 100), 2.0 / 2);
  EvictionPolicy ttl(Options("dim: 2 eviction { policy: TTL }"));
  EXPECT_GT(ttl.Score(old_often, big, 2, 100),
            ttl.Score(new_rare, big, 2, 100));
  EvictionPolicy norm(Options("dim: 2 eviction { policy: L2_NORM }"));
  EXPECT_FLOAT_EQ(norm.Score(new_rare, big, 2, 100), 5.0f);
  EXPECT_LT(norm.Score(old_often, small, 2, 100),
            norm.Score(new_rare, big, 2, 100));
}

TEST(EvictionPolicyTest, Expiry) {
  const float v[] = {0.3f, 0.4f};  // norm 0.5
  RowUse use{/*last_step=*/10, /*updates=*/1, /*last_seconds=*/1000};
  EvictionPolicy none(Options("dim: 2"));
  EXPECT_FALSE(none.expires());
  EXPECT_FALSE(none.Expired(use, v, 2, 1 << 20, 1 << 30));
  // The smaller of evict_after_steps and ttl_steps counts.
  EvictionPolicy steps(
      Options("dim: 2 evict_after_steps: 50 eviction { ttl_steps: 20 }"));
  EXPECT_EQ(steps.ttl_steps(), 20);
  EXPECT_FALSE(steps.Expired(use, v, 2, 30, 0));
  EXPECT_TRUE(steps.Expired(use, v, 2, 31, 0));
  EvictionPolicy seconds(Options("dim: 2 eviction { ttl_seconds: 60 }"));
  EXPECT_FALSE(seconds.Expired(use, v, 2, 10, 1060));
  EXPECT_TRUE(seconds.Expired(use, v, 2, 10, 1061));
  EvictionPolicy norm(Options("dim: 2 eviction { min_l2_norm: 0.6 }"));
  EXPECT_TRUE(norm.Expired(use, v, 2, 10, 1000));
  EvictionPolicy norm_low(Options("dim: 2 eviction { min_l2_norm: 0.4 }"));
  EXPECT_FALSE(norm_low.Expired(use, v, 2, 10, 1000));
}

TEST(EvictionPolicyTest, PassesArePaced) {
  EvictionPolicy steps(Options("dim: 1 evict_after_steps: 6"));
  EXPECT_TRUE(steps.PassDue(1, 0, /*sync=*/true));
  EXPECT_FALSE(steps.PassDue(2, 0, /*sync=*/false));
  EXPECT_TRUE(steps.PassDue(3, 0, /*sync=*/false));
  EvictionPolicy seconds(
      Options("dim: 1 eviction { ttl_seconds: 9 scan_every_steps: 10 }"));
  EXPECT_FALSE(seconds.PassDue(9, 0, true));
  EXPECT_TRUE(seconds.PassDue(10, 0, true));
  EvictionPolicy none(Options("dim: 1"));
  EXPECT_FALSE(none.PassDue(1000, 0, true));
  EXPECT_TRUE(none.evicts_when_full());
  EXPECT_FALSE(
      EvictionPolicy(Options("dim: 1 eviction { refuse_when_full: true }"))
          .evicts_when_full());
}

TEST(EvictionPolicyTest, SelectsTheLowestWithTiesByKey) {
  std::vector<EvictionCandidate> c = {
      {3.0, 1, 0}, {1.0, 9, 1}, {1.0, 4, 2}, {0.5, 7, 3}, {2.0, 2, 4}};
  EvictionPolicy::SelectLowest(&c, 3);
  EXPECT_EQ(c[0].key, 7u);
  EXPECT_EQ(c[1].key, 4u);  // score 1, the smaller key first
  EXPECT_EQ(c[2].key, 9u);
  EvictionPolicy::SelectLowest(&c, 99);  // more than there are: all, sorted
  EXPECT_EQ(c[4].key, 1u);
}

}  // namespace
}  // namespace shardps
