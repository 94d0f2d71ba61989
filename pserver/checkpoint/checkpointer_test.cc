// The Checkpointer over a real directory: background writes and retention,
// loads, the durable generation, discarding an abandoned timeline, and a
// failed write that keeps the previous checkpoint.
#include "pserver/checkpoint/checkpointer.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/storage/env.h"
#include "common/storage/fault_injection_env.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "pserver/checkpoint/store_snapshots.h"
#include "pserver/testing/checkpoint_job.h"

namespace shardps {
namespace {

using testing::ExpectSameSnapshot;
using testing::GetState;
using testing::NewStore;
using testing::Options;
using testing::RunStep;
using testing::State;

class CheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = NewStore();
    // Snapshots of steps 1, 2 and 3.
    for (int64_t step = 0; step < 3; ++step) {
      ASSERT_TRUE(RunStep(store_.get(), step).ok());
      auto snap = StoreSnapshots(store_.get()).Snapshot(step + 1);
      ASSERT_TRUE(snap.ok()) << snap.status();
      snaps_.push_back(*snap);
      states_.push_back(GetState(store_.get()));
    }
  }
  std::vector<int64_t> Steps(const Checkpointer& c) {
    auto steps = c.Steps();
    EXPECT_TRUE(steps.ok()) << steps.status();
    return steps.ok() ? *steps : std::vector<int64_t>{-1};
  }

  testing::ScopedTempDir tmp_{"checkpointer_test"};
  const std::string dir_ = tmp_.Path("ckpt");
  std::unique_ptr<ParameterStore> store_;
  std::vector<StoreSnapshot> snaps_;  // of steps 1, 2, 3
  std::vector<State> states_;
};

TEST_F(CheckpointerTest, GenerationIsKeptDurablyAndChecked) {
  Checkpointer c(Env::Default(), dir_);
  EXPECT_EQ(c.ReadGeneration().status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(c.WriteGeneration(7).ok());
  auto g = c.ReadGeneration();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 7u);
  ASSERT_TRUE(c.WriteGeneration(8).ok());
  EXPECT_EQ(*c.ReadGeneration(), 8u);
  // Checkpoints ignore the file, and it survives their retention.
  EXPECT_TRUE(c.Save(snaps_[0]).ok());
  EXPECT_TRUE(c.Save(snaps_[1]).ok());
  EXPECT_TRUE(c.Save(snaps_[2]).ok());
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*c.ReadGeneration(), 8u);
  // A damaged file is DataLoss, not a silent 0.
  auto f = Env::Default()->NewWritableFile(JoinPath(dir_, "GENERATION"));
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append("eight\n").ok());
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ(c.ReadGeneration().status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(CheckpointerTest, SaveLoadRoundTripAndRetention) {
  Checkpointer c(Env::Default(), dir_, /*keep=*/2);
  EXPECT_EQ(Steps(c), std::vector<int64_t>{});
  EXPECT_EQ(c.LoadNewest().status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(c.Save(snaps_[0]).ok());
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1}));
  EXPECT_TRUE(c.Save(snaps_[1]).ok());
  EXPECT_TRUE(c.Save(snaps_[2]).ok());  // waits for the write of step 2
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{2, 3}));

  auto newest = c.LoadNewest();
  ASSERT_TRUE(newest.ok()) << newest.status();
  ExpectSameSnapshot(*newest, snaps_[2]);
  auto two = c.Load(2);
  ASSERT_TRUE(two.ok()) << two.status();
  ExpectSameSnapshot(*two, snaps_[1]);
  EXPECT_EQ(c.Load(1).status().code(), absl::StatusCode::kNotFound);

  // What was loaded restores a fresh store to that step.
  ParameterStore fresh(Options());
  ASSERT_TRUE(StoreSnapshots(&fresh).Restore(*two, 1).ok());
  EXPECT_EQ(GetState(&fresh), states_[1]);

  // Another Checkpointer over the same directory sees the same.
  Checkpointer reader(Env::Default(), dir_);
  EXPECT_EQ(Steps(reader), (std::vector<int64_t>{2, 3}));
}

