// The async staleness gate alone: a pull waits while it is more than
// max_staleness steps ahead of the slowest live trainer, or until every
// trainer reached its min_clock; the clocks go into checkpoints.
#include "pserver/store/step/staleness_gate.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

WaiterPtr PullAt(int64_t step, int64_t min_clock = 0) {
  auto w = std::make_shared<PullWaiter>();
  w->step = step;
  w->min_clock = min_clock;
  return w;
}

TEST(StalenessGateTest, PullsAheadOfTheSlowestTrainerWait) {
  Membership m(2, /*sync=*/false);
  StalenessGate gate(/*async=*/true, /*max_staleness=*/1, &m);
  EXPECT_TRUE(gate.PassOrHold(PullAt(1)));  // 1 - 0 <= 1
  WaiterPtr fast = PullAt(2);
  EXPECT_FALSE(gate.PassOrHold(fast));
  EXPECT_EQ(gate.DescribeWait(*fast),
            "staleness bound 1 at step 2: waiting for trainer(s) 0,1");
  std::vector<WaiterPtr> ready;
  gate.Advance(0, 0, &ready);  // trainer 0 pushed step 0: clock 1
  EXPECT_TRUE(ready.empty());  // trainer 1 is still at 0
  gate.Advance(1, 0, &ready);
  EXPECT_EQ(ready, std::vector<WaiterPtr>{fast});
  EXPECT_EQ(gate.clock(1), 1);
}

TEST(StalenessGateTest, MinClockWaitsForEveryTrainersEnd) {
  Membership m(2, false);
  StalenessGate gate(true, /*max_staleness=*/-1, &m);
  WaiterPtr final_pull = PullAt(5, /*min_clock=*/3);
  EXPECT_FALSE(gate.PassOrHold(final_pull));
  EXPECT_EQ(gate.DescribeWait(*final_pull),
            "the end of step 2: waiting for trainer(s) 0,1");
  std::vector<WaiterPtr> ready;
  gate.Advance(0, 2, &ready);
  EXPECT_TRUE(ready.empty());
  gate.Advance(1, 2, &ready);
  EXPECT_EQ(ready.size(), 1u);
}

TEST(StalenessGateTest, OwnClockWaitsForThisTrainersPushOnly) {
  Membership m(2, false);
  StalenessGate gate(true, /*max_staleness=*/-1, &m);
  std::vector<WaiterPtr> ready;
  gate.Advance(1, 2, &ready);  // trainer 1 pushed step 2: clock 3
  WaiterPtr next = PullAt(4);
  next->trainer_id = 1;
  next->own_clock = 4;  // sent with trainer 1's push of step 3
  EXPECT_FALSE(gate.PassOrHold(next));
  EXPECT_EQ(gate.DescribeWait(*next), "trainer 1's own push of step 3");
  gate.Advance(0, 1, &ready);  // another trainer's push releases nothing
  EXPECT_TRUE(ready.empty());
  gate.Advance(1, 3, &ready);  // trainer 0 is behind: no matter here
  EXPECT_EQ(ready, std::vector<WaiterPtr>{next});
  WaiterPtr again = PullAt(5);
  again->trainer_id = 1;
  again->own_clock = 4;
  EXPECT_TRUE(gate.PassOrHold(again));
}

// A pserver that lost pushes the trainer saw acknowledged (restarted from a
// checkpoint, or empty) does not make the trainer's next pull wait for
// them.
TEST(StalenessGateTest, OwnClockIsNotWaitedForAfterLostPushes) {
  Membership m(1, false);
  StalenessGate gate(true, -1, &m);
  WaiterPtr far = PullAt(9);
  far->own_clock = 9;  // clock 0: pushes 0 to 7 are not here either
  EXPECT_TRUE(gate.PassOrHold(far));
  std::vector<WaiterPtr> ready;
  gate.Advance(0, 6, &ready);  // clock 7
  CheckpointInfo info;
  gate.AddTo(&info);
  gate.Restore(info, &ready);  // at clock 7 again, after a restart
  WaiterPtr next = PullAt(8);
  next->own_clock = 8;  // push 7 may have been lost with the old process
  EXPECT_TRUE(gate.PassOrHold(next));
  gate.Advance(0, 7, &ready);  // a push applied since: waited for again
  WaiterPtr later = PullAt(9);
  later->own_clock = 9;
  EXPECT_FALSE(gate.PassOrHold(later));
}

TEST(StalenessGateTest, ATrainerThatLeftIsNotWaitedFor) {
  Membership m(2, false);
  StalenessGate gate(true, 0, &m);
  WaiterPtr w = PullAt(1);
  EXPECT_FALSE(gate.PassOrHold(w));
  bool changed = false;
  ASSERT_TRUE(m.Leave(1, 0, &changed).ok());
  std::vector<WaiterPtr> ready;
  gate.Advance(0, 0, &ready);
  EXPECT_EQ(ready, std::vector<WaiterPtr>{w});
}

TEST(StalenessGateTest, SyncPassesEverythingAndClocksGoIntoCheckpoints) {
  Membership m(2, true);
  StalenessGate off(/*async=*/false, 0, &m);
  EXPECT_TRUE(off.PassOrHold(PullAt(100)));
  StalenessGate gate(true, 0, &m);
  std::vector<WaiterPtr> ready;
  gate.Advance(0, 6, &ready);
  CheckpointInfo info;
  gate.AddTo(&info);
  EXPECT_EQ(std::vector<int64_t>(info.clocks().begin(), info.clocks().end()),
            (std::vector<int64_t>{7, 0}));
  StalenessGate restored(true, 0, &m);
  WaiterPtr held = PullAt(3);
  EXPECT_FALSE(restored.PassOrHold(held));
  std::vector<WaiterPtr> dropped;
  restored.Restore(info, &dropped);
  EXPECT_EQ(dropped, std::vector<WaiterPtr>{held});
  EXPECT_EQ(restored.clock(0), 7);
}

}  // namespace
}  // namespace shardps
