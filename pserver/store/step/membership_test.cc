// Membership alone: registration, rejoins, heartbeats, drops after a
// silence, Leave, the lock-free incarnation and generation checks, and a
// restore from a checkpoint. The barrier's side of it is in
// parameter_store_membership_test.cc.
#include "pserver/store/step/membership.h"

#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

class MembershipTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  Membership sync_{3, /*sync=*/true};
};

TEST_F(MembershipTest, EveryTrainerIsRequiredFromTheStart) {
  EXPECT_EQ(sync_.LiveTrainers(), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(sync_.Required(2, 0));
  EXPECT_EQ(sync_.CheckTrainerId(3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sync_.CheckTrainerId(-1).message(),
            "trainer_id -1 is out of range: the job has 3 trainers");
}

TEST_F(MembershipTest, ARejoinIsRequiredFromTheNextStepOnly) {
  auto r = sync_.Register(1, 10, clock_.Now(), /*next_step=*/5, 0);
  EXPECT_FALSE(r.rejoined);
  EXPECT_EQ(r.join_step, 0);
  // A new incarnation: the barrier waits for it from step 5.
  r = sync_.Register(1, 11, clock_.Now(), 5, 0);
  EXPECT_TRUE(r.rejoined);
  EXPECT_EQ(r.join_step, 5);
  EXPECT_FALSE(sync_.Required(1, 4));
  EXPECT_TRUE(sync_.Required(1, 5));
  EXPECT_EQ(sync_.rejoined(), 1);
  // ConfirmJoin moves it later, never earlier, and only for the trainer
  // that registered.
  bool changed = false;
  EXPECT_EQ(sync_.ConfirmJoin(1, 10, 7, &changed).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(sync_.ConfirmJoin(1, 11, 7, &changed).ok());
  EXPECT_TRUE(changed);
  ASSERT_TRUE(sync_.ConfirmJoin(1, 11, 6, &changed).ok());
  EXPECT_FALSE(changed);
  EXPECT_FALSE(sync_.Required(1, 6));
}

TEST_F(MembershipTest, ReplacedIncarnationsAreToldSo) {
  sync_.Register(0, 1, clock_.Now(), 0, 0);
  EXPECT_TRUE(sync_.CheckIncarnation(0, 1).ok());
  sync_.Register(0, 2, clock_.Now(), 0, 0);
  absl::Status s = sync_.CheckIncarnation(0, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("was replaced by incarnation 2"),
            std::string::npos);
  // Not sent: no way around the check once an incarnation registered.
  s = sync_.CheckIncarnation(0, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("trainer 0 is running as incarnation 2; a "
                             "request for it without an incarnation"),
            std::string::npos)
      << s;
  EXPECT_TRUE(sync_.CheckIncarnation(1, 0).ok());  // not registered yet
  s = sync_.Heartbeat(0, 1, clock_.Now());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(MembershipTest, SilentTrainersAreDroppedAndToldSo) {
  const absl::Duration timeout = absl::Seconds(60);
  for (int k = 0; k < 3; ++k) sync_.Register(k, 1, clock_.Now(), 0, 0);
  clock_.Advance(absl::Seconds(50));
  ASSERT_TRUE(sync_.Heartbeat(0, 1, clock_.Now()).ok());
  ASSERT_TRUE(sync_.Touch(1, clock_.Now()).ok());
  clock_.Advance(absl::Seconds(9));
  EXPECT_FALSE(sync_.HasSilent(clock_.Now(), timeout));
  clock_.Advance(absl::Seconds(2));
  EXPECT_TRUE(sync_.HasSilent(clock_.Now(), timeout));
  EXPECT_EQ(sync_.DropSilent(clock_.Now(), timeout), 1);
  EXPECT_EQ(sync_.LiveTrainers(), (std::vector<int>{0, 1}));
  EXPECT_EQ(sync_.dropped(), 1);
  EXPECT_EQ(sync_.Touch(2, clock_.Now()).message(),
            "trainer 2 was dropped from the job after --trainer_timeout "
            "without a word; restart it to rejoin");
  EXPECT_EQ(sync_.DropSilent(clock_.Now(), timeout), 0);  // once
}

TEST_F(MembershipTest, LeaveIsIdempotentAndChecksTheIncarnation) {
  sync_.Register(2, 5, clock_.Now(), 0, 0);
  bool changed = false;
  EXPECT_EQ(sync_.Leave(2, 6, &changed).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(sync_.Leave(2, 5, &changed).ok());
  EXPECT_TRUE(changed);
  ASSERT_TRUE(sync_.Leave(2, 5, &changed).ok());
  EXPECT_FALSE(changed);
  EXPECT_FALSE(sync_.Live(2));
}

TEST_F(MembershipTest, FinishedTrainersAreListedUntilTheyRegisterAgain) {
  sync_.Register(1, 5, clock_.Now(), 0, 0);
  sync_.Register(2, 7, clock_.Now(), 0, 0);
  // Only a trainer that has left (a sync trainer leaves the barrier before
  // its final evaluation), as the incarnation that left, can finish.
  EXPECT_EQ(sync_.MarkFinished(1, 5).code(),
            absl::StatusCode::kFailedPrecondition);
  bool changed = false;
  ASSERT_TRUE(sync_.Leave(1, 5, &changed).ok());
  EXPECT_TRUE(sync_.FinishedTrainers().empty());
  EXPECT_EQ(sync_.MarkFinished(1, 6).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(sync_.MarkFinished(1, 5).ok());
  ASSERT_TRUE(sync_.MarkFinished(1, 5).ok());  // idempotent
  ASSERT_TRUE(sync_.Leave(2, 7, &changed).ok());
  ASSERT_TRUE(sync_.MarkFinished(2, 7).ok());
  EXPECT_EQ(sync_.FinishedTrainers(), (std::vector<int>{1, 2}));
  EXPECT_EQ(sync_.MarkFinished(3, 1).code(),
            absl::StatusCode::kInvalidArgument);
  // Trainer 2 restarted: not finished until it says so again.
  sync_.Register(2, 8, clock_.Now(), 4, 0);
  EXPECT_EQ(sync_.FinishedTrainers(), (std::vector<int>{1}));
}

TEST_F(MembershipTest, GenerationChecksAreSyncOnly) {
  EXPECT_TRUE(sync_.CheckGeneration("push", 0).ok());
  EXPECT_TRUE(sync_.CheckGeneration("push", kAnyGeneration).ok());
  absl::Status s = sync_.CheckGeneration("pull", 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(),
            "pull from generation 3: this pserver is on generation 0, "
            "restarted from step 0; the trainer must recover");
  Membership async(2, /*sync=*/false);
  EXPECT_TRUE(async.CheckGeneration("pull", 3).ok());
}

TEST_F(MembershipTest, RestoreKeepsGoneTrainersOutAndRedoesTheSteps) {
  CheckpointInfo info;
  info.set_step(40);
  info.add_left_trainers(2);
  Membership restarted(3, true);
  restarted.Restore(info, 4, /*restarted=*/true, clock_.Now());
  EXPECT_EQ(restarted.generation(), 4u);
  EXPECT_EQ(restarted.base_step(), 40);
  EXPECT_EQ(restarted.LiveTrainers(), (std::vector<int>{0, 1}));
  EXPECT_TRUE(restarted.Required(0, 40));
  EXPECT_FALSE(restarted.Required(0, 39));
  // Taken as alive at the restore: dropped only after a silence from then.
  EXPECT_FALSE(
      restarted.HasSilent(clock_.Now() + absl::Seconds(59), absl::Seconds(60)));
  EXPECT_TRUE(
      restarted.HasSilent(clock_.Now() + absl::Seconds(61), absl::Seconds(60)));
  CheckpointInfo saved;
  restarted.AddTo(&saved);
  EXPECT_EQ(saved.left_trainers_size(), 1);
}

TEST_F(MembershipTest, AnEndedJobStartedAgainWaitsForAllItsTrainers) {
  // The final checkpoint of a job whose trainers all finished or were
  // dropped: started again (more passes), every trainer is expected from
  // the step, as in a job that never stopped, and registers at that step.
  CheckpointInfo info;
  info.set_step(156);
  info.add_left_trainers(0);
  info.add_left_trainers(2);
  info.add_dropped_trainers(1);
  Membership restarted(3, true);
  restarted.Restore(info, 2, /*restarted=*/true, clock_.Now());
  EXPECT_EQ(restarted.LiveTrainers(), (std::vector<int>{0, 1, 2}));
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(restarted.Required(k, 156)) << k;
    EXPECT_FALSE(restarted.Required(k, 155)) << k;
  }
  auto r = restarted.Register(1, 77, clock_.Now(), /*next_step=*/157, 0);
  EXPECT_EQ(r.join_step, 156);
  EXPECT_FALSE(r.rejoined);
}

}  // namespace
}  // namespace shardps
