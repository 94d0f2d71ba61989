// Checkpoints of K-of-N jobs (--replicas_to_aggregate): a save of step s
// takes each unit as it is at version s, whether it is there at the save's
// instant or gets there later (armed); it refuses a unit past s, gives up
// after --max_pull_wait, and writes nothing once called off.
#include <string>
#include <vector>

#include "common/storage/checkpoint.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "pserver/checkpoint/checkpointer.h"
#include "pserver/checkpoint/store_snapshots.h"
#include "pserver/testing/checkpoint_job.h"

namespace shardps {
namespace {

using testing::CheckpointJob;
using testing::GetState;
using testing::MemorySink;
using testing::NewStore;
using testing::Options;
using testing::PushDense;
using testing::PushSparse;
using testing::RunStep;

// Three trainers, a step applied once two have pushed it; RunStep pushes
// trainers 0 and 1.
JobSpec KofNJob() {
  JobSpec job = CheckpointJob(3);
  job.set_replicas_to_aggregate(2);
  return job;
}

const std::vector<BlockId> kFirstBlock = {{0, 0}};
const std::vector<BlockId> kOtherBlocks = {{0, 1}, {1, 0}};

// Steps 0..2, then step 3 of table w's block 0 only: that block is at
// version 4, every other unit at 3.
std::unique_ptr<ParameterStore> StoreWithBlockAhead(
    StoreOptions options = Options()) {
  auto store = NewStore(KofNJob(), options);
  for (int64_t step = 0; step < 3; ++step) {
    EXPECT_TRUE(RunStep(store.get(), step).ok());
  }
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(PushDense(store.get(), k, 3, kAnyGeneration, kFirstBlock).ok());
  }
  return store;
}

// The rest of step 3.
void FinishStep3(ParameterStore* store) {
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(PushDense(store, k, 3, kAnyGeneration, kOtherBlocks).ok());
    ASSERT_TRUE(PushSparse(store, k, 3).ok());
  }
}

testing::State StateAt(int64_t steps) {
  auto ref = NewStore(KofNJob());
  for (int64_t step = 0; step < steps; ++step) {
    EXPECT_TRUE(RunStep(ref.get(), step).ok());
  }
  return GetState(ref.get());
}

TEST(KofNSaveTest, ArmedUnitsAreTakenWhenTheyGetThere) {
  auto store = StoreWithBlockAhead();
  EXPECT_EQ(store->TEST_BlockVersion(0, 0), 4);
  EXPECT_EQ(store->TEST_BlockVersion(0, 1), 3);
  MemorySink sink;
  auto info = StoreSnapshots(store.get()).BeginSave(4, &sink);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(sink.appends(), 3);  // the headers only
  // The others get to 4, and steps 4 and 5 change every unit past it.
  FinishStep3(store.get());
  for (int64_t step = 4; step < 6; ++step) {
    ASSERT_TRUE(RunStep(store.get(), step).ok());
  }
  ASSERT_TRUE(StoreSnapshots(store.get()).WriteRest(4).ok());
  ParameterStore restored(Options());
  ASSERT_TRUE(
      StoreSnapshots(&restored).Restore(sink.ToSnapshot(*info), 1).ok());
  EXPECT_EQ(GetState(&restored), StateAt(4));
}

TEST(KofNSaveTest, RefusesAUnitPastTheStepOrFarBehind) {
  auto store = StoreWithBlockAhead();
  MemorySink sink;
  auto past = StoreSnapshots(store.get()).BeginSave(3, &sink);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(past.status().message(),
            "checkpoint of step 3: table w block 0 is at version 4 already");
  auto far = StoreSnapshots(store.get()).BeginSave(1004, &sink);
  EXPECT_EQ(far.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(far.status().message(),
            "checkpoint of step 1004: table w block 1 is at version 3, more "
            "than 1000 steps behind; refused");
  EXPECT_EQ(sink.appends(), 0);
}

TEST(KofNSaveTest, ACalledOffSaveWritesNothingOnceItsPassEnds) {
  auto store = StoreWithBlockAhead();
  MemorySink sink;
  ASSERT_TRUE(StoreSnapshots(store.get()).BeginSave(4, &sink).ok());
  StoreSnapshots(store.get()).CallOffSaves("a test");
  const absl::Status s = StoreSnapshots(store.get()).WriteRest(4);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(),
            "checkpoint of step 4: called off with table w block 1 at version "
            "3 (a rollback, a newer checkpoint or the job's end); not written");
  // The block that was at 4 was written by the pass (the sink is not
  // referred to after it); the others never mark themselves.
  const int appends = sink.appends();
  EXPECT_EQ(appends, 4);
  FinishStep3(store.get());
  ASSERT_TRUE(RunStep(store.get(), 4).ok());
  EXPECT_EQ(sink.appends(), appends);
}

