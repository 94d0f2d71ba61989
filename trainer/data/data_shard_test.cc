#include "trainer/data/data_shard.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

// Record r has features {r, r + 0.5} and label r % 7, so a batch identifies
// its records.
IdxData MakeData(int64_t n) {
  IdxData data;
  data.num_records = n;
  data.dim = 2;
  data.num_classes = 7;
  for (int64_t r = 0; r < n; ++r) {
    data.features.push_back(static_cast<float>(r));
    data.features.push_back(static_cast<float>(r) + 0.5f);
    data.labels.push_back(static_cast<int32_t>(r % 7));
  }
  return data;
}

std::unique_ptr<ShardedDataset> MustCreate(int64_t n,
                                           ShardedDataset::ShardMode mode,
                                           int trainer, int trainers) {
  auto ds = ShardedDataset::Create(MakeData(n), mode, trainer, trainers);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return ds.ok() ? std::move(ds).value() : nullptr;
}

// The records of batch i, checking features and labels agree.
std::vector<int64_t> BatchRecords(const ShardedDataset& ds, int64_t i,
                                  int batch) {
  std::vector<float> x(batch * 2);
  std::vector<int32_t> labels(batch);
  ds.GetBatch(i, batch, x.data(), labels.data());
  std::vector<int64_t> records;
  for (int j = 0; j < batch; ++j) {
    const int64_t r = static_cast<int64_t>(x[2 * j]);
    EXPECT_EQ(x[2 * j + 1], r + 0.5f);
    EXPECT_EQ(labels[j], r % 7);
    records.push_back(r);
  }
  return records;
}

TEST(DataShardTest, UnionOfTrainerBatchesIsTheSingleTrainerBatch) {
  const int64_t n = 103;
  for (int trainers : {1, 2, 3, 4}) {
    for (int b : {1, 5, 8}) {
      auto whole = MustCreate(n, ShardedDataset::ShardMode::kByRecord, 0, 1);
      whole->StartPass(0, /*shuffle=*/false, 1);
      std::vector<std::unique_ptr<ShardedDataset>> shards;
      std::vector<int64_t> counts;
      for (int t = 0; t < trainers; ++t) {
        shards.push_back(
            MustCreate(n, ShardedDataset::ShardMode::kByRecord, t, trainers));
        shards.back()->StartPass(0, false, 1);
        counts.push_back(shards.back()->num_local_records());
      }
      EXPECT_EQ(counts, RecordsPerTrainer(n, trainers));
      const int64_t steps = ShardedDataset::StepsPerPass(counts, b);
      EXPECT_EQ(steps, (n / trainers) / b);
      EXPECT_LE(steps, ShardedDataset::StepsPerPass({n}, trainers * b));
      for (int64_t i = 0; i < steps; ++i) {
        std::multiset<int64_t> got;
        for (const auto& shard : shards) {
          for (int64_t r : BatchRecords(*shard, i, b)) got.insert(r);
        }
        const std::vector<int64_t> want_v =
            BatchRecords(*whole, i, trainers * b);
        const std::multiset<int64_t> want(want_v.begin(), want_v.end());
        EXPECT_EQ(got, want)
            << "trainers=" << trainers << " b=" << b << " i=" << i;
      }
    }
  }
}

