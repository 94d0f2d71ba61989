// The exported model's files: a sparse table written and read back, float16
// values, the initial value of a key without a row, and damage refused.
#include "common/model_export/exported_model.h"

#include <string>
#include <vector>

#include "common/model_export/initial_row.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

SparseTableView Table(const std::vector<uint64_t>& keys,
                      const std::vector<float>& values, bool fp16 = false) {
  SparseTableView t;
  t.name = "embeddings";
  t.dim = 2;
  t.init.set_type(RowInitializer::UNIFORM);
  t.init.set_scale(0.05f);
  t.init.set_seed(3);
  t.fp16 = fp16;
  t.keys = keys;
  t.values = values;
  return t;
}

TEST(ExportedModelTest, SparseTableRoundTrips) {
  testing::ScopedTempDir tmp("export");
  const std::vector<uint64_t> keys = {2, 7, 1ull << 60};
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  const std::string path = tmp.Path(SparseFileName("embeddings"));
  EXPECT_EQ(SparseFileName("embeddings"), "sparse-embeddings.bin");
  ASSERT_TRUE(WriteSparseTable(Env::Default(), path, Table(keys, values)).ok());
  auto t = ExportedSparseTable::Read(Env::Default(), path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name(), "embeddings");
  EXPECT_EQ(t->dim(), 2);
  EXPECT_EQ(t->size(), 3);
  float row[2];
  EXPECT_TRUE(t->Lookup(7, row));
  EXPECT_EQ(row[0], 3);
  EXPECT_EQ(row[1], 4);
  EXPECT_TRUE(t->Lookup(1ull << 60, row));
  EXPECT_EQ(row[1], 6);
  // A key without a row: its initial value, as a pserver reads it.
  EXPECT_FALSE(t->Lookup(5, row));
  float want[2];
  InitialSparseRow(t->init(), 2, 5, want);
  EXPECT_EQ(row[0], want[0]);
  EXPECT_EQ(row[1], want[1]);
  EXPECT_NE(row[0], 0.0f);
  EXPECT_LE(std::abs(row[0]), 0.05f);
}

TEST(ExportedModelTest, HalfPrecisionValues) {
  testing::ScopedTempDir tmp("export");
  const std::vector<uint64_t> keys = {1, 2};
  const std::vector<float> values = {0.1f, -2.5f, 1000.0f, 1e-3f};
  const std::string path = tmp.Path("h.bin");
  ASSERT_TRUE(
      WriteSparseTable(Env::Default(), path, Table(keys, values, true)).ok());
  std::string bytes;
  ASSERT_TRUE(Env::Default()->ReadFileToString(path, &bytes).ok());
  auto t = ExportedSparseTable::Read(Env::Default(), path);
  ASSERT_TRUE(t.ok()) << t.status();
  float row[2];
  ASSERT_TRUE(t->Lookup(1, row));
  EXPECT_NEAR(row[0], 0.1f, 1e-4);
  EXPECT_EQ(row[1], -2.5f);
  ASSERT_TRUE(t->Lookup(2, row));
  EXPECT_EQ(row[0], 1000.0f);
  EXPECT_NEAR(row[1], 1e-3f, 1e-6);
}

TEST(ExportedModelTest, BadInputIsRefused) {
  testing::ScopedTempDir tmp("export");
  const std::vector<float> values = {1, 2, 3, 4};
  EXPECT_EQ(WriteSparseTable(Env::Default(), tmp.Path("a"),
                             Table({3, 3}, values))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteSparseTable(Env::Default(), tmp.Path("a"),
                             Table({1}, values))
                .code(),
            absl::StatusCode::kInvalidArgument);
  const std::string path = tmp.Path("ok.bin");
  ASSERT_TRUE(
      WriteSparseTable(Env::Default(), path, Table({1, 2}, values)).ok());
  std::string bytes;
  ASSERT_TRUE(Env::Default()->ReadFileToString(path, &bytes).ok());
  for (size_t at : {size_t{0}, size_t{20}, bytes.size() - 6}) {
    std::string bad = bytes;
    bad[at] ^= 0x10;
    ASSERT_TRUE(
        testing::WriteStringToFile(Env::Default(), tmp.Path("bad"), bad).ok());
    auto t = ExportedSparseTable::Read(Env::Default(), tmp.Path("bad"));
    EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << at;
    EXPECT_THAT(t.status().message(), HasSubstr(tmp.Path("bad")));
  }
  ASSERT_TRUE(testing::WriteStringToFile(Env::Default(), tmp.Path("short"),
                                         bytes.substr(0, 30))
                  .ok());
  EXPECT_EQ(ExportedSparseTable::Read(Env::Default(), tmp.Path("short"))
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace shardps
