#include "pserver/store/disk/row_store.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/small_disk.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

std::unique_ptr<RowStore> OpenIn(const std::string& dir,
                                 int64_t block_cache_bytes = 1 << 20) {
  RowStore::Options o;
  o.dir = dir;
  o.write_buffer_bytes = 1 << 20;
  o.block_cache_bytes = block_cache_bytes;
  o.filter_bytes = 16 << 10;  // answers for keys never written
  absl::StatusOr<std::unique_ptr<RowStore>> store = RowStore::Open(o);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

std::string RowOf(uint64_t key) { return absl::StrCat("row-", key); }

TEST(RowStoreTest, PutsDeletesAndReadsInBatches) {
  testing::ScopedTempDir tmp("row_store");
  auto store = OpenIn(tmp.Path("t"));
  ASSERT_NE(store, nullptr);
  RowStore::Batch b;
  for (uint64_t k = 0; k < 1000; ++k) b.Put(k * 7919, RowOf(k * 7919));
  b.Delete(7919 * 5);
  ASSERT_TRUE(store->Write(b).ok());
  std::vector<uint64_t> keys = {0, 7919, 7919 * 5, 3, ~uint64_t{0}, 7919 * 999};
  std::vector<std::string> values;
  std::vector<bool> found;
  ASSERT_TRUE(store->MultiGet(keys, &values, &found).ok());
  EXPECT_EQ(found, (std::vector<bool>{true, true, false, false, false, true}));
  EXPECT_EQ(values[0], RowOf(0));
  EXPECT_EQ(values[1], RowOf(7919));
  EXPECT_EQ(values[5], RowOf(7919 * 999));
}

// The files' readers keep their index and filter blocks: reads of the
// mapped files need no block cache, and the readers' memory is counted.
TEST(RowStoreTest, ReadersKeepIndexAndFilterBlocksWithoutTheCache) {
  testing::ScopedTempDir tmp("row_store");
  auto store = OpenIn(tmp.Path("t"), 64 << 10);
  ASSERT_NE(store, nullptr);
  const int64_t empty = store->ReaderBytes();
  std::vector<uint64_t> keys;
  for (int batch = 0; batch < 40; ++batch) {  // files of ~1 MiB
    RowStore::Batch b;
    for (uint64_t k = 0; k < 4000; ++k) {
      keys.push_back(batch * 4000 + k);
      b.Put(keys.back(), std::string(16, 'r'));
    }
    ASSERT_TRUE(store->Write(b).ok());
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<std::string> values;
    std::vector<bool> found;
    ASSERT_TRUE(store->MultiGet(keys, &values, &found).ok());
    EXPECT_EQ(std::count(found.begin(), found.end(), true), 160000);
    EXPECT_EQ(values[12345], std::string(16, 'r'));
  }
  EXPECT_GT(store->ReaderBytes(), empty);
  EXPECT_LT(store->ReaderBytes(), 1 << 20);
}

TEST(KeyFilterTest, NoFalseNegativesAndFewFalsePositives) {
  for (const auto& [bytes, at_most] :
       {std::pair<int64_t, double>{128 << 10, 0.02},    // 10.5 bits a key
        std::pair<int64_t, double>{64 << 10, 0.15}}) {  // 5.2 bits a key
    KeyFilter f(bytes);
    for (uint64_t k = 0; k < 100000; ++k) f.Add(k * 0x9E3779B97F4A7C15ULL);
    int false_positives = 0;
    for (uint64_t k = 0; k < 100000; ++k) {
      ASSERT_TRUE(f.MayContain(k * 0x9E3779B97F4A7C15ULL)) << k;
      false_positives += f.MayContain(k * 0x9E3779B97F4A7C15ULL + 1);
    }
    const double rate = false_positives / 100000.0;
    EXPECT_LT(rate, at_most) << bytes;
    EXPECT_GT(rate, 0.0) << bytes;  // a filter, not a set
  }
  KeyFilter tiny(1);  // one line, which every key fills
  EXPECT_EQ(tiny.bytes(), KeyFilter::kLineBytes);
  EXPECT_FALSE(tiny.MayContain(5));
}

TEST(RowStoreTest, SnapshotsSeeTheStoreAsItWas) {
  testing::ScopedTempDir tmp("row_store");
  auto store = OpenIn(tmp.Path("t"));
  ASSERT_NE(store, nullptr);
  RowStore::Batch before;
  before.Put(1, "one");
  before.Put(2, "two");
  ASSERT_TRUE(store->Write(before).ok());
  auto snapshot = store->TakeSnapshot();
  RowStore::Batch after;
  after.Put(1, "uno");
  after.Delete(2);
  after.Put(3, "tres");
  ASSERT_TRUE(store->Write(after).ok());
  std::vector<std::string> values;
  std::vector<bool> found;
  ASSERT_TRUE(store->MultiGet({1, 2, 3}, &values, &found, snapshot.get()).ok());
  EXPECT_EQ(found, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(values[0], "one");
  ASSERT_TRUE(store->MultiGet({1, 2, 3}, &values, &found).ok());
  EXPECT_EQ(found, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(values[0], "uno");
}

TEST(RowStoreTest, BucketsHoldEveryKeyOnce) {
  testing::ScopedTempDir tmp("row_store");
  auto store = OpenIn(tmp.Path("t"));
  ASSERT_NE(store, nullptr);
  RowStore::Batch b;
  std::set<uint64_t> want;
  for (uint64_t k = 1; k <= 20000; ++k) {
    const uint64_t key = k * 0x9E3779B97F4A7C15ULL;
    b.Put(key, RowOf(key));
    want.insert(key);
  }
  ASSERT_TRUE(store->Write(b).ok());
  auto snapshot = store->TakeSnapshot();
  std::set<uint64_t> seen;
  int nonempty = 0;
  for (int bucket = 0; bucket < RowStore::kBuckets; ++bucket) {
    int here = 0;
    ASSERT_TRUE(store
                    ->ForEachInBucket(bucket, *snapshot,
                                      [&](uint64_t key, absl::string_view row) {
                                        EXPECT_EQ(RowStore::BucketOf(key),
                                                  bucket);
                                        EXPECT_EQ(row, RowOf(key));
                                        EXPECT_TRUE(seen.insert(key).second);
                                        ++here;
                                      })
                    .ok());
    nonempty += here > 0;
  }
  EXPECT_EQ(seen, want);
  EXPECT_GT(nonempty, RowStore::kBuckets * 9 / 10);
}

TEST(RowStoreTest, OpenEmptiesTheDirectoryAndCloseRemovesIt) {
  testing::ScopedTempDir tmp("row_store");
  const std::string dir = tmp.Path("t");
  {
    auto store = OpenIn(dir);
    ASSERT_NE(store, nullptr);
    RowStore::Batch b;
    b.Put(5, "five");
    ASSERT_TRUE(store->Write(b).ok());
    // A second store on the same directory (another pserver given the same
    // --sparse_store_dir and table) is refused while the first is open.
    RowStore::Options o;
    o.dir = dir;
    absl::StatusOr<std::unique_ptr<RowStore>> twice = RowStore::Open(o);
    ASSERT_FALSE(twice.ok());
    EXPECT_EQ(twice.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(twice.status().message().find(dir), std::string::npos)
        << twice.status();
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
  // Files left by a pserver killed with -9 are not taken for rows.
  std::filesystem::create_directories(dir);
  {
    auto store = OpenIn(dir);
    ASSERT_NE(store, nullptr);
    std::vector<std::string> values;
    std::vector<bool> found;
    ASSERT_TRUE(store->MultiGet({5}, &values, &found).ok());
    EXPECT_FALSE(found[0]);
  }
}

TEST(RowStoreTest, UnwritableDirectoryIsNamed) {
  RowStore::Options o;
  o.dir = "/proc/shardps-no-such/t";
  absl::StatusOr<std::unique_ptr<RowStore>> store = RowStore::Open(o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(store.status().message().find("/proc/shardps-no-such/t"),
            std::string::npos)
      << store.status();
}

TEST(RowStoreTest, FullDiskIsResourceExhaustedAndKeepsWhatWasWritten) {
  testing::ScopedTempDir tmp("row_store");
  testing::SmallDisk disk(tmp.Path("disk"), 3 << 20);
  ASSERT_TRUE(disk.mounted());
  auto store = OpenIn(tmp.Path("disk/t"));
  ASSERT_NE(store, nullptr);
  const std::string row(200, 'r');
  absl::Status st;
  uint64_t written = 0;
  // 64 MiB of rows into 3 MiB: some write must fail, and say why.
  for (uint64_t batch = 0; batch < 320 && st.ok(); ++batch) {
    RowStore::Batch b;
    for (int i = 0; i < 1024; ++i) b.Put(batch * 1024 + i, row);
    st = store->Write(b);
    if (st.ok()) written = (batch + 1) * 1024;
  }
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("full"), std::string::npos) << st;
  ASSERT_GT(written, 0u);
  // Every acknowledged write still reads back.
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < written; k += 97) keys.push_back(k);
  std::vector<std::string> values;
  std::vector<bool> found;
  ASSERT_TRUE(store->MultiGet(keys, &values, &found).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(found[i]) << "key " << keys[i];
    EXPECT_EQ(values[i], row);
  }
}

}  // namespace
}  // namespace shardps
