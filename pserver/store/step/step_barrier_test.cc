// The sync step of one unit, alone: admission, duplicates, chunk counts,
// completion for every live trainer or K of them, refusals, held pulls.
#include "pserver/store/step/step_barrier.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "pserver/store/step/pull_waiters.h"

namespace shardps {
namespace {

using Admission = StepBarrier::Admission;
using Arrival = StepBarrier::Arrival;

class StepBarrierTest : public ::testing::Test {
 protected:
  Membership membership_{3, /*sync=*/true};
};

TEST_F(StepBarrierTest, CompleteWhenEveryLiveTrainerSentAllItsChunks) {
  StepBarrier b("table w block 0", "block", &membership_, /*quorum=*/0);
  EXPECT_FALSE(b.Complete());
  auto r = b.Receive(0, 1);
  EXPECT_EQ(r.arrival, Arrival::kTrainerDone);
  EXPECT_TRUE(r.first);
  // Trainer 1 sends two chunks; the second completes its part.
  r = b.Receive(1, 2);
  EXPECT_EQ(r.arrival, Arrival::kPartial);
  EXPECT_FALSE(r.first);
  r = b.Receive(1, 2);
  EXPECT_EQ(r.arrival, Arrival::kTrainerDone);
  EXPECT_FALSE(b.Complete());  // trainer 2 is missing
  std::vector<int> missing;
  b.AppendMissing(&missing);
  EXPECT_EQ(missing, (std::vector<int>{2}));
  EXPECT_EQ(b.Receive(2, 1).arrival, Arrival::kTrainerDone);
  EXPECT_TRUE(b.Complete());
  EXPECT_EQ(b.num_done(), 3);
  std::vector<WaiterPtr> ready;
  b.Advance(&ready);
  EXPECT_EQ(b.version(), 1);
  EXPECT_EQ(b.num_done(), 0);
  EXPECT_FALSE(b.Complete());
}

TEST_F(StepBarrierTest, RepeatedChunksAreDuplicates) {
  StepBarrier b("sparse table e", "table", &membership_, 0);
  EXPECT_EQ(b.Receive(0, 1).arrival, Arrival::kTrainerDone);
  EXPECT_EQ(b.Receive(0, 1).arrival, Arrival::kDuplicate);
  EXPECT_EQ(b.num_done(), 1);
}

TEST_F(StepBarrierTest, AdmissionRefusesOtherStepsAndChangedChunkCounts) {
  StepBarrier b("table w block 3", "block", &membership_, 0);
  std::vector<WaiterPtr> ready;
  b.Advance(&ready);  // at version 1
  auto a = b.Admit(0, 0, 1);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.status().message(),
            "push for step 0 of table w block 3 refused: that step was "
            "already applied (the block is at version 1)");
  a = b.Admit(0, 2, 1);
  EXPECT_EQ(a.status().message(),
            "push for step 2 of table w block 3 refused: the block is still "
            "at step 1 (pull with min_version first)");
  ASSERT_TRUE(b.Admit(0, 1, 2).ok());
  b.Receive(0, 2);
  a = b.Admit(0, 1, 3);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.status().message(),
            "table w block 3: trainer 0 announced 2 chunks for step 1, now 3");
  EXPECT_EQ(*b.Admit(1, 1, 3), Admission::kApply);  // another trainer
}

TEST_F(StepBarrierTest, QuorumAppliesAfterKAndLatePushesAreLate) {
  StepBarrier b("table w block 0", "block", &membership_, /*quorum=*/2);
  b.Receive(0, 1);
  EXPECT_FALSE(b.Complete());
  b.Receive(2, 1);
  EXPECT_TRUE(b.Complete());
  std::vector<WaiterPtr> ready;
  b.Advance(&ready);
  EXPECT_EQ(*b.Admit(1, 0, 1), Admission::kLate);
  // A future step is still refused.
  EXPECT_EQ(b.Admit(1, 4, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(StepBarrierTest, TrainersGoneFromTheJobAreNotWaitedFor) {
  StepBarrier b("table w block 0", "block", &membership_, 0);
  membership_.Register(2, 7, absl::Now(), 0, 0);
  bool changed = false;
  ASSERT_TRUE(membership_.Leave(2, 7, &changed).ok());
  b.Receive(0, 1);
  b.Receive(1, 1);
  EXPECT_TRUE(b.Complete());
  std::vector<int> missing;
  b.AppendMissing(&missing);
  EXPECT_TRUE(missing.empty());
}

TEST_F(StepBarrierTest, HeldPullsGoWhenTheirVersionIsReachedOrOnReset) {
  StepBarrier b("table w block 0", "block", &membership_, 0);
  auto w1 = std::make_shared<PullWaiter>();
  auto w2 = std::make_shared<PullWaiter>();
  b.Hold(1, w1);
  b.Hold(2, w2);
  std::vector<WaiterPtr> ready;
  b.Advance(&ready);
  EXPECT_EQ(ready, std::vector<WaiterPtr>{w1});
  std::vector<WaiterPtr> dropped;
  b.Reset(7, &dropped);
  EXPECT_EQ(dropped, std::vector<WaiterPtr>{w2});
  EXPECT_EQ(b.version(), 7);
}

}  // namespace
}  // namespace shardps
