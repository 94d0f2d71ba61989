// Membership of trainers in ParameterStore: drops after --trainer_timeout,
// Leave, rejoin with a new incarnation, K-of-N aggregation, and the ASYNC
// staleness gate when the slowest trainer goes away.

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "pserver/store/parameter_store.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

// Table "w": 8 values in blocks of 4; table "b": 2 values. SGD with lr 1, so
// a step moves each value by minus the mean gradient.
JobSpec MakeJob(TrainingMode mode, int trainers, int replicas_to_aggregate = 0,
                int max_staleness = -1) {
  testing::JobOptions o;
  o.replicas_to_aggregate = replicas_to_aggregate;
  o.max_staleness = max_staleness;
  return testing::MakeJobSpec(
      mode, trainers,
      {testing::DenseTableSpec("w", 8, 4, testing::Sgd(1.0f)),
       testing::DenseTableSpec("b", 2, 4, testing::Sgd(1.0f))},
      o);
}

const std::vector<BlockId> kBlocks = {{0, 0}, {0, 1}, {1, 0}};
constexpr uint64_t kInc = 1;  // every trainer's first incarnation

using testing::PullResult;

class StoreMembershipTest : public ::testing::Test {
 protected:
  void Init(TrainingMode mode, int trainers, int replicas_to_aggregate = 0,
            int max_staleness = -1) {
    StoreOptions options;
    options.clock = &clock_;
    options.trainer_timeout = absl::Seconds(60);
    // Sweeps run with fake times far ahead: no pull may time out by them.
    options.max_pull_wait = absl::Hours(1);
    options.report_after = absl::Hours(1);
    store_ = std::make_unique<ParameterStore>(options);
    ASSERT_TRUE(store_
                    ->InitJob(MakeJob(mode, trainers, replicas_to_aggregate,
                                      max_staleness),
                              kBlocks)
                    .ok());
    init_ = {std::vector<float>{1, 2, 3, 4}, std::vector<float>{5, 6, 7, 8},
             std::vector<float>{0, 0}};
    std::vector<BlockData> data;
    for (size_t i = 0; i < kBlocks.size(); ++i) {
      data.push_back({kBlocks[i].table_id, kBlocks[i].block, init_[i]});
    }
    ASSERT_TRUE(store_->SetInitialValues(data).ok());
    ASSERT_TRUE(store_->CommitInit().ok());
    // Push and Pull mark a trainer seen at the store's clock, which the
    // tests move by hand.
    t0_ = clock_.Now();
  }

  void RegisterAll(int trainers) {
    for (int k = 0; k < trainers; ++k) {
      auto r = store_->Register(k, kInc, t0_);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(r->job_ready);
      EXPECT_EQ(r->join_step, 0);
    }
  }

  absl::Status PushW0(int trainer, int64_t step, std::vector<float> g,
                      int* late = nullptr) {
    std::vector<BlockData> d = {{0, 0, g}};
    return store_->Push(trainer, step, d, kAnyGeneration, late);
  }

  std::unique_ptr<PullResult> StartPull(int trainer, int64_t min_version,
                                        int64_t step,
                                        std::vector<BlockId> blocks) {
    testing::PullArgs a;
    a.trainer = trainer;
    a.min_version = min_version;
    a.step = step;
    return testing::StartPull(store_.get(), a, std::move(blocks));
  }

  std::vector<float> W0() const { return store_->TEST_BlockValues(0, 0); }
  int64_t W0Version() const { return store_->TEST_BlockVersion(0, 0); }

  // The blocks no test step touches.
  void ExpectOtherBlocksUntouched() {
    EXPECT_EQ(store_->TEST_BlockValues(0, 1), init_[1]);
    EXPECT_EQ(store_->TEST_BlockValues(1, 0), init_[2]);
    EXPECT_EQ(store_->TEST_BlockVersion(0, 1), 0);
    EXPECT_EQ(store_->TEST_BlockVersion(1, 0), 0);
  }

  FakeClock clock_;
  std::unique_ptr<ParameterStore> store_;
  std::vector<std::vector<float>> init_;
  absl::Time t0_;
};

