#include "pserver/store/disk/row_store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/small_disk.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

std::unique_ptr<RowStore> OpenIn(const std::string& dir,
                                 int64_t block_cache_bytes = 1 << 20,
                                 int64_t write_buffer_bytes = 1 << 20) {
  RowStore::Options o;
  o.dir = dir;
  o.write_buffer_bytes = write_buffer_bytes;
  o.block_cache_bytes = block_cache_bytes;
  o.filter_bytes = 16 << 10;  // answers for keys never written
  absl::StatusOr<std::unique_ptr<RowStore>> store = RowStore::Open(o);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

std::string RowOf(uint64_t key) { return absl::StrCat("row-", key); }

// Waits (10 s at most) until the store has ingested `files` files.
bool IngestedAtLeast(const RowStore& store, int64_t files) {
  for (int i = 0; i < 1000 && store.FilesIngested() < files; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  return store.FilesIngested() >= files;
}

// Every row of `snapshot`, by a scan of its buckets.
std::map<uint64_t, std::string> ScanAll(const RowStore& store,
                                        const RowStore::Snapshot& snapshot) {
  std::map<uint64_t, std::string> rows;
  for (int bucket = 0; bucket < RowStore::kBuckets; ++bucket) {
    EXPECT_TRUE(
        store
            .ForEachInBucket(bucket, snapshot,
                             [&](uint64_t key, absl::string_view row) {
                               EXPECT_TRUE(rows.emplace(key, row).second)
                                   << "key " << key << " twice";
                             })
            .ok());
  }
  return rows;
}

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

// Rows are read at once from the buffer they were written to, and the
// same once the store has written that buffer as a file; a deletion or a
// newer row in a later buffer hides the file's.
TEST(RowStoreTest, RowsReadTheSameFromBuffersAndFromIngestedFiles) {
  testing::ScopedTempDir tmp("row_store");
  auto store = OpenIn(tmp.Path("t"), 1 << 20, 64 << 10);
  ASSERT_NE(store, nullptr);
  std::vector<uint64_t> keys;
  for (int batch = 0; batch < 30; ++batch) {
    RowStore::Batch b;
    for (int i = 0; i < 500; ++i) {
      keys.push_back((batch * 500 + i) * 0x9E3779B97F4A7C15ULL);
      b.Put(keys.back(), RowOf(keys.back()));
    }
    ASSERT_TRUE(store->Write(b).ok());
    std::vector<std::string> values;
    std::vector<bool> found;
    ASSERT_TRUE(store->MultiGet(keys, &values, &found).ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_TRUE(found[i]) << "key " << keys[i] << " after batch " << batch;
      ASSERT_EQ(values[i], RowOf(keys[i]));
    }
  }
  EXPECT_TRUE(IngestedAtLeast(*store, 10)) << store->FilesIngested();
  RowStore::Batch change;
  for (size_t i = 0; i < keys.size(); i += 3) change.Delete(keys[i]);
  for (size_t i = 1; i < keys.size(); i += 3) change.Put(keys[i], "newer");
  ASSERT_TRUE(store->Write(change).ok());
  for (int round = 0; round < 2; ++round) {
    std::vector<std::string> values;
    std::vector<bool> found;
    ASSERT_TRUE(store->MultiGet(keys, &values, &found).ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(found[i], i % 3 != 0) << "key " << keys[i];
      if (i % 3 == 1) {
        EXPECT_EQ(values[i], "newer");
      } else if (i % 3 == 2) {
        EXPECT_EQ(values[i], RowOf(keys[i]));
      }
    }
    EXPECT_EQ(ScanAll(*store, *store->TakeSnapshot()).size(),
              keys.size() - (keys.size() + 2) / 3);
    // Again once the change is in a file too.
    ASSERT_TRUE(store->Flush().ok());
  }
}

// A snapshot sees the rows of its instant, those still in buffers then
// included, while later writes go on and the buffers become files.
TEST(RowStoreTest, ASnapshotKeepsTheBuffersOfItsInstant) {
  testing::ScopedTempDir tmp("row_store");
  auto store = OpenIn(tmp.Path("t"), 1 << 20, 64 << 10);
  ASSERT_NE(store, nullptr);
  RowStore::Batch a;
  for (uint64_t k = 0; k < 4000; ++k) a.Put(k, "a");
  ASSERT_TRUE(store->Write(a).ok());
  RowStore::Batch b;
  for (uint64_t k = 0; k < 100; ++k) b.Put(k, "b");
  for (uint64_t k = 100; k < 200; ++k) b.Delete(k);
  ASSERT_TRUE(store->Write(b).ok());
  const int64_t files = store->FilesIngested();
  auto snapshot = store->TakeSnapshot();
  RowStore::Batch c;
  for (uint64_t k = 0; k < 50; ++k) c.Put(k, "c");
  for (uint64_t k = 200; k < 300; ++k) c.Delete(k);
  for (uint64_t k = 5000; k < 9000; ++k) c.Put(k, "c");
  ASSERT_TRUE(store->Write(c).ok());
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_GE(store->FilesIngested(), files + 2);  // b's buffer, then c's

  std::map<uint64_t, std::string> want;
  for (uint64_t k = 0; k < 4000; ++k) {
    if (k >= 100 && k < 200) continue;
    want[k] = k < 100 ? "b" : "a";
  }
  EXPECT_EQ(ScanAll(*store, *snapshot), want);
  std::vector<std::string> values;
  std::vector<bool> found;
  ASSERT_TRUE(
      store->MultiGet({0, 60, 150, 250, 6000}, &values, &found, snapshot.get())
          .ok());
  EXPECT_EQ(found, (std::vector<bool>{true, true, false, true, false}));
  EXPECT_EQ(values[0], "b");
  EXPECT_EQ(values[3], "a");
  ASSERT_TRUE(store->MultiGet({0, 60, 150, 250, 6000}, &values, &found).ok());
  EXPECT_EQ(found, (std::vector<bool>{true, true, false, false, true}));
  EXPECT_EQ(values[0], "c");
  EXPECT_EQ(values[1], "b");
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

// Writes batches of `batch_rows` copies of `row` (keys 0, 1, ...) until
// one is refused (*st) or `batches` are written; the rows acknowledged.
uint64_t WriteUntilRefused(RowStore& store, const std::string& row,
                           int batch_rows, int batches, absl::Status* st) {
  uint64_t written = 0;
  for (int batch = 0; batch < batches && st->ok(); ++batch) {
    RowStore::Batch b;
    for (int i = 0; i < batch_rows; ++i) b.Put(written + i, row);
    *st = store.Write(b);
    if (st->ok()) written += batch_rows;
  }
  return written;
}

// Keys 0, step, 2 step, ... below `end` read back as `row`.
void ExpectRowsRead(const RowStore& store, uint64_t end, uint64_t step,
                    const std::string& row) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < end; k += step) keys.push_back(k);
  std::vector<std::string> values;
  std::vector<bool> found;
  ASSERT_TRUE(store.MultiGet(keys, &values, &found).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(found[i]) << "key " << keys[i];
    EXPECT_EQ(values[i], row);
  }
}

TEST(RowStoreTest, FullDiskIsResourceExhaustedAndKeepsWhatWasWritten) {
  testing::ScopedTempDir tmp("row_store");
  testing::SmallDisk disk(tmp.Path("disk"), 3 << 20);
  ASSERT_TRUE(disk.mounted());
  auto store = OpenIn(tmp.Path("disk/t"));
  ASSERT_NE(store, nullptr);
  const std::string row(200, 'r');
  absl::Status st;
  // 64 MiB of rows into 3 MiB: some write must fail, and say why.
  const uint64_t written = WriteUntilRefused(*store, row, 1024, 320, &st);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("full"), std::string::npos) << st;
  ASSERT_GT(written, 0u);
  // Every acknowledged write still reads back.
  ExpectRowsRead(*store, written, 97, row);
}