TEST_F(CheckpointerTest, SetAsideNewerThanKeepsTheNewestRollbacksTimelines) {
  Checkpointer c(Env::Default(), dir_, /*keep=*/3);
  for (const StoreSnapshot& s : snaps_) EXPECT_TRUE(c.Save(s).ok());
  ASSERT_TRUE(c.Flush().ok());
  ASSERT_EQ(Steps(c), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_TRUE(c.SetAsideNewerThan(3, 1).ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_TRUE(c.SetAsideNewerThan(1, 2).ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1}));
  auto at = [&](int64_t step, const std::string& suffix) {
    return Env::Default()
        ->FileExists(JoinPath(dir_, CheckpointDirName(step)) + suffix)
        .ok();
  };
  EXPECT_TRUE(at(3, ".abandoned-g2"));
  auto newest = c.LoadNewest();
  ASSERT_TRUE(newest.ok()) << newest.status();
  ExpectSameSnapshot(*newest, snaps_[0]);
  EXPECT_EQ(c.Load(3).status().code(), absl::StatusCode::kNotFound);
  // The new timeline writes step 2 again, and a second rollback (the
  // audit's: asked twice) sets it aside too, keeping the first one's.
  EXPECT_TRUE(c.Save(snaps_[1]).ok());
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1, 2}));
  ASSERT_TRUE(c.SetAsideNewerThan(1, 3).ok());
  EXPECT_TRUE(at(3, ".abandoned-g2"));
  EXPECT_TRUE(at(2, ".abandoned-g2"));
  EXPECT_TRUE(at(2, ".abandoned-g3"));
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1}));
  // With keep 3, the timelines of three rollbacks stay; the fourth deletes
  // the oldest (and those of the old name, without a generation).
  ASSERT_TRUE(
      Env::Default()
          ->CreateDir(JoinPath(dir_, CheckpointDirName(7)) + ".abandoned")
          .ok());
  EXPECT_TRUE(c.Save(snaps_[1]).ok());
  ASSERT_TRUE(c.Flush().ok());
  ASSERT_TRUE(c.SetAsideNewerThan(1, 4).ok());
  EXPECT_TRUE(at(2, ".abandoned-g4"));
  EXPECT_TRUE(at(2, ".abandoned-g3"));
  EXPECT_TRUE(at(2, ".abandoned-g2"));
  EXPECT_FALSE(at(7, ".abandoned"));
  EXPECT_TRUE(c.Save(snaps_[2]).ok());
  ASSERT_TRUE(c.Flush().ok());
  ASSERT_TRUE(c.SetAsideNewerThan(1, 5).ok());
  EXPECT_TRUE(at(3, ".abandoned-g5"));
  EXPECT_FALSE(at(3, ".abandoned-g2"));
  EXPECT_FALSE(at(2, ".abandoned-g2"));
  EXPECT_TRUE(at(2, ".abandoned-g3"));
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1}));
}

TEST_F(CheckpointerTest, FailedSyncKeepsThePreviousCheckpoint) {
  FaultInjectionEnv env(Env::Default());
  Checkpointer c(&env, dir_, /*keep=*/2);
  EXPECT_TRUE(c.Save(snaps_[0]).ok());
  ASSERT_TRUE(c.Flush().ok());

  env.FailNth(FaultOp::kSync, 1, absl::InternalError("injected EIO"));
  EXPECT_TRUE(c.Save(snaps_[1]).ok());
  absl::Status st = c.Flush();
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  EXPECT_NE(st.message().find("injected EIO"), std::string::npos) << st;
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1}));
  auto newest = c.LoadNewest();
  ASSERT_TRUE(newest.ok()) << newest.status();
  ExpectSameSnapshot(*newest, snaps_[0]);
  ParameterStore fresh(Options());
  ASSERT_TRUE(StoreSnapshots(&fresh).Restore(*newest, 1).ok());
  EXPECT_EQ(GetState(&fresh), states_[0]);

  // The fault was one-off: the next write succeeds and Flush says so.
  EXPECT_EQ(c.Save(snaps_[2]).code(), absl::StatusCode::kInternal);  // step 2
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1, 3}));
}

