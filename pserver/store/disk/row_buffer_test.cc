#include "pserver/store/disk/row_buffer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

int BucketByTens(uint64_t key) { return static_cast<int>(key / 10 % 3); }

TEST(RowBufferTest, KeepsTheNewestVersionOfEachKey) {
  RowBuffer b(1 << 10);
  EXPECT_TRUE(b.empty());
  b.Put(1, "one");
  b.Put(2, "two");
  b.Put(1, "uno");  // overwrites
  b.Delete(2);
  b.Delete(3);  // a key that was never here: its deletion is kept
  b.Put(3, "tres");
  EXPECT_EQ(b.rows(), 2);  // 1 and 3
  std::string row;
  EXPECT_EQ(b.Find(1, &row), RowBuffer::Found::kRow);
  EXPECT_EQ(row, "uno");
  EXPECT_EQ(b.Find(2, &row), RowBuffer::Found::kDeleted);
  EXPECT_EQ(b.Find(3, &row), RowBuffer::Found::kRow);
  EXPECT_EQ(row, "tres");
  EXPECT_EQ(b.Find(4, &row), RowBuffer::Found::kNotHere);
  // The bytes of an overwritten row stay until the buffer goes.
  EXPECT_GE(b.bytes(), 3 + 3 + 3 + 4);
}

// What a write will take is known before it is made (the store checks
// its buffers' limit with it), the hash's growth included.
TEST(RowBufferTest, BytesWithForeseesTheBytesOfNewKeys) {
  RowBuffer b;
  uint64_t key = 0;
  for (int batch = 0; batch < 40; ++batch) {
    const int n = 1 + batch * 7;
    const int64_t foreseen = b.BytesWith(int64_t{n} * 100, n);
    for (int i = 0; i < n; ++i) b.Put(++key, std::string(100, 'r'));
    ASSERT_EQ(b.bytes(), foreseen) << "batch " << batch;
  }
  // Sorting does not change it.
  const int64_t before = b.bytes();
  b.Sorted(&BucketByTens);
  EXPECT_EQ(b.bytes(), before);
}

TEST(RowBufferTest, SortedByBucketThenKeyOnceAndByBucket) {
  RowBuffer b;
  const std::vector<uint64_t> keys = {31, 5, 12, 40, 21, 3, 17, 29};
  for (uint64_t k : keys) b.Put(k, std::to_string(k));
  b.Delete(12);
  absl::Span<const RowBuffer::Entry> sorted = b.Sorted(&BucketByTens);
  ASSERT_EQ(sorted.size(), keys.size());
  // Buckets: 0 {3, 5, 31}, 1 {12, 17, 40}, 2 {21, 29}.
  std::vector<uint64_t> order;
  for (const RowBuffer::Entry& e : sorted) order.push_back(e.key);
  EXPECT_EQ(order, (std::vector<uint64_t>{3, 5, 31, 12, 17, 40, 21, 29}));
  EXPECT_EQ(sorted[3].size, RowBuffer::kDeletedSize);
  EXPECT_EQ(b.RowOf(sorted[4]), "17");
  ASSERT_EQ(b.InBucket(1).size(), 3u);
  EXPECT_EQ(b.InBucket(1)[2].key, 40u);
  EXPECT_EQ(b.InBucket(2).size(), 2u);
  EXPECT_TRUE(b.InBucket(7).empty());
  // Made once: a second call is the same order.
  EXPECT_EQ(b.Sorted(&BucketByTens).data(), sorted.data());
}

}  // namespace
}  // namespace shardps