// Writes the disk cannot take wait in memory, bounded, and are refused
// with the disk's error; once there is room again the store writes them
// (it tries every second) and takes writes again, nothing lost.
TEST(RowStoreTest, WritesResumeWhenTheDiskHasRoomAgain) {
  testing::ScopedTempDir tmp("row_store");
  testing::SmallDisk disk(tmp.Path("disk"), 4 << 20);
  ASSERT_TRUE(disk.mounted());
  const std::string filler = tmp.Path("disk/filler");
  {
    std::ofstream out(filler);
    out << std::string(3 << 20, 'f');
  }
  auto store = OpenIn(tmp.Path("disk/t"), 1 << 20, 64 << 10);
  ASSERT_NE(store, nullptr);
  const std::string row(200, 'r');
  absl::Status st;
  const uint64_t written = WriteUntilRefused(*store, row, 100, 100, &st);
  ASSERT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  RowStore::Batch next;
  for (int i = 0; i < 100; ++i) next.Put(written + i, row);
  // Checkpoints' snapshots seal buffers early; the buffers stay within
  // two buffers and a batch however many there are.
  std::vector<std::shared_ptr<const RowStore::Snapshot>> snapshots;
  for (int i = 0; i < 8; ++i) {
    snapshots.push_back(store->TakeSnapshot());
    store->Write(next).IgnoreError();
    EXPECT_LE(store->BufferedBytes(), 2 * (64 << 10));
  }
  snapshots.clear();
  std::filesystem::remove(filler);
  for (int i = 0; i < 50 && !st.ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    st = store->Write(next);
  }
  ASSERT_TRUE(st.ok()) << st;
  ExpectRowsRead(*store, written + 100, 1, row);
}

}  // namespace
}  // namespace shardps