TEST_F(CheckpointerTest, TheNextSaveSaysThePreviousWriteFailed) {
  FaultInjectionEnv env(Env::Default());
  Checkpointer c(&env, dir_, /*keep=*/2);
  EXPECT_TRUE(c.Save(snaps_[0]).ok());  // none before it
  ASSERT_TRUE(c.Flush().ok());
  env.FailNth(FaultOp::kSync, 1, absl::ResourceExhaustedError("no space"));
  EXPECT_TRUE(c.Save(snaps_[1]).ok());  // step 1's write succeeded
  // Step 2's failed: the request for step 3 hears of it, and still writes.
  const absl::Status previous = c.Save(snaps_[2]);
  EXPECT_EQ(previous.code(), absl::StatusCode::kResourceExhausted) << previous;
  EXPECT_NE(previous.message().find("checkpoint of step 2 to " + dir_),
            std::string::npos)
      << previous;
  EXPECT_NE(previous.message().find("no space"), std::string::npos) << previous;
  ASSERT_TRUE(c.Flush().ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(c.stats().failed, 1);
}

// Says the file system holds `free` bytes, whatever it holds.
class FreeBytesEnv : public FaultInjectionEnv {
 public:
  using FaultInjectionEnv::FaultInjectionEnv;
  absl::StatusOr<uint64_t> FreeBytes(const std::string& dir) override {
    return free;
  }
  uint64_t free = uint64_t{1} << 40;
};

TEST_F(CheckpointerTest, AFullDiskIsNotWrittenAgainUntilThereIsRoom) {
  FreeBytesEnv env(Env::Default());
  Checkpointer c(&env, dir_, /*keep=*/2);
  EXPECT_TRUE(c.CheckRoom().ok());  // nothing failed yet
  EXPECT_TRUE(c.Save(snaps_[0]).ok());
  ASSERT_TRUE(c.Flush().ok());
  const int64_t bytes = c.stats().last_bytes;
  ASSERT_GT(bytes, 0);

  env.FailNth(FaultOp::kSync, 1, absl::ResourceExhaustedError("No space"));
  EXPECT_TRUE(c.Save(snaps_[1]).ok());
  // The disk is full: the next request is refused before any copy, naming
  // the folder, what is free, what the write needed and why it failed;
  // that failure counts as told.
  env.free = 1000;
  absl::Status room = c.CheckRoom();
  EXPECT_EQ(room.code(), absl::StatusCode::kResourceExhausted) << room;
  for (const std::string& part :
       {dir_ + " has 0.00 MB free, and the last write needed ",
        std::string("checkpoint of step 2 to ") + dir_, std::string("No space"),
        std::string("no checkpoint is taken until there is room")}) {
    EXPECT_NE(room.message().find(part), std::string::npos) << room;
  }
  EXPECT_EQ(c.CheckRoom().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(c.stats().no_room, 2);
  // Just less room than the failed write needed plus a tenth: refused.
  env.free = static_cast<uint64_t>(bytes + bytes / 10) - 1;
  EXPECT_EQ(c.CheckRoom().code(), absl::StatusCode::kResourceExhausted);

  // Room again: the request goes on, Save does not repeat the failure it
  // was told, and a write that succeeds clears the check.
  env.free = static_cast<uint64_t>(bytes) * 2;
  EXPECT_TRUE(c.CheckRoom().ok());
  EXPECT_TRUE(c.Save(snaps_[2]).ok());
  ASSERT_TRUE(c.Flush().ok());
  env.free = 0;
  EXPECT_TRUE(c.CheckRoom().ok());
  EXPECT_EQ(Steps(c), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(c.stats().failed, 1);
  EXPECT_EQ(c.stats().no_room, 3);
}

}  // namespace
}  // namespace shardps
