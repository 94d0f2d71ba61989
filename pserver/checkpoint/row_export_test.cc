// ExportRows: a sparse table's rows a page at a time, each row once, with
// the values a pull reads; and its refusals.
#include "pserver/checkpoint/row_export.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "pserver/testing/checkpoint_job.h"

namespace shardps {
namespace {

using testing::kSparseTable;
using testing::NewStore;
using testing::RunStep;
using testing::StartPull;

struct Read {
  std::vector<uint64_t> keys;
  std::vector<float> values;
  int pages = 0;
};

Read ReadAll(ParameterStore* store, uint32_t max_rows) {
  Read r;
  ExportRowsRequest req;
  req.set_table_id(kSparseTable);
  req.set_max_rows(max_rows);
  do {
    ExportRowsResponse resp;
    const absl::Status s = ExportRowsPage(store, req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    EXPECT_EQ(resp.dim(), 2);
    EXPECT_LE(resp.keys_size(), static_cast<int>(max_rows));
    r.keys.insert(r.keys.end(), resp.keys().begin(), resp.keys().end());
    const size_t at = r.values.size();
    r.values.resize(at + resp.values().size() / sizeof(float));
    std::memcpy(r.values.data() + at, resp.values().data(),
                resp.values().size());
    req.set_cursor(resp.next_cursor());
    ++r.pages;
  } while (req.cursor() != 0 && r.pages < 100);
  return r;
}

TEST(RowExportTest, EveryRowOnceWithThePulledValues) {
  auto store = NewStore();
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(RunStep(store.get(), step).ok());
  }
  // Keys 1, 2, 50 and 51 have rows; 1000..1002 are sightings only.
  for (uint32_t max_rows : {1u, 3u, 100u}) {
    Read r = ReadAll(store.get(), max_rows);
    EXPECT_EQ(r.pages, max_rows == 1 ? 4 : max_rows == 3 ? 2 : 1);
    ASSERT_EQ(r.keys.size(), 4u);
    std::vector<uint64_t> sorted = r.keys;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<uint64_t>{1, 2, 50, 51}));
    auto pull = StartPull(store.get(), 0, kAnyGeneration, {}, r.keys);
    ASSERT_TRUE(pull->done.HasBeenNotified());
    EXPECT_EQ(pull->rows, r.values) << "max_rows " << max_rows;
  }
}

TEST(RowExportTest, RefusesBadPagesTablesAndEarlyVersions) {
  auto store = NewStore();
  ASSERT_TRUE(RunStep(store.get(), 0).ok());
  ExportRowsRequest req;
  ExportRowsResponse resp;
  req.set_table_id(kSparseTable);
  req.set_max_rows(0);
  EXPECT_EQ(ExportRowsPage(store.get(), req, &resp).message(),
            "ExportRows: max_rows must be in [1, 65536], got 0");
  req.set_max_rows(65537);
  EXPECT_EQ(ExportRowsPage(store.get(), req, &resp).code(),
            absl::StatusCode::kInvalidArgument);
  req.set_max_rows(10);
  req.set_table_id(0);  // dense
  EXPECT_EQ(ExportRowsPage(store.get(), req, &resp).code(),
            absl::StatusCode::kInvalidArgument);
  req.set_table_id(9);
  EXPECT_EQ(ExportRowsPage(store.get(), req, &resp).code(),
            absl::StatusCode::kNotFound);
  req.set_table_id(kSparseTable);
  req.set_cursor(uint64_t{1} << 48);
  EXPECT_EQ(ExportRowsPage(store.get(), req, &resp).message(),
            "ExportRows: cursor 281474976710656 names shard 1; 1 held here");
  req.set_cursor(0);
  req.set_min_version(2);
  EXPECT_EQ(ExportRowsPage(store.get(), req, &resp).message(),
            "ExportRows: sparse table e is at version 1, before 2 (its last "
            "step is not applied)");
  // A cursor past the rows (a forged one) ends the table.
  req.set_min_version(1);
  req.set_cursor((uint64_t{5000} << 32) | 7);
  ASSERT_TRUE(ExportRowsPage(store.get(), req, &resp).ok());
  EXPECT_EQ(resp.keys_size(), 0);
  EXPECT_EQ(resp.next_cursor(), 0u);
}

}  // namespace
}  // namespace shardps

namespace shardps {
namespace {

// A table with a disk tier: the rows in memory, then those on disk a
// bucket at a time, each once, whatever the page size.
TEST(RowExportTest, DiskTierRowsFollowTheMemorysInPages) {
  OptimizerConfig oc;
  oc.set_type(OptimizerConfig::ADAGRAD);
  oc.set_learning_rate(0.1f);
  auto opt = std::move(*Optimizer::Create(oc, 1));
  SparseTableOptions so;
  so.set_dim(3);
  so.mutable_init()->set_type(RowInitializer::UNIFORM);
  so.mutable_init()->set_scale(0.5f);
  so.mutable_disk();
  RowStore::Options ro;
  ro.dir = ::testing::TempDir() + "/row_export_disk";
  ro.write_buffer_bytes = 1 << 20;
  ro.block_cache_bytes = 1 << 20;
  SparseTable table(so, opt.get(), 4, nullptr, 200 * 80, nullptr,
                    std::move(*RowStore::Open(ro)));
  std::vector<uint64_t> all;
  const float one[] = {1.0f};
  for (int step = 1; step <= 20; ++step) {
    std::vector<uint64_t> keys;
    for (int i = 0; i < 100; ++i) keys.push_back(step * 1000 + i);
    table.Apply(step, keys, std::vector<float>(keys.size() * 3, 0.5f), one);
    all.insert(all.end(), keys.begin(), keys.end());
  }
  ASSERT_GT(table.counters().spilled_rows, 1000);
  for (size_t page : {7, 1000, 5000}) {
    std::vector<uint64_t> keys;
    std::vector<float> values;
    uint64_t at = 0;
    int pages = 0;
    do {
      const size_t before = keys.size();
      absl::StatusOr<uint64_t> next =
          SparseRowExport::Page(table, at, page, &keys, &values);
      ASSERT_TRUE(next.ok()) << next.status();
      EXPECT_LE(keys.size() - before, page);
      at = *next;
      ++pages;
    } while (at != SparseRowExport::kEnd && pages < 10000);
    std::vector<uint64_t> sorted = keys, want = all;
    std::sort(sorted.begin(), sorted.end());
    std::sort(want.begin(), want.end());
    ASSERT_EQ(sorted, want) << "page " << page;
    std::vector<float> pulled(keys.size() * 3);
    table.Read(keys, pulled.data());
    EXPECT_EQ(values, pulled);
  }
}

}  // namespace
}  // namespace shardps