TEST(DataShardTest, RecordShardingAssignsModN) {
  auto ds = MustCreate(10, ShardedDataset::ShardMode::kByRecord, 1, 3);
  ds->StartPass(0, false, 0);
  EXPECT_EQ(ds->num_local_records(), 3);
  EXPECT_EQ(BatchRecords(*ds, 0, 3), (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(ds->dim(), 2);
  EXPECT_EQ(ds->num_classes(), 7);
  // File sharding keeps every record.
  auto file = MustCreate(10, ShardedDataset::ShardMode::kByFile, 1, 3);
  EXPECT_EQ(file->num_local_records(), 10);
  EXPECT_EQ(BatchRecords(*file, 1, 4), (std::vector<int64_t>{4, 5, 6, 7}));
}

TEST(DataShardTest, ShuffleIsDeterministicPermutation) {
  auto a = MustCreate(1000, ShardedDataset::ShardMode::kByRecord, 1, 2);
  auto b = MustCreate(1000, ShardedDataset::ShardMode::kByRecord, 1, 2);
  a->StartPass(3, true, 42);
  b->StartPass(3, true, 42);
  const std::vector<int64_t> order = BatchRecords(*a, 0, 500);
  EXPECT_EQ(order, BatchRecords(*b, 0, 500));
  // A permutation of the local records, not the natural order.
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 500; ++i) EXPECT_EQ(sorted[i], 2 * i + 1);
  EXPECT_NE(order, sorted);
  // Another pass or seed gives another order; the same pass again the same.
  b->StartPass(4, true, 42);
  EXPECT_NE(order, BatchRecords(*b, 0, 500));
  b->StartPass(3, true, 43);
  EXPECT_NE(order, BatchRecords(*b, 0, 500));
  b->StartPass(3, true, 42);
  EXPECT_EQ(order, BatchRecords(*b, 0, 500));
  b->StartPass(3, false, 42);
  EXPECT_EQ(sorted, BatchRecords(*b, 0, 500));
}

TEST(DataShardTest, ShuffleGoldenOrder) {
  // Pins the permutation: every machine and build must produce it.
  auto ds = MustCreate(8, ShardedDataset::ShardMode::kByRecord, 0, 1);
  ds->StartPass(0, true, 1);
  const std::vector<int64_t> got = BatchRecords(*ds, 0, 8);
  EXPECT_EQ(got, (std::vector<int64_t>{1, 4, 6, 0, 5, 2, 7, 3}));
}

TEST(DataShardTest, CreateErrors) {
  EXPECT_EQ(ShardedDataset::Create(MakeData(4),
                                   ShardedDataset::ShardMode::kByRecord, 2, 2)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardedDataset::Create(MakeData(4),
                                   ShardedDataset::ShardMode::kByRecord, 0, 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  IdxData bad = MakeData(4);
  bad.labels.pop_back();
  EXPECT_EQ(ShardedDataset::Create(std::move(bad),
                                   ShardedDataset::ShardMode::kByFile, 0, 1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DataShardTest, StepsPerPassAndRecordsPerTrainer) {
  EXPECT_EQ(ShardedDataset::StepsPerPass({100, 99, 130}, 10), 9);
  EXPECT_EQ(ShardedDataset::StepsPerPass({5}, 10), 0);
  EXPECT_EQ(ShardedDataset::StepsPerPass({}, 10), 0);
  EXPECT_EQ(RecordsPerTrainer(10, 3), (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(RecordsPerTrainer(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(RecordsPerTrainer(60000, 1), (std::vector<int64_t>{60000}));
}

TEST(DataShardTest, SplitFileList) {
  EXPECT_EQ(SplitFileList("a,b, c ,,"),
            (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(SplitFileList("/data/train-00000.gz"),
            (std::vector<std::string>{"/data/train-00000.gz"}));
  EXPECT_TRUE(SplitFileList("").empty());
}

TEST(DataShardTest, ParseShardSuffix) {
  EXPECT_EQ(*ParseShardSuffix("train-00003"), 3);
  EXPECT_EQ(*ParseShardSuffix("train-00003.gz"), 3);
  EXPECT_EQ(*ParseShardSuffix("/data/my-set/train-images-12.idx3.gz"), 12);
  EXPECT_EQ(*ParseShardSuffix("x-0"), 0);
  for (const char* bad :
       {"train", "train-", "train-abc", "train-00003x", "/data/set-3/train",
        "train-images-idx3-ubyte.gz", "train-1234567890"}) {
    absl::StatusOr<int> s = ParseShardSuffix(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(DataShardTest, FilesForTrainer) {
  const std::vector<std::string> files = {"d/t-00000.gz", "d/t-00001.gz",
                                          "d/t-00002.gz", "d/t-00003.gz",
                                          "d/t-00004.gz"};
  EXPECT_EQ(*FilesForTrainer(files, 0, 2),
            (std::vector<std::string>{"d/t-00000.gz", "d/t-00002.gz",
                                      "d/t-00004.gz"}));
  EXPECT_EQ(*FilesForTrainer(files, 1, 2),
            (std::vector<std::string>{"d/t-00001.gz", "d/t-00003.gz"}));
  EXPECT_EQ(*FilesForTrainer(files, 2, 3),
            (std::vector<std::string>{"d/t-00002.gz"}));
  EXPECT_TRUE(FilesForTrainer(files, 6, 7).ok());
  EXPECT_TRUE(FilesForTrainer(files, 6, 7)->empty());
  EXPECT_EQ(FilesForTrainer({"a-1", "b-1"}, 0, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FilesForTrainer({"a-1", "b"}, 0, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FilesForTrainer(files, 2, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardps
