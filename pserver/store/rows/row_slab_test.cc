#include "pserver/store/rows/row_slab.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(RowSlabTest, RowsAreFoundAddedAndRemovedWithTheirBytesSaidFirst) {
  RowSlab slab(/*row_floats=*/3, RowCodec(SparseTableOptions::FLOAT32),
               /*rows_per_chunk=*/4);
  EXPECT_EQ(slab.row_bytes(), 20 + 12);
  // The first row needs a chunk and the index's first 16 entries.
  EXPECT_EQ(slab.BytesToAdd(), 4 * 32 + 16 * 8);
  std::vector<uint32_t> slots;
  for (uint64_t k = 0; k < 10; ++k) {
    const uint32_t slot = slab.Add(k * 1000003);
    const float row[] = {1.0f * k, 2.0f, 3.0f};
    slab.SetFloats(slot, row);
    slots.push_back(slot);
  }
  EXPECT_EQ(slab.size(), 10u);
  EXPECT_EQ(slab.slots_used(), 10u);
  EXPECT_EQ(slab.Bytes(), 3 * 4 * 32u + 16 * 8u);  // 3 chunks, 16 entries
  // Slots 10 and 11 are in the third chunk already: nothing to allocate.
  EXPECT_EQ(slab.BytesToAdd(), 0);
  for (uint64_t k = 0; k < 10; ++k) {
    ASSERT_EQ(slab.Find(k * 1000003), slots[k]);
    EXPECT_EQ(slab.Head(slots[k])->key, k * 1000003);
    EXPECT_EQ(slab.Floats(slots[k], 3, nullptr)[0], 1.0f * k);
  }
  EXPECT_EQ(slab.Find(7), RowSlab::kNone);

  // A removed row's slot is the next one handed out.
  slab.Remove(3 * 1000003, slots[3]);
  EXPECT_EQ(slab.Find(3 * 1000003), RowSlab::kNone);
  EXPECT_EQ(slab.Add(42), slots[3]);
  EXPECT_EQ(slab.Head(slots[3])->updates, 0u);
  EXPECT_EQ(slab.slots_used(), 10u);
  std::set<uint32_t> seen;
  slab.ForEach([&](uint32_t slot) { seen.insert(slot); });
  EXPECT_EQ(seen.size(), 10u);

  slab.Clear();
  EXPECT_EQ(slab.size(), 0u);
  EXPECT_EQ(slab.Bytes(), 0u);
  EXPECT_EQ(slab.Find(42), RowSlab::kNone);
}

TEST(RowSlabTest, ABatchFindsItsKeysThroughSharedHashes) {
  RowSlab slab(2, RowCodec(SparseTableOptions::BF16), 64);
  EXPECT_EQ(slab.row_bytes(), 24);  // 20 + 2 * 2
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 200; ++k) keys.push_back(k * 0x9E3779B97F4A7C15ULL);
  for (size_t i = 0; i < keys.size(); i += 2) slab.Add(keys[i]);
  std::vector<uint32_t> slots(keys.size());
  slab.FindBatch(keys, 24, slots.data());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i % 2 == 0) {
      ASSERT_NE(slots[i], RowSlab::kNone) << i;
      EXPECT_EQ(slab.Head(slots[i])->key, keys[i]);
    } else {
      EXPECT_EQ(slots[i], RowSlab::kNone) << i;
    }
  }
  // bf16 floats come back decoded, to bf16's precision.
  const float row[] = {1.0f, 1.0f + 1.0f / 512};
  slab.SetFloats(slots[0], row);
  float out[2];
  EXPECT_EQ(slab.Floats(slots[0], 2, out), out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f);  // 2^-9 is below bf16's step at 1
}

}  // namespace
}  // namespace shardps
