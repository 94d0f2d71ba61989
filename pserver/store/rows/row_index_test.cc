#include "pserver/store/rows/row_index.h"

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

// The index against std::unordered_map through random inserts and erases:
// every key found where it was filed, absent keys absent, the size right.
TEST(RowIndexTest, MatchesAMapThroughInsertsAndErases) {
  RowIndex index;
  std::unordered_map<uint64_t, uint32_t> want;
  std::vector<uint64_t> key_of_slot;
  std::vector<uint32_t> free_slots;
  auto key_of = [&](uint32_t slot) { return key_of_slot[slot]; };
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Small keys collide in a stripe's range often enough to erase.
    const uint64_t key = rng() % 20000;
    const uint32_t hash = RowIndex::Hash(key);
    auto it = want.find(key);
    if (it == want.end()) {
      uint32_t slot;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        slot = static_cast<uint32_t>(key_of_slot.size());
        key_of_slot.push_back(0);
      }
      key_of_slot[slot] = key;
      index.Insert(hash, slot);
      want[key] = slot;
    } else if (rng() % 2 == 0) {
      ASSERT_TRUE(index.Erase(hash, it->second));
      free_slots.push_back(it->second);
      want.erase(it);
    }
    ASSERT_EQ(index.size(), want.size());
  }
  for (uint64_t key = 0; key < 20000; ++key) {
    auto it = want.find(key);
    const uint32_t found = index.Find(key, RowIndex::Hash(key), key_of);
    if (it == want.end()) {
      EXPECT_EQ(found, RowIndex::kNone) << key;
    } else {
      EXPECT_EQ(found, it->second) << key;
    }
  }
  size_t visited = 0;
  index.ForEach([&](uint32_t slot) {
    ++visited;
    EXPECT_EQ(want.at(key_of_slot[slot]), slot);
  });
  EXPECT_EQ(visited, want.size());
  // At most three quarters full.
  EXPECT_LE(index.size() * 4, index.capacity() * 3);
}

// Keys of one hash: First gives the first entry, Find the right one, and
// erasing the first leaves the second found.
TEST(RowIndexTest, SameHashKeysAreTellApartByTheirRows) {
  RowIndex index;
  const uint64_t keys[] = {11, 22};
  auto key_of = [&](uint32_t slot) { return keys[slot]; };
  index.Insert(5, 0);
  index.Insert(5, 1);
  EXPECT_EQ(index.First(5), 0u);
  EXPECT_EQ(index.Find(22, 5, key_of), 1u);
  EXPECT_EQ(index.Find(33, 5, key_of), RowIndex::kNone);
  EXPECT_TRUE(index.Erase(5, 0));
  EXPECT_FALSE(index.Erase(5, 0));
  EXPECT_EQ(index.Find(22, 5, key_of), 1u);
  EXPECT_EQ(index.First(6), RowIndex::kNone);
  index.Clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.Bytes(), 0u);
  EXPECT_EQ(index.Find(22, 5, key_of), RowIndex::kNone);
}

}  // namespace
}  // namespace shardps