TEST(KofNSaveTest, GivesUpAfterMaxPullWait) {
  StoreOptions options = Options();
  options.max_pull_wait = absl::Milliseconds(50);
  auto store = StoreWithBlockAhead(options);
  MemorySink sink;
  ASSERT_TRUE(StoreSnapshots(store.get()).BeginSave(4, &sink).ok());
  const absl::Status s = StoreSnapshots(store.get()).WriteRest(4);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            "checkpoint of step 4: table w block 1 was at version 3 after "
            "50ms (--max_pull_wait); not written");
  const int appends = sink.appends();
  FinishStep3(store.get());
  EXPECT_EQ(sink.appends(), appends);
}

TEST(KofNSaveTest, FullAndDeltaThroughTheCheckpointer) {
  testing::ScopedTempDir tmp("kofn");
  Checkpointer checkpointer(Env::Default(), tmp.Path("ckpt"), /*keep=*/2,
                            /*full_every=*/2);
  auto store = StoreWithBlockAhead();
  absl::Status previous;
  ASSERT_TRUE(
      StoreSnapshots(store.get()).SaveTo(&checkpointer, 4, &previous).ok());
  FinishStep3(store.get());
  ASSERT_TRUE(RunStep(store.get(), 4).ok());
  // Step 5 of w block 0 only: the delta of step 6 waits for the others.
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(PushDense(store.get(), k, 5, kAnyGeneration, kFirstBlock).ok());
  }
  ASSERT_TRUE(
      StoreSnapshots(store.get()).SaveTo(&checkpointer, 6, &previous).ok());
  EXPECT_TRUE(previous.ok()) << previous;
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(
        PushDense(store.get(), k, 5, kAnyGeneration, kOtherBlocks).ok());
    ASSERT_TRUE(PushSparse(store.get(), k, 5).ok());
  }
  ASSERT_TRUE(RunStep(store.get(), 6).ok());
  ASSERT_TRUE(checkpointer.Flush().ok());
  EXPECT_EQ(checkpointer.stats().written, 2);

  for (int64_t step : {4, 6}) {
    auto chain = checkpointer.LoadChain(step);
    ASSERT_TRUE(chain.ok()) << chain.status();
    EXPECT_EQ(chain->size(), step == 4 ? 1u : 2u);
    std::vector<const StoreSnapshot*> links;
    for (const StoreSnapshot& s : *chain) links.push_back(&s);
    ParameterStore restored(Options());
    ASSERT_TRUE(StoreSnapshots(&restored).RestoreChain(links, 1).ok());
    EXPECT_EQ(GetState(&restored), StateAt(step)) << "step " << step;
  }
}

TEST(KofNSaveTest, ACalledOffSaveIsNoFailedWriteAndLeavesNothing) {
  testing::ScopedTempDir tmp("kofn");
  Checkpointer checkpointer(Env::Default(), tmp.Path("ckpt"), /*keep=*/2,
                            /*full_every=*/2);
  auto store = StoreWithBlockAhead();
  absl::Status previous;
  ASSERT_TRUE(
      StoreSnapshots(store.get()).SaveTo(&checkpointer, 4, &previous).ok());
  StoreSnapshots(store.get()).CallOffSaves("a test");
  EXPECT_TRUE(checkpointer.Flush().ok());
  EXPECT_EQ(checkpointer.stats().written, 0);
  EXPECT_EQ(checkpointer.stats().failed, 0);
  std::vector<std::string> children;
  ASSERT_TRUE(Env::Default()->GetChildren(tmp.Path("ckpt"), &children).ok());
  EXPECT_TRUE(children.empty()) << children[0];
  // The next save is whole (the called-off one took changes with it).
  FinishStep3(store.get());
  ASSERT_TRUE(
      StoreSnapshots(store.get()).SaveTo(&checkpointer, 4, &previous).ok());
  ASSERT_TRUE(checkpointer.Flush().ok());
  auto loaded = checkpointer.Load(4);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->info.delta());
  ParameterStore restored(Options());
  ASSERT_TRUE(StoreSnapshots(&restored).Restore(*loaded, 1).ok());
  EXPECT_EQ(GetState(&restored), StateAt(4));
}

}  // namespace
}  // namespace shardps