// Three SYNC trainers, trainer 2 silent after Register: a sweep past
// --trainer_timeout drops it, and the job goes on without it until it
// rejoins.
class StoreDropTest : public StoreMembershipTest {
 protected:
  // Trainers 0 and 1 of three push step 0 of w0; trainer 0 pulls its result
  // into *pull.
  void PushStep0WithoutTrainer2(std::unique_ptr<PullResult>* pull) {
    Init(SYNC, 3);
    RegisterAll(3);
    ASSERT_TRUE(PushW0(0, 0, {2, 2, 2, 2}).ok());
    ASSERT_TRUE(PushW0(1, 0, {4, 0, 0, 2}).ok());
    *pull = StartPull(0, 1, 1, {{0, 0}});
  }

  // Trainers 0 and 1 keep talking at `at`.
  void HeartbeatTrainers01(absl::Time at) {
    ASSERT_TRUE(store_->Heartbeat(0, kInc, at).ok());
    ASSERT_TRUE(store_->Heartbeat(1, kInc, at).ok());
  }

  // Step 0 as PushStep0WithoutTrainer2, then sweeps until trainer 2 is
  // dropped and the step applied.
  void DropTrainer2() {
    std::unique_ptr<PullResult> pull;
    ASSERT_NO_FATAL_FAILURE(PushStep0WithoutTrainer2(&pull));
    ASSERT_NO_FATAL_FAILURE(HeartbeatTrainers01(t0_ + absl::Seconds(50)));
    store_->Sweep(t0_ + absl::Seconds(59));
    store_->Sweep(t0_ + absl::Seconds(61));
    ASSERT_TRUE(pull->done.HasBeenNotified());
  }
};

TEST_F(StoreDropTest, SweepDropsSilentTrainerAndTheStepGoesOn) {
  std::unique_ptr<PullResult> pull;
  ASSERT_NO_FATAL_FAILURE(PushStep0WithoutTrainer2(&pull));
  EXPECT_FALSE(pull->done.HasBeenNotified());  // waits for trainer 2
  // Trainers 0 and 1 keep talking; trainer 2 says nothing after Register.
  ASSERT_NO_FATAL_FAILURE(HeartbeatTrainers01(t0_ + absl::Seconds(50)));

  store_->Sweep(t0_ + absl::Seconds(59));  // not yet past the timeout
  EXPECT_EQ(store_->counters().dropped_trainers, 0);
  EXPECT_EQ(store_->LiveTrainers(), (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(pull->done.HasBeenNotified());
  EXPECT_EQ(W0Version(), 0);

  store_->Sweep(t0_ + absl::Seconds(61));
  EXPECT_EQ(store_->counters().dropped_trainers, 1);
  EXPECT_EQ(store_->LiveTrainers(), (std::vector<int>{0, 1}));
  // The step applied the mean of the two pushes: (3, 1, 1, 2).
  ASSERT_TRUE(pull->done.HasBeenNotified());
  ASSERT_TRUE(pull->status.ok()) << pull->status;
  ASSERT_EQ(pull->values.size(), 1u);
  EXPECT_EQ(pull->values[0], (std::vector<float>{-2, 1, 2, 2}));
  EXPECT_EQ(W0(), (std::vector<float>{-2, 1, 2, 2}));
  EXPECT_EQ(W0Version(), 1);
  ExpectOtherBlocksUntouched();
}

// The dropped trainer is told so, and changes nothing.
TEST_F(StoreDropTest, ADroppedTrainerIsToldSoAndChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(DropTrainer2());
  absl::Status s = PushW0(2, 1, {100, 100, 100, 100});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("dropped"), std::string::npos) << s;
  s = store_->Heartbeat(2, kInc, t0_ + absl::Seconds(62));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("dropped"), std::string::npos) << s;
  EXPECT_EQ(W0(), (std::vector<float>{-2, 1, 2, 2}));
  EXPECT_EQ(W0Version(), 1);
}

