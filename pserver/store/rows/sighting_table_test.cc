#include "pserver/store/rows/sighting_table.h"

#include <cstdint>
#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

int64_t See(SightingTable& t, uint64_t key, int64_t step,
            std::vector<uint64_t>* dropped = nullptr) {
  uint64_t d = 0;
  bool any = false;
  const int64_t n = t.See(key, step, &d, &any);
  if (any && dropped != nullptr) dropped->push_back(d);
  return n;
}

TEST(SightingTableTest, CountsUntilErased) {
  SightingTable t(1024);
  EXPECT_FALSE(t.allocated());
  EXPECT_EQ(See(t, 7, 1), 1);
  EXPECT_TRUE(t.allocated());
  EXPECT_EQ(See(t, 7, 3), 2);
  ASSERT_NE(t.Find(7), nullptr);
  EXPECT_EQ(t.Find(7)->count, 2);
  EXPECT_EQ(t.Find(7)->last_step, 3);
  EXPECT_EQ(t.size(), 1);
  t.Erase(7);
  EXPECT_EQ(t.Find(7), nullptr);
  EXPECT_EQ(t.size(), 0);
  EXPECT_EQ(See(t, 7, 4), 1);
}

TEST(SightingTableTest, AStreamOfNewKeysStaysWithinItsSize) {
  SightingTable t(4096);
  const int64_t bytes = t.Bytes();
  std::vector<uint64_t> dropped;
  for (uint64_t k = 0; k < 1000000; ++k) See(t, k, 0, &dropped);
  EXPECT_EQ(t.Bytes(), bytes);
  EXPECT_LE(t.size(), 4096);
  EXPECT_EQ(t.size() + static_cast<int64_t>(dropped.size()), 1000000);
}

TEST(SightingTableTest, AFullBucketDropsItsLowestCountThenOldestThenKey) {
  // One bucket: every key shares it.
  SightingTable t(SightingTable::kWays);
  for (uint64_t k = 1; k <= SightingTable::kWays; ++k) {
    See(t, k, static_cast<int64_t>(k));
    if (k != 3) See(t, k, 10);  // key 3 seen once, at step 3
  }
  std::vector<uint64_t> dropped;
  See(t, 100, 11, &dropped);
  EXPECT_EQ(dropped, std::vector<uint64_t>{3});
  // Now 100 has the lowest count (1); the next newcomer drops it.
  See(t, 101, 12, &dropped);
  EXPECT_EQ(dropped, (std::vector<uint64_t>{3, 100}));
  // Equal counts and steps: the smallest key goes.
  SightingTable u(SightingTable::kWays);
  for (uint64_t k = 50; k > 50 - SightingTable::kWays; --k) See(u, k, 1);
  dropped.clear();
  See(u, 1000, 1, &dropped);
  EXPECT_EQ(dropped, std::vector<uint64_t>{50 - SightingTable::kWays + 1});
}

TEST(SightingTableTest, TheSameSightingsDropTheSameKeys) {
  auto run = [] {
    SightingTable t(64);
    std::vector<uint64_t> dropped;
    for (uint64_t i = 0; i < 5000; ++i) See(t, (i * 7919) % 977, i, &dropped);
    return dropped;
  };
  EXPECT_EQ(run(), run());
}

TEST(SightingTableTest, SetRestoresAndRemoveIfForgets) {
  SightingTable t(256);
  uint64_t d = 0;
  bool any = false;
  t.Set(5, Sighting{3, 9}, &d, &any);
  t.Set(6, Sighting{1, 2}, &d, &any);
  EXPECT_FALSE(any);
  EXPECT_EQ(t.Find(5)->count, 3);
  std::vector<uint64_t> gone;
  t.RemoveIf([](uint64_t, const Sighting& s) { return s.last_step < 5; },
             [&](uint64_t key) { gone.push_back(key); });
  EXPECT_EQ(gone, std::vector<uint64_t>{6});
  std::map<uint64_t, int64_t> left;
  t.ForEach([&](uint64_t k, const Sighting& s) { left[k] = s.count; });
  EXPECT_EQ(left, (std::map<uint64_t, int64_t>{{5, 3}}));
  t.Clear();
  EXPECT_FALSE(t.allocated());
  EXPECT_EQ(t.size(), 0);
}

}  // namespace
}  // namespace shardps
