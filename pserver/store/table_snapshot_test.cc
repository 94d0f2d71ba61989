// The checkpoint blobs of a job's tables: the dense DSN1 format written and
// parsed back, its damage found, and a snapshot checked against the tables
// before anything is loaded. The store's Snapshot and Restore are tested in
// pserver/checkpoint/store_snapshots_test.cc.
#include "pserver/store/table_snapshot.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

TEST(DenseBlobTest, RoundTripWithSlots) {
  DenseBlobWriter w(2);
  w.Add(4, 17, std::vector<float>{1, 2}, {{0.5f, 0.25f}});
  w.Add(9, 17, std::vector<float>{3}, {{-1}});
  const std::string blob = std::move(w).Finish();
  EXPECT_EQ(blob.size(), 8u + 2 * (4 + 8 + 8 + 4) + 4 * (2 + 2 + 1 + 1));
  auto parsed = ParseDenseBlob("table-0.bin", blob, {{4, 2}, {9, 1}}, 1);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].index, 4u);
  EXPECT_EQ((*parsed)[0].version, 17);
  EXPECT_EQ((*parsed)[0].value, (std::vector<float>{1, 2}));
  EXPECT_EQ((*parsed)[1].slots[0], (std::vector<float>{-1}));
}

TEST(DenseBlobTest, DamageIsDataLossNamingTheFile) {
  DenseBlobWriter w(1);
  w.Add(0, 1, std::vector<float>{1, 2}, {});
  const std::string blob = std::move(w).Finish();
  auto parse = [&](const std::string& b, int64_t size = 2, int slots = 0) {
    return ParseDenseBlob("table-3.bin", b, {{0, size}}, slots).status();
  };
  for (size_t len = 0; len < blob.size(); ++len) {
    EXPECT_EQ(parse(blob.substr(0, len)).code(), absl::StatusCode::kDataLoss)
        << len;
  }
  EXPECT_EQ(parse(blob + "x").message(),
            "checkpoint: table-3.bin: trailing bytes");
  EXPECT_EQ(parse(blob, 3).message(),
            "checkpoint: table-3.bin: block 0 does not match the job (size or "
            "optimizer state)");
  EXPECT_EQ(parse(blob, 2, 1).code(), absl::StatusCode::kDataLoss);
  std::string bad = blob;
  bad[0] ^= 1;
  EXPECT_EQ(parse(bad).message(), "checkpoint: table-3.bin: bad header");
}

TEST(SnapshotTest, EncodedTablesParseBackAgainstTheTables) {
  Membership m(1, true);
  const JobSpec job = testing::MakeJobSpec(
      SYNC, 1,
      {testing::DenseTableSpec("w", 6, 4, testing::Momentum(0.1f, 0.9f)),
       testing::SparseTableSpec("e", 2, testing::Sgd(1))});
  auto tables = JobTables::Create(job, {{0, 0}, {0, 1}}, &m);
  ASSERT_TRUE(tables.ok()) << tables.status();
  for (DenseTableBlock* b : (*tables)->blocks()) {
    absl::MutexLock l(&b->mu);
    b->SetInitialValue(std::vector<float>(b->size(), 1.5f));
  }
  EXPECT_TRUE(CheckStepBoundary(**tables, 0).ok());
  EXPECT_EQ(CheckStepBoundary(**tables, 1).message(),
            "checkpoint of step 1: table w block 0 is at version 0 (not a "
            "step boundary)");
  StoreSnapshot snap;
  for (uint32_t t = 0; t < 2; ++t) {
    absl::StatusOr<std::string> blob = EncodeTable(**tables, t);
    EXPECT_TRUE(blob.ok()) << blob.status();
    snap.files.emplace_back(TableFileName(t), blob.value_or(""));
  }
  auto parsed = ParseSnapshot(snap, **tables);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->dense_blocks, 2u);
  EXPECT_EQ(parsed->dense[0][1].value, (std::vector<float>{1.5f, 1.5f}));
  EXPECT_EQ(parsed->sparse[1], &snap.files[1].second);

  StoreSnapshot twice = snap;
  twice.files.push_back(snap.files[0]);
  EXPECT_EQ(ParseSnapshot(twice, **tables).status().message(),
            "checkpoint: table-0.bin appears twice");
  StoreSnapshot missing = snap;
  missing.files.pop_back();
  EXPECT_EQ(ParseSnapshot(missing, **tables).status().message(),
            "checkpoint: no file for table e");
  StoreSnapshot stranger = snap;
  stranger.files.emplace_back("table-7.bin", "");
  EXPECT_EQ(ParseSnapshot(stranger, **tables).status().message(),
            "checkpoint: unexpected file table-7.bin");
}

}  // namespace
}  // namespace shardps