TEST_F(StoreDropTest, AfterADropTheStepsNeedOnlyTheTrainersLeft) {
  ASSERT_NO_FATAL_FAILURE(DropTrainer2());
  // The next step needs only the two that are left.
  ASSERT_TRUE(PushW0(0, 1, {1, 1, 1, 1}).ok());
  EXPECT_EQ(W0Version(), 1);
  ASSERT_TRUE(PushW0(1, 1, {3, 3, 3, 3}).ok());
  EXPECT_EQ(W0Version(), 2);
  EXPECT_EQ(W0(), (std::vector<float>{-4, -1, 0, 0}));

  // A later sweep does not drop it again.
  ASSERT_NO_FATAL_FAILURE(HeartbeatTrainers01(t0_ + absl::Seconds(100)));
  store_->Sweep(t0_ + absl::Seconds(120));
  EXPECT_EQ(store_->counters().dropped_trainers, 1);
  EXPECT_EQ(store_->LiveTrainers(), (std::vector<int>{0, 1}));
}

TEST_F(StoreDropTest, ARestartedTrainerRejoinsFromTheStepAfterTheNewest) {
  ASSERT_NO_FATAL_FAILURE(DropTrainer2());
  // Step 1 by the two that are left, and a later sweep.
  ASSERT_TRUE(PushW0(0, 1, {1, 1, 1, 1}).ok());
  ASSERT_TRUE(PushW0(1, 1, {3, 3, 3, 3}).ok());
  ASSERT_NO_FATAL_FAILURE(HeartbeatTrainers01(t0_ + absl::Seconds(100)));
  store_->Sweep(t0_ + absl::Seconds(120));

  // Restarted, it rejoins from the step after the newest one held.
  auto r = store_->Register(2, kInc + 1, t0_ + absl::Seconds(121));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->join_step, 3);
  EXPECT_EQ(store_->counters().rejoined_trainers, 1);
  EXPECT_EQ(store_->LiveTrainers(), (std::vector<int>{0, 1, 2}));
  ASSERT_TRUE(store_->Heartbeat(2, kInc + 1, t0_ + absl::Seconds(122)).ok());
  // Step 2 does not wait for it; step 3 does.
  ASSERT_TRUE(PushW0(0, 2, {0, 0, 0, 0}).ok());
  ASSERT_TRUE(PushW0(1, 2, {2, 2, 2, 2}).ok());
  EXPECT_EQ(W0Version(), 3);
  EXPECT_EQ(W0(), (std::vector<float>{-5, -2, -1, -1}));
  ASSERT_TRUE(PushW0(0, 3, {0, 0, 0, 0}).ok());
  ASSERT_TRUE(PushW0(1, 3, {0, 0, 0, 0}).ok());
  EXPECT_EQ(W0Version(), 3);
  ASSERT_TRUE(PushW0(2, 3, {3, 3, 3, 3}).ok());
  EXPECT_EQ(W0Version(), 4);
  EXPECT_EQ(W0(), (std::vector<float>{-6, -3, -2, -2}));
}

