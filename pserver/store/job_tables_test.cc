// A job's tables on one pserver: the spec's checks with their messages,
// lookups, and the resolution of pushes against the tables.
#include "pserver/store/job_tables.h"

#include <cmath>
#include <filesystem>
#include <vector>

#include "gtest/gtest.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

using testing::DenseTableSpec;
using testing::MakeJobSpec;
using testing::Sgd;
using testing::SparseTableSpec;

JobSpec Job() {
  return MakeJobSpec(
      SYNC, 2,
      {DenseTableSpec("w", 10, 4, Sgd(1)), SparseTableSpec("e", 2, Sgd(1))});
}

absl::Status CreateError(const JobSpec& job, std::vector<BlockId> blocks) {
  Membership m(2, true);
  return JobTables::Create(job, blocks, &m).status();
}

TEST(JobTablesTest, JobWideChecks) {
  JobSpec job = Job();
  EXPECT_TRUE(ValidateJob(job, 0).ok());
  EXPECT_EQ(ValidateJob(job, 3).code(), absl::StatusCode::kFailedPrecondition);
  job.set_num_trainers(0);
  EXPECT_EQ(ValidateJob(job, 0).message(),
            "InitJob: num_trainers must be in [1, 65536], got 0");
  job.set_num_trainers(kMaxTrainers + 1);
  EXPECT_EQ(ValidateJob(job, 0).code(), absl::StatusCode::kInvalidArgument);
  job = Job();
  job.set_replicas_to_aggregate(3);
  EXPECT_EQ(ValidateJob(job, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(JobTablesTest, StorageTypeChecksNameTheProblem) {
  JobSpec job = Job();
  job.mutable_tables(1)->mutable_sparse()->set_storage_type(
      static_cast<SparseTableOptions::RowStorage>(5));
  EXPECT_EQ(CreateError(job, {}).message(),
            "InitJob: sparse table e has unknown storage_type 5");
  // FP16 holds SGD's and momentum's rows, not squared gradients.
  job = Job();
  job.mutable_tables(1)->mutable_sparse()->set_storage_type(
      SparseTableOptions::FP16);
  EXPECT_TRUE(CreateError(job, {}).ok());
  job.mutable_tables(1)->mutable_optimizer()->set_type(
      OptimizerConfig::ROWWISE_ADAGRAD);
  EXPECT_EQ(CreateError(job, {}).message(),
            "InitJob: sparse table e: storage_type FP16 cannot hold "
            "ROWWISE_ADAGRAD's state (squared gradients under 6e-8 become "
            "0); use BF16");
  job.mutable_tables(1)->mutable_sparse()->set_storage_type(
      SparseTableOptions::BF16);
  EXPECT_TRUE(CreateError(job, {}).ok());
}

TEST(JobTablesTest, DiskTiersNeedADirectoryAndGetOneEach) {
  JobSpec job = Job();
  job.mutable_tables(1)->mutable_sparse()->mutable_disk()->set_cache_mb(8);
  Membership m(2, true);
  absl::StatusOr<std::unique_ptr<JobTables>> jt =
      JobTables::Create(job, {}, &m);
  ASSERT_FALSE(jt.ok());
  EXPECT_EQ(jt.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(jt.status().message(),
            "InitJob: sparse table e has a disk tier (disk { ... }), and this "
            "pserver has no --sparse_store_dir to keep its rows in");
  const std::string dir = ::testing::TempDir() + "/job_tables_disk";
  // Two shards of a replicated job, each with a database of its own.
  jt = JobTables::Create(job, {}, &m, nullptr, {0, 2}, dir);
  ASSERT_TRUE(jt.ok()) << jt.status();
  ASSERT_EQ((*jt)->sparse().size(), 2u);
  for (SparseShard* shard : (*jt)->sparse()) {
    EXPECT_TRUE(shard->rows().on_disk());
    EXPECT_GT(shard->rows().counters().max_rows, 0);
  }
  jt->reset();
  // The databases go with the tables.
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  job.mutable_tables(1)->mutable_sparse()->mutable_eviction()->set_policy(
      EvictionOptions::L2_NORM);
  EXPECT_EQ(CreateError(job, {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(JobTablesTest, TableAndBlockChecksNameTheProblem) {
  JobSpec job = Job();
  job.mutable_tables(1)->set_name("w");
  EXPECT_EQ(CreateError(job, {}).message(),
            "InitJob: table 1 has an empty or repeated name 'w'");
  job = Job();
  job.mutable_tables(1)->mutable_sparse()->set_dim(0);
  EXPECT_EQ(CreateError(job, {}).message(),
            "InitJob: sparse table e needs a row dim in [1, 65536], got 0");
  job = Job();
  job.mutable_tables(1)->mutable_sparse()->set_gradient_mean(
      static_cast<SparseTableOptions::GradientMean>(7));
  EXPECT_EQ(CreateError(job, {}).message(),
            "InitJob: sparse table e has unknown gradient_mean 7");
  // The audit's initializers: NaN and absurd scales, a negative UNIFORM
  // range, an unknown type.
  for (float scale : {std::nanf(""), 3e38f, -1.0f}) {
    job = Job();
    RowInitializer* init =
        job.mutable_tables(1)->mutable_sparse()->mutable_init();
    init->set_type(RowInitializer::UNIFORM);
    init->set_scale(scale);
    EXPECT_NE(CreateError(job, {}).message().find(
                  "InitJob: sparse table e has initializer scale"),
              std::string::npos)
        << scale;
  }
  job = Job();
  job.mutable_tables(1)->mutable_sparse()->mutable_init()->set_scale(-0.5f);
  EXPECT_TRUE(CreateError(job, {}).ok());  // a CONSTANT may be negative
  job.mutable_tables(1)->mutable_sparse()->mutable_init()->set_type(
      static_cast<RowInitializer::Type>(9));
  EXPECT_EQ(CreateError(job, {}).message(),
            "InitJob: sparse table e has unknown initializer type 9");
  job = Job();
  job.mutable_tables(0)->mutable_optimizer()->set_learning_rate(3e38f);
  EXPECT_EQ(CreateError(job, {}).code(), absl::StatusCode::kInvalidArgument);
  job = Job();
  job.mutable_tables(0)->set_block_size(0);
  EXPECT_NE(CreateError(job, {}).message().find("block_size must be in"),
            std::string::npos);
  EXPECT_EQ(CreateError(Job(), {{0, 3}}).message(),
            "InitJob: table w has 3 blocks; there is no block 3");
  EXPECT_EQ(CreateError(Job(), {{1, 0}}).message(),
            "InitJob: table e is sparse and has no blocks");
  EXPECT_EQ(CreateError(Job(), {{0, 1}, {0, 1}}).message(),
            "InitJob: table w block 1 listed twice");
  EXPECT_EQ(CreateError(Job(), {{5, 0}}).message(),
            "InitJob: block of unknown table id 5");
}

TEST(JobTablesTest, EvictionAndRowwiseOptionsAreChecked) {
  JobSpec job = Job();
  job.mutable_tables(0)->mutable_optimizer()->set_type(
      OptimizerConfig::ROWWISE_ADAGRAD);
  EXPECT_EQ(CreateError(job, {}).message(),
            "InitJob: dense table w has optimizer ROWWISE_ADAGRAD, which keeps "
            "state per sparse row: use ADAGRAD or ADAM");
  job = Job();
  job.mutable_tables(1)->mutable_optimizer()->set_type(
      OptimizerConfig::ROWWISE_ADAM);
  EXPECT_TRUE(CreateError(job, {}).ok());
  job = Job();
  EvictionOptions* e =
      job.mutable_tables(1)->mutable_sparse()->mutable_eviction();
  e->set_ttl_seconds(-1);
  EXPECT_EQ(CreateError(job, {}).message(),
            "InitJob: sparse table e: eviction ttl_seconds -1 is not in [0, "
            "3.2e8] (docs/sparse_memory.md)");
  e->set_ttl_seconds(0);
  e->set_policy(static_cast<EvictionOptions::Policy>(9));
  EXPECT_EQ(CreateError(job, {}).message(),
            "InitJob: sparse table e: unknown eviction policy 9 "
            "(docs/sparse_memory.md)");
  e->set_policy(EvictionOptions::LFU);
  e->set_min_l2_norm(std::nanf(""));
  EXPECT_NE(CreateError(job, {}).message().find("min_l2_norm"),
            std::string::npos);
  job = Job();
  job.mutable_tables(1)->mutable_sparse()->set_admission_max_keys(-5);
  EXPECT_NE(CreateError(job, {}).message().find("admission_max_keys -5"),
            std::string::npos);
}

TEST(JobTablesTest, EachSparseTableGetsItsShareOfTheTightestLimit) {
  MemoryBudget pserver(800 << 20);
  MemoryBudget job_budget(80 << 20, &pserver);
  JobSpec job = Job();
  *job.add_tables() = SparseTableSpec("f", 4, Sgd(1));
  // (80 MiB - 10 MiB of headroom - 1 MiB of dense state) / 2 tables.
  EXPECT_EQ(JobTables::SparseShare(job, &job_budget, 1 << 20, 0),
            (69 << 20) / 2);
  // Two shards of each held here: four units.
  EXPECT_EQ(JobTables::SparseShare(job, &job_budget, 1 << 20, 2),
            (69 << 20) / 4);
  MemoryBudget unlimited(0);
  EXPECT_EQ(JobTables::SparseShare(job, &unlimited, 0, 0), 0);
}

TEST(JobTablesTest, UnitsInLockOrderAndLookups) {
  Membership m(2, true);
  auto t = JobTables::Create(Job(), {{0, 2}, {0, 0}}, &m);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ((*t)->units().size(), 3u);
  EXPECT_EQ((*t)->units()[0]->name(), "table w block 0");
  EXPECT_EQ((*t)->units()[1]->name(), "table w block 2");
  EXPECT_EQ((*t)->units()[2]->name(), "sparse table e");
  EXPECT_EQ((*(*t)->FindBlock(0, 2))->size(), 2);  // the last block of 10
  EXPECT_EQ((*t)->FindBlock(0, 1).status().message(),
            "table w block 1 is not held by this pserver");
  EXPECT_EQ((*t)->FindSparse(0).status().message(),
            "table w is dense; it has blocks, not keyed rows");
  EXPECT_EQ((*t)->FindSparse(7).status().code(), absl::StatusCode::kNotFound);
}

TEST(JobTablesTest, PushesAreResolvedOrRefusedWhole) {
  Membership m(2, true);
  auto t = JobTables::Create(Job(), {{0, 0}, {0, 2}}, &m);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<float> g4 = {1, 1, 1, 1}, g2 = {1, std::nanf("")};
  std::vector<PushPart> parts;
  std::vector<BlockData> dense = {{0, 0, g4}, {0, 2, g2}};
  absl::Status s = (*t)->ResolveDensePush(dense, 1, 5, &parts);
  EXPECT_EQ(s.message(),
            "table w block 2: gradient value 1 is NaN (trainer 1, step 5); "
            "nothing was applied");
  parts.clear();
  dense = {{0, 0, g4}};
  ASSERT_TRUE((*t)->ResolveDensePush(dense, 1, 5, &parts).ok());
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].unit->name(), "table w block 0");

  std::vector<uint64_t> keys = {3, 3};
  std::vector<float> rows = {1, 1, 2, 2};
  std::vector<SparseGrads> sparse = {{1, keys, rows, 1}};
  parts.clear();
  s = (*t)->ResolveSparsePush(sparse, 0, 0, true, &parts);
  EXPECT_NE(s.message().find("key 3 appears twice"), std::string::npos) << s;
  keys = {3, 4};
  sparse = {{1, keys, rows, 0}};
  s = (*t)->ResolveSparsePush(sparse, 0, 0, /*sync=*/true, &parts);
  EXPECT_NE(s.message().find("num_chunks must be in [1, 65536]"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace shardps
