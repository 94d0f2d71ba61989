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
