// The one recovery sequence of a pserver: at start (the newest checkpoint
// that verifies, on a generation never used, damaged newer ones set aside)
// and on a rollback (the named step, on the trainers' generation, the
// abandoned timeline discarded).
#include "pserver/checkpoint/recovery.h"

#include <string>
#include <vector>

#include "common/storage/checkpoint.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "pserver/checkpoint/store_snapshots.h"
#include "pserver/testing/checkpoint_job.h"

namespace shardps {
namespace {

using testing::GetState;
using testing::NewStore;
using testing::Options;
using testing::RunStep;
using testing::State;

class RecoveryTest : public ::testing::Test {
 protected:
  // Checkpoints of steps 1, 2 and 3 of one store, and its states then.
  void SetUp() override {
    auto store = NewStore();
    for (int64_t step = 0; step < 3; ++step) {
      ASSERT_TRUE(RunStep(store.get(), step).ok());
      auto snap = StoreSnapshots(store.get()).Snapshot(step + 1);
      ASSERT_TRUE(snap.ok()) << snap.status();
      ASSERT_TRUE(checkpointer_.Save(*snap).ok());
      states_.push_back(GetState(store.get()));
    }
    ASSERT_TRUE(checkpointer_.Flush().ok());
  }

  std::vector<int64_t> Steps() { return *checkpointer_.Steps(); }

  testing::ScopedTempDir tmp_{"recovery_test"};
  const std::string dir_ = tmp_.Path("ckpt");
  Checkpointer checkpointer_{Env::Default(), dir_, /*keep=*/3};
  std::vector<State> states_;  // after steps 1, 2, 3
};

TEST_F(RecoveryTest, AtStartTheNewestOnANewGeneration) {
  ASSERT_TRUE(checkpointer_.WriteGeneration(4).ok());
  ParameterStore store(Options());
  auto step = RecoverFromCheckpoint(&checkpointer_, &store, RecoveryTarget{});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 3);
  EXPECT_TRUE(store.ready());
  EXPECT_EQ(GetState(&store), states_[2]);
  // One above the newest this directory has seen, kept durably.
  EXPECT_EQ(store.generation(), 5u);
  EXPECT_EQ(*checkpointer_.ReadGeneration(), 5u);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2, 3}));
}

TEST_F(RecoveryTest, AtStartADamagedNewestIsSetAside) {
  const std::string blob =
      JoinPath(JoinPath(dir_, CheckpointDirName(3)), "table-0.bin");
  std::string bytes = testing::ReadFileOrFail(Env::Default(), blob);
  bytes[0] ^= 1;
  ASSERT_TRUE(testing::WriteStringToFile(Env::Default(), blob, bytes).ok());
  ParameterStore store(Options());
  auto step = RecoverFromCheckpoint(&checkpointer_, &store, RecoveryTarget{});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 2);
  EXPECT_EQ(GetState(&store), states_[1]);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(
      Env::Default()
          ->FileExists(JoinPath(dir_, CheckpointDirName(3)) + ".damaged")
          .ok());
}

TEST_F(RecoveryTest,
       AtStartARefusedCheckpointIsDataLossAfterTheDamagedWentAside) {
  const std::string blob =
      JoinPath(JoinPath(dir_, CheckpointDirName(3)), "table-0.bin");
  std::string bytes = testing::ReadFileOrFail(Env::Default(), blob);
  bytes[0] ^= 1;
  ASSERT_TRUE(testing::WriteStringToFile(Env::Default(), blob, bytes).ok());
  StoreOptions three = Options();
  three.num_trainers = 3;  // the checkpoints hold a job of 2
  ParameterStore store(three);
  auto step = RecoverFromCheckpoint(&checkpointer_, &store, RecoveryTarget{});
  EXPECT_EQ(step.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(step.status().message().find("cannot restore step 2"),
            std::string::npos)
      << step.status();
  EXPECT_FALSE(store.ready());
  // The damaged newer checkpoint was set aside before the restore failed.
  EXPECT_TRUE(
      Env::Default()
          ->FileExists(JoinPath(dir_, CheckpointDirName(3)) + ".damaged")
          .ok());
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2}));
}

// Finding: "a CRC-valid but malformed newest checkpoint stops the pserver
// from starting instead of falling back to the previous one".
TEST_F(RecoveryTest, AtStartAVerifiedButMalformedNewestIsSetAside) {
  auto store = NewStore();
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(RunStep(store.get(), step).ok());
  }
  // Step 4: a blob that does not parse; step 5: a spec no chief could send.
  // Both verify: their checksums are those of what was written.
  auto four = StoreSnapshots(store.get()).Snapshot(3);
  ASSERT_TRUE(four.ok());
  four->info.set_step(4);
  four->files[0].second.resize(7);
  ASSERT_TRUE(checkpointer_.Save(*four).ok());
  auto five = StoreSnapshots(store.get()).Snapshot(3);
  five->info.set_step(5);
  five->info.mutable_job()->set_num_trainers(2147483647);
  ASSERT_TRUE(checkpointer_.Save(*five).ok());
  ASSERT_TRUE(checkpointer_.Flush().ok());
  ASSERT_EQ(Steps(), (std::vector<int64_t>{3, 4, 5}));  // keep = 3

  ParameterStore fresh(Options());
  auto step = RecoverFromCheckpoint(&checkpointer_, &fresh, RecoveryTarget{});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 3);
  EXPECT_EQ(GetState(&fresh), states_[2]);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{3}));
  for (int64_t bad : {4, 5}) {
    EXPECT_TRUE(
        Env::Default()
            ->FileExists(JoinPath(dir_, CheckpointDirName(bad)) + ".damaged")
            .ok())
        << bad;
  }
}

TEST_F(RecoveryTest, AtStartNothingToLoadIsNotFound) {
  testing::ScopedTempDir empty("recovery_empty");
  Checkpointer none(Env::Default(), empty.Path("ckpt"));
  ParameterStore store(Options());
  auto step = RecoverFromCheckpoint(&none, &store, RecoveryTarget{});
  EXPECT_EQ(step.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(store.ready());
}

TEST_F(RecoveryTest, ARollbackLoadsTheStepAndDiscardsTheNewerOnes) {
  ParameterStore store(Options());
  ASSERT_TRUE(
      RecoverFromCheckpoint(&checkpointer_, &store, RecoveryTarget{}).ok());
  RecoveryTarget back;
  back.kind = RecoveryTarget::Kind::kRollback;
  back.step = 1;
  back.generation = 9;
  auto step = RecoverFromCheckpoint(&checkpointer_, &store, back);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 1);
  EXPECT_EQ(store.generation(), 9u);
  EXPECT_EQ(store.counters().rollbacks, 1);
  EXPECT_EQ(GetState(&store), states_[0]);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1}));
  EXPECT_EQ(*checkpointer_.ReadGeneration(), 9u);

  back.step = 2;  // discarded: gone
  back.generation = 10;
  step = RecoverFromCheckpoint(&checkpointer_, &store, back);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(step.status().message().find("rollback to step 2"),
            std::string::npos)
      << step.status();
  EXPECT_EQ(store.generation(), 9u);
}

}  // namespace
}  // namespace shardps
