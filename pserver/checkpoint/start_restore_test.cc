// --restore_from: a pserver takes its share of a job checkpoint of another
// shape at the chief's InitJob, and refuses what would start it wrongly.
#include "pserver/checkpoint/start_restore.h"

#include <memory>
#include <string>
#include <vector>

#include "common/placement/shard_map.h"
#include "common/storage/checkpoint.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pserver/checkpoint/store_snapshots.h"
#include "pserver/testing/checkpoint_job.h"

namespace shardps {
namespace {

using testing::CheckpointJob;
using ::testing::HasSubstr;
using testing::NewStore;
using testing::Options;
using testing::Place;
using testing::RunStep;

InitJobRequest Init(int index, int num_servers) {
  InitJobRequest req;
  *req.mutable_job() = CheckpointJob();
  req.set_server_index(index);
  req.set_num_servers(num_servers);
  return req;
}

class StartRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The job on one pserver, 3 steps in, generation 4.
    auto store = NewStore();
    ASSERT_TRUE(store->state()->AdoptPlacement(Place(0, 1)).ok());
    for (int64_t step = 0; step < 3; ++step) {
      ASSERT_TRUE(RunStep(store.get(), step).ok());
    }
    auto snap = StoreSnapshots(store.get()).Snapshot(3);
    ASSERT_TRUE(snap.ok()) << snap.status();
    snap->info.set_generation(4);
    std::vector<CheckpointFile> files;
    for (const auto& [name, data] : snap->files) files.push_back({name, data});
    ASSERT_TRUE(CheckpointWriter(Env::Default(), tmp_.Path("old/ps-0/default"))
                    .Write(3, snap->info.SerializeAsString(), files)
                    .ok());
  }

  testing::ScopedTempDir tmp_{"start_restore"};
  ParameterStore store_{Options()};
  Checkpointer checkpointer_{Env::Default(), tmp_.Path("new/default")};
  StartRestore restore_{&store_, &checkpointer_};
};

TEST_F(StartRestoreTest, NotConfiguredDoesNothing) {
  EXPECT_TRUE(restore_.BeforeInitJob(Init(0, 2)).ok());
  EXPECT_FALSE(store_.ready());
}

TEST_F(StartRestoreTest, TakesItsShareAsANewGeneration) {
  restore_.Configure(Env::Default(), tmp_.Path("old"), "default");
  ASSERT_TRUE(restore_.BeforeInitJob(Init(1, 2)).ok());
  EXPECT_TRUE(store_.ready());
  EXPECT_EQ(store_.base_step(), 3);
  EXPECT_EQ(store_.generation(), 5u);
  ShardPlacement p = store_.state()->current_placement();
  EXPECT_EQ(p.server_index(), 1);
  EXPECT_EQ(p.num_servers(), 2);
  // Its own copy in --checkpoint_dir, and the generation recorded.
  ASSERT_TRUE(checkpointer_.Flush().ok());
  EXPECT_EQ(*checkpointer_.Steps(), (std::vector<int64_t>{3}));
  EXPECT_EQ(*checkpointer_.ReadGeneration(), 5u);
  auto saved = checkpointer_.Load(3);
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->info.placement().server_index(), 1);
  // The chief's InitJob finds the job; one placing it elsewhere is refused.
  EXPECT_TRUE(*store_.InitJob(CheckpointJob(), {}));
  absl::Status other = store_.state()->AdoptPlacement(Place(0, 2));
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr("holds shard 1 of 2"));
  // Once ready, later InitJobs restore nothing.
  EXPECT_TRUE(restore_.BeforeInitJob(Init(0, 3)).ok());
  EXPECT_EQ(store_.state()->current_placement().num_servers(), 2);
}

TEST_F(StartRestoreTest, RefusesWhatWouldStartTheJobWrongly) {
  restore_.Configure(Env::Default(), tmp_.Path("old"), "default");
  absl::Status s = restore_.BeforeInitJob(Init(0, 0));  // an older trainer
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("does not say which pserver"));

  InitJobRequest other = Init(0, 2);
  other.mutable_job()->set_global_batch_size(99);
  s = restore_.BeforeInitJob(other);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("global_batch_size"));
  EXPECT_FALSE(store_.ready());

  StartRestore empty(&store_, &checkpointer_);
  empty.Configure(Env::Default(), tmp_.Path("nothing"), "default");
  s = empty.BeforeInitJob(Init(0, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("--restore_from=" + tmp_.Path("nothing")));

  // Its own checkpoints inside the folder it reads.
  Checkpointer inside(Env::Default(), tmp_.Path("old/ps-9/default"));
  StartRestore self(&store_, &inside);
  self.Configure(Env::Default(), tmp_.Path("old"), "default");
  s = self.BeforeInitJob(Init(0, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("own --checkpoint_dir"));
  EXPECT_FALSE(store_.ready());
}

}  // namespace
}  // namespace shardps