TEST_F(StoreMembershipTest, NeverRegisteredTrainerIsNeverDropped) {
  Init(SYNC, 3);
  ASSERT_TRUE(store_->Register(0, kInc, t0_).ok());
  ASSERT_TRUE(store_->Register(1, kInc, t0_).ok());
  ASSERT_TRUE(PushW0(0, 0, {3, 3, 3, 3}).ok());
  ASSERT_TRUE(PushW0(1, 0, {3, 0, 0, 6}).ok());
  auto pull = StartPull(1, 1, 1, {{0, 0}});
  // Long silent (but within max_pull_wait, so the pull stays).
  const absl::Time late = t0_ + absl::Minutes(30);
  ASSERT_TRUE(store_->Heartbeat(0, kInc, late).ok());
  ASSERT_TRUE(store_->Heartbeat(1, kInc, late).ok());
  store_->Sweep(late + absl::Seconds(1));
  EXPECT_EQ(store_->counters().dropped_trainers, 0);
  EXPECT_EQ(store_->LiveTrainers(), (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(pull->done.HasBeenNotified());
  EXPECT_EQ(W0Version(), 0);
  EXPECT_EQ(W0(), init_[0]);
  // Its push, however late, completes the step with the mean of three.
  ASSERT_TRUE(PushW0(2, 0, {0, 3, 0, 3}).ok());
  EXPECT_EQ(W0Version(), 1);
  EXPECT_EQ(W0(), (std::vector<float>{-1, 0, 2, 0}));
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_TRUE(pull->status.ok()) << pull->status;
}

TEST_F(StoreMembershipTest, LeaveStopsTheBarrierWaitingAtOnceAndIsIdempotent) {
  Init(SYNC, 3);
  RegisterAll(3);
  ASSERT_TRUE(PushW0(0, 0, {2, 2, 2, 2}).ok());
  ASSERT_TRUE(PushW0(1, 0, {4, 0, 0, 2}).ok());
  auto pull = StartPull(1, 1, 1, {{0, 0}});
  EXPECT_FALSE(pull->done.HasBeenNotified());

  ASSERT_TRUE(store_->Leave(2, kInc).ok());
  ASSERT_TRUE(pull->done.HasBeenNotified());
  ASSERT_TRUE(pull->status.ok()) << pull->status;
  ASSERT_EQ(pull->values.size(), 1u);
  EXPECT_EQ(pull->values[0], (std::vector<float>{-2, 1, 2, 2}));
  EXPECT_EQ(W0Version(), 1);
  EXPECT_EQ(store_->LiveTrainers(), (std::vector<int>{0, 1}));

  // Again: nothing changes.
  ASSERT_TRUE(store_->Leave(2, kInc).ok());
  EXPECT_EQ(store_->LiveTrainers(), (std::vector<int>{0, 1}));
  EXPECT_EQ(W0Version(), 1);
  EXPECT_EQ(W0(), (std::vector<float>{-2, 1, 2, 2}));
  const StoreCounters c = store_->counters();
  EXPECT_EQ(c.dropped_trainers, 0);
  EXPECT_EQ(c.rejoined_trainers, 0);
  ExpectOtherBlocksUntouched();

  // A left trainer is not dropped by a sweep either (it is not active).
  ASSERT_TRUE(store_->Heartbeat(0, kInc, t0_ + absl::Seconds(100)).ok());
  ASSERT_TRUE(store_->Heartbeat(1, kInc, t0_ + absl::Seconds(100)).ok());
  store_->Sweep(t0_ + absl::Seconds(120));
  EXPECT_EQ(store_->counters().dropped_trainers, 0);

  // Later steps need only the two that are left.
  ASSERT_TRUE(PushW0(0, 1, {1, 1, 1, 1}).ok());
  ASSERT_TRUE(PushW0(1, 1, {3, 3, 3, 3}).ok());
  EXPECT_EQ(W0Version(), 2);
  EXPECT_EQ(W0(), (std::vector<float>{-4, -1, 0, 0}));
}

TEST_F(StoreMembershipTest, RejoinWithNewIncarnation) {
  Init(SYNC, 3);
  RegisterAll(3);
  ASSERT_TRUE(PushW0(0, 0, {3, 3, 3, 3}).ok());
  ASSERT_TRUE(PushW0(1, 0, {3, 0, 0, 6}).ok());
  ASSERT_TRUE(PushW0(2, 0, {0, 3, 0, 3}).ok());
  ASSERT_EQ(W0Version(), 1);
  ASSERT_EQ(W0(), (std::vector<float>{-1, 0, 2, 0}));
  // Step 1: trainer 2 dies before pushing.
  ASSERT_TRUE(PushW0(0, 1, {1, 1, 1, 1}).ok());
  ASSERT_TRUE(PushW0(1, 1, {3, 3, 3, 3}).ok());
  auto pull = StartPull(0, 2, 2, {{0, 0}});
  EXPECT_FALSE(pull->done.HasBeenNotified());

  // Its restart registers with a new incarnation: it is expected from the
  // step after the newest held (2), so step 1 completes without it.
  auto r = store_->Register(2, kInc + 1, t0_ + absl::Seconds(1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->job_ready);
  EXPECT_EQ(r->join_step, 2);
  EXPECT_EQ(r->generation, 0u);
  EXPECT_EQ(store_->counters().rejoined_trainers, 1);
  EXPECT_EQ(store_->counters().dropped_trainers, 0);
  EXPECT_EQ(store_->LiveTrainers(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(W0Version(), 2);
  EXPECT_EQ(W0(), (std::vector<float>{-3, -2, 0, -2}));
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_TRUE(pull->status.ok()) << pull->status;

  // The old incarnation is told it was replaced; the new one is fine.
  absl::Status s = store_->Heartbeat(2, kInc, t0_ + absl::Seconds(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("replaced"), std::string::npos) << s;
  ASSERT_TRUE(store_->Heartbeat(2, kInc + 1, t0_ + absl::Seconds(2)).ok());
  // Only the incarnation that registered can confirm.
  EXPECT_EQ(store_->ConfirmJoin(2, kInc, 3).code(),
            absl::StatusCode::kFailedPrecondition);

  // Another pserver was further ahead: the job's start step is 3. A lower
  // one does not move it back.
  ASSERT_TRUE(store_->ConfirmJoin(2, kInc + 1, 3).ok());
  ASSERT_TRUE(store_->ConfirmJoin(2, kInc + 1, 1).ok());
  ASSERT_TRUE(PushW0(0, 2, {2, 2, 2, 2}).ok());
  ASSERT_TRUE(PushW0(1, 2, {0, 0, 0, 0}).ok());
  EXPECT_EQ(W0Version(), 3);  // step 2 went on without trainer 2
  EXPECT_EQ(W0(), (std::vector<float>{-4, -3, -1, -3}));
  ASSERT_TRUE(PushW0(0, 3, {3, 3, 3, 3}).ok());
  ASSERT_TRUE(PushW0(1, 3, {3, 3, 3, 3}).ok());
  EXPECT_EQ(W0Version(), 3);  // step 3 waits for it
  ASSERT_TRUE(PushW0(2, 3, {0, 0, 0, 0}).ok());
  EXPECT_EQ(W0Version(), 4);
  EXPECT_EQ(W0(), (std::vector<float>{-6, -5, -3, -5}));
  EXPECT_EQ(store_->counters().rejoined_trainers, 1);
}

TEST_F(StoreMembershipTest, ReplicasToAggregateAppliesAfterKPushes) {
  Init(SYNC, 3, /*replicas_to_aggregate=*/2);
  ASSERT_TRUE(PushW0(0, 0, {2, 2, 2, 2}).ok());
  EXPECT_EQ(W0Version(), 0);
  ASSERT_TRUE(PushW0(1, 0, {4, 0, 0, 2}).ok());
  EXPECT_EQ(W0Version(), 1);
  EXPECT_EQ(W0(), (std::vector<float>{-2, 1, 2, 2}));

  // The third trainer's push of the applied step is OK but dropped; the
  // other block of the same push is still at step 0 and takes it.
  std::vector<float> big = {100, 100, 100, 100}, g1 = {2, 4, 6, 8};
  std::vector<BlockData> d = {{0, 0, big}, {0, 1, g1}};
  int late = -1;
  ASSERT_TRUE(store_->Push(2, 0, d, kAnyGeneration, &late).ok());
  EXPECT_EQ(late, 1);
  EXPECT_EQ(store_->counters().late_block_pushes, 1);
  EXPECT_EQ(W0(), (std::vector<float>{-2, 1, 2, 2}));
  EXPECT_EQ(W0Version(), 1);
  EXPECT_EQ(store_->TEST_BlockVersion(0, 1), 0);
  // The second push of block (0, 1) completes it with the mean of the two.
  std::vector<float> g2 = {0, 0, 2, 2};
  std::vector<BlockData> d2 = {{0, 1, g2}};
  late = -1;
  ASSERT_TRUE(store_->Push(0, 0, d2, kAnyGeneration, &late).ok());
  EXPECT_EQ(late, 0);
  EXPECT_EQ(store_->TEST_BlockVersion(0, 1), 1);
  EXPECT_EQ(store_->TEST_BlockValues(0, 1), (std::vector<float>{4, 4, 3, 3}));
  EXPECT_EQ(store_->counters().late_block_pushes, 1);

  // A late push with nothing else changes nothing either.
  late = -1;
  ASSERT_TRUE(PushW0(2, 0, {9, 9, 9, 9}, &late).ok());
  EXPECT_EQ(late, 1);
  EXPECT_EQ(store_->counters().late_block_pushes, 2);
  EXPECT_EQ(W0(), (std::vector<float>{-2, 1, 2, 2}));
  // A push for a future step is still refused.
  EXPECT_EQ(PushW0(2, 5, {1, 1, 1, 1}).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(StoreMembershipTest, InitJobChecksReplicasToAggregate) {
  {
    ParameterStore store{StoreOptions{}};
    auto r = store.InitJob(MakeJob(SYNC, 3, 4), kBlocks);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    r = store.InitJob(MakeJob(ASYNC, 3, 2), kBlocks);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    r = store.InitJob(MakeJob(SYNC, 3, -1), kBlocks);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    // Nothing was set up by the refusals: a good spec is accepted.
    r = store.InitJob(MakeJob(SYNC, 3, 3), kBlocks);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(*r);
  }
  ParameterStore async_store{StoreOptions{}};
  EXPECT_TRUE(async_store.InitJob(MakeJob(ASYNC, 3, 0), kBlocks).ok());
}

TEST_F(StoreMembershipTest,
       AsyncStalenessPullReleasedWhenSlowTrainerIsDropped) {
  Init(ASYNC, 2, 0, /*max_staleness=*/0);
  RegisterAll(2);
  ASSERT_TRUE(PushW0(0, 0, {1, 1, 1, 1}).ok());
  // Trainer 0 is one step ahead of trainer 1 (clock 0): its pull waits.
  auto pull = StartPull(0, 0, 1, {{0, 0}});
  EXPECT_FALSE(pull->done.HasBeenNotified());
  ASSERT_TRUE(store_->Heartbeat(0, kInc, t0_ + absl::Seconds(50)).ok());
  store_->Sweep(t0_ + absl::Seconds(59));
  EXPECT_FALSE(pull->done.HasBeenNotified());
  store_->Sweep(t0_ + absl::Seconds(61));
  EXPECT_EQ(store_->counters().dropped_trainers, 1);
  EXPECT_EQ(store_->LiveTrainers(), (std::vector<int>{0}));
  ASSERT_TRUE(pull->done.HasBeenNotified());
  ASSERT_TRUE(pull->status.ok()) << pull->status;
  ASSERT_EQ(pull->values.size(), 1u);
  EXPECT_EQ(pull->values[0], (std::vector<float>{0, 1, 2, 3}));
  // Later pulls of trainer 0 do not wait for the dropped one either.
  ASSERT_TRUE(PushW0(0, 1, {1, 1, 1, 1}).ok());
  auto next = StartPull(0, 0, 2, {{0, 0}});
  ASSERT_TRUE(next->done.HasBeenNotified());
  EXPECT_TRUE(next->status.ok()) << next->status;
}

TEST_F(StoreMembershipTest, AsyncStalenessPullReleasedWhenSlowTrainerLeaves) {
  Init(ASYNC, 2, 0, /*max_staleness=*/0);
  RegisterAll(2);
  ASSERT_TRUE(PushW0(0, 0, {1, 1, 1, 1}).ok());
  auto pull = StartPull(0, 0, 1, {{0, 0}});
  EXPECT_FALSE(pull->done.HasBeenNotified());
  ASSERT_TRUE(store_->Leave(1, kInc).ok());
  ASSERT_TRUE(pull->done.HasBeenNotified());
  ASSERT_TRUE(pull->status.ok()) << pull->status;
  EXPECT_EQ(store_->LiveTrainers(), (std::vector<int>{0}));
  EXPECT_EQ(store_->counters().dropped_trainers, 0);
}

}  // namespace
}  // namespace shardps
