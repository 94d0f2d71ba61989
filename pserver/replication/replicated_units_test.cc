// ParameterStore with a forwarder (docs/replication.md): what a primary
// forwards and refuses, and what a backup takes.
#include "pserver/replication/replicated_units.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pserver/store/parameter_store.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

// Serves blocks whose index is below `served`; records what it forwards.
class FakeForwarder : public UpdateForwarder {
 public:
  absl::Status CheckServes(uint32_t, uint32_t unit) const override {
    if (unit < served) return absl::OkStatus();
    return absl::FailedPreconditionError("is not the primary of shard 9");
  }
  absl::Status Forward(const std::vector<AppliedUpdate>& updates,
                       const std::vector<PushRef>& pushes) override {
    if (hold != nullptr) {  // a backup slow to answer
      entered.Notify();
      hold->WaitForNotification();
    }
    absl::MutexLock l(&mu);
    for (const AppliedUpdate& u : updates) forwarded.push_back(u);
    for (const PushRef& p : pushes) refs.push_back(p);
    return status;
  }
  std::atomic<uint32_t> served{2};
  absl::Status status;
  // With `hold`, Forward says it has begun and waits for it.
  absl::Notification* hold = nullptr;
  absl::Notification entered;
  absl::Mutex mu;
  std::vector<AppliedUpdate> forwarded;
  std::vector<PushRef> refs;
};

// Table "w": 8 values in blocks of 4, on a store of `trainers` of a job
// with 2 copies; SGD lr 1 unless `optimizer` says otherwise.
std::unique_ptr<ParameterStore> MakeStore(
    TrainingMode mode, int trainers, UpdateForwarder* f,
    const OptimizerConfig& optimizer = testing::Sgd(1.0f)) {
  auto store = std::make_unique<ParameterStore>(StoreOptions());
  JobSpec job = testing::MakeJobSpec(
      mode, trainers, {testing::DenseTableSpec("w", 8, 4, optimizer)},
      testing::JobOptions());
  job.set_replication(2);
  CHECK(store->InitJob(job, {{0, 0}, {0, 1}}).ok());
  if (f != nullptr) ReplicatedUnits(store->state()).SetForwarder(f);
  std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  CHECK(store->SetInitialValues({{0, 0, a}, {0, 1, b}}).ok());
  CHECK(store->CommitInit().ok());
  return store;
}

TEST(ParameterStoreReplicationTest, SyncStepsAreForwardedOnceApplied) {
  FakeForwarder f;
  auto store = MakeStore(SYNC, 2, &f);
  std::vector<float> g = {1, 1, 1, 1};
  ASSERT_TRUE(store->Push(0, 0, {{0, 0, g}}, kAnyGeneration, nullptr, 11).ok());
  EXPECT_TRUE(f.forwarded.empty());  // the step waits for trainer 1
  ASSERT_TRUE(store->Push(1, 0, {{0, 0, g}}, kAnyGeneration, nullptr, 12).ok());
  ASSERT_EQ(f.forwarded.size(), 1u);
  EXPECT_EQ(f.forwarded[0].version, 0);
  EXPECT_TRUE(f.forwarded[0].sync);
  EXPECT_FLOAT_EQ(f.forwarded[0].scales[0], 0.5f);  // the mean of two
  ASSERT_EQ(f.refs.size(), 1u);
  EXPECT_EQ(f.refs[0].request_id, 12u);
  // Trainer 0 pushes step 0 again (a failover): a duplicate, not refused.
  ASSERT_TRUE(store->Push(0, 0, {{0, 0, g}}).ok());
  EXPECT_EQ(store->counters().duplicate_block_pushes, 1);
  EXPECT_EQ(f.forwarded.size(), 1u);
}

TEST(ParameterStoreReplicationTest, UnitsServedElsewhereAreRefused) {
  FakeForwarder f;
  f.served = 1;  // block 1 has another primary
  auto store = MakeStore(ASYNC, 1, &f);
  std::vector<float> g = {1, 1, 1, 1};
  absl::Status s = store->Push(0, 0, {{0, 0, g}, {0, 1, g}});
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("is not the primary"));
  EXPECT_TRUE(f.forwarded.empty());
  EXPECT_EQ(store->TEST_BlockVersion(0, 0), 0);  // all or nothing
  testing::PullArgs a;
  auto pull = testing::StartPull(store.get(), a, {{0, 1}});
  ASSERT_TRUE(pull->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(absl::IsFailedPrecondition(pull->status)) << pull->status;
  // An async push is forwarded before it is answered; an error of the
  // forward (a newer view) is the push's.
  f.status = absl::FailedPreconditionError("fenced");
  EXPECT_TRUE(absl::IsFailedPrecondition(store->Push(0, 0, {{0, 0, g}})));
  EXPECT_EQ(f.forwarded.size(), 1u);
}

// The update is forwarded after the units' locks are released: while a
// backup has not answered, what does not read the block goes on (the
// store's versions), and a pull of the block waits until the backup holds
// the update, then reads it.
TEST(ParameterStoreReplicationTest, APullWaitsUntilTheBackupsHoldTheUpdate) {
  FakeForwarder f;
  absl::Notification hold;
  f.hold = &hold;
  auto store = MakeStore(ASYNC, 1, &f);
  std::vector<float> g = {1, 1, 1, 1};
  absl::Status pushed;
  std::thread pusher([&] { pushed = store->Push(0, 0, {{0, 0, g}}); });
  ASSERT_TRUE(f.entered.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(store->Versions().max, 1);  // no unit lock is held
  // The pull is answered on the thread that starts it (nothing holds it
  // but the block in flight).
  testing::PullArgs a;
  std::unique_ptr<testing::PullResult> pull;
  absl::Notification pulled;
  std::thread puller([&] {
    pull = testing::StartPull(store.get(), a, {{0, 0}});
    pull->done.WaitForNotification();
    pulled.Notify();
  });
  EXPECT_FALSE(pulled.WaitForNotificationWithTimeout(absl::Milliseconds(200)))
      << "a pull read an update no backup holds yet";
  hold.Notify();
  pusher.join();
  ASSERT_TRUE(pushed.ok()) << pushed;
  ASSERT_TRUE(pulled.WaitForNotificationWithTimeout(absl::Seconds(5)));
  puller.join();
  ASSERT_TRUE(pull->status.ok()) << pull->status;
  EXPECT_EQ(pull->values[0], (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(f.forwarded.size(), 1u);
}

// A forward that fails (this pserver fenced, or the view moved the shard
// while the update was in flight): the pull that waited for it read the
// new version, and is refused after the read, not answered with it.
TEST(ParameterStoreReplicationTest, APullIsCheckedAgainAfterItsRead) {
  FakeForwarder f;
  absl::Notification hold;
  f.hold = &hold;
  auto store = MakeStore(ASYNC, 1, &f);
  std::vector<float> g = {1, 1, 1, 1};
  absl::Status pushed;
  std::thread pusher([&] { pushed = store->Push(0, 0, {{0, 0, g}}); });
  ASSERT_TRUE(f.entered.WaitForNotificationWithTimeout(absl::Seconds(5)));
  testing::PullArgs a;
  std::unique_ptr<testing::PullResult> pull;
  absl::Notification pulled;
  std::thread puller([&] {
    pull = testing::StartPull(store.get(), a, {{0, 0}});
    pull->done.WaitForNotification();
    pulled.Notify();
  });
  EXPECT_FALSE(pulled.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  f.served = 0;  // fenced before the forward returns
  f.status = absl::UnavailableError("pserver 0 is fenced");
  hold.Notify();
  pusher.join();
  EXPECT_TRUE(absl::IsUnavailable(pushed)) << pushed;
  ASSERT_TRUE(pulled.WaitForNotificationWithTimeout(absl::Seconds(5)));
  puller.join();
  EXPECT_TRUE(absl::IsFailedPrecondition(pull->status)) << pull->status;
}

// A pull waiting for a step on a pserver that stops serving the unit (a
// newer view learned, or the fence) is answered at once, refused, rather
// than after --max_pull_wait_s: the trainer sends it to the new primary.
TEST(ParameterStoreReplicationTest, WaitingPullsAreRefusedOnceTheUnitMoves) {
  FakeForwarder f;
  auto store = MakeStore(SYNC, 2, &f);
  std::vector<float> g = {1, 1, 1, 1};
  ASSERT_TRUE(store->Push(0, 0, {{0, 0, g}}).ok());
  testing::PullArgs a;
  a.min_version = 1;  // waits for trainer 1's push of step 0
  auto pull = testing::StartPull(store.get(), a, {{0, 0}});
  EXPECT_FALSE(
      pull->done.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  store->state()->waiters.RecheckServes();  // still served: still waits
  EXPECT_FALSE(pull->done.HasBeenNotified());
  f.served = 0;
  store->state()->waiters.RecheckServes();
  ASSERT_TRUE(pull->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(absl::IsFailedPrecondition(pull->status)) << pull->status;
  EXPECT_THAT(pull->status.message(), HasSubstr("is not the primary"));
}

// A step this pserver half assembled as the primary, before a failover
// moved the unit: the trainer missing from it pushed it to the new primary,
// and is not dropped for stalling here (found as a job ended under 10%
// packet loss: the old primary, rejoining, dropped the chief a minute on).
TEST(ParameterStoreReplicationTest,
     AStepHalfAssembledBeforeAFailoverDropsNoOne) {
  FakeForwarder f;
  auto store = MakeStore(SYNC, 2, &f);
  const absl::Time t0 = absl::Now();
  for (int k = 0; k < 2; ++k) ASSERT_TRUE(store->Register(k, 1, t0).ok());
  std::vector<float> g = {1, 1, 1, 1};
  ASSERT_TRUE(store->Push(1, 0, {{0, 0, g}}).ok());  // trainer 0's is lost
  f.served = 0;  // block 0's shard failed over to another primary
  const absl::Time later = t0 + absl::Minutes(2);  // the timeout is 60 s
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(store->Heartbeat(k, 1, later).ok());
  }
  store->Sweep(later);
  EXPECT_EQ(store->counters().dropped_trainers, 0);
  EXPECT_EQ(store->LiveTrainers(), (std::vector<int>{0, 1}));
  // Still its primary, the same wait is a stall: trainer 0 is dropped.
  f.served = 2;
  store->Sweep(later);
  EXPECT_EQ(store->counters().dropped_trainers, 1);
  EXPECT_EQ(store->LiveTrainers(), (std::vector<int>{1}));
}

TEST(ParameterStoreReplicationTest, ABackupHoldsWhatItsPrimaryApplied) {
  FakeForwarder f;
  auto primary = MakeStore(SYNC, 1, &f);
  auto backup = MakeStore(SYNC, 1, nullptr);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> g = {0.5f * step, -1, 2, 0.25f};
    ASSERT_TRUE(primary->Push(0, step, {{0, 0, g}}).ok());
  }
  ASSERT_EQ(f.forwarded.size(), 3u);
  // Sent twice (a forward retried after a view change): taken once.
  ASSERT_TRUE(ReplicatedUnits(backup->state()).Apply(f.forwarded).ok());
  ASSERT_TRUE(ReplicatedUnits(backup->state()).Apply(f.forwarded).ok());
  EXPECT_EQ(backup->TEST_BlockValues(0, 0), primary->TEST_BlockValues(0, 0));
  EXPECT_EQ(backup->TEST_BlockVersion(0, 0), 3);
  // A gap is refused.
  AppliedUpdate gap = f.forwarded[0];
  gap.version = 5;
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ReplicatedUnits(backup->state()).Apply({gap})));
}

// LARS in a replicated job: the primary's ApplyTrust forwards the steps it
// applies, with the ratio, before answering; the backup holds the same
// bits, and once primary it answers the step's norms and takes the late
// norms of a trainer as a no-op.
TEST(ParameterStoreReplicationTest, LarsStepsGoToTheBackupWithTheirRatio) {
  OptimizerConfig lars;
  lars.set_type(OptimizerConfig::LARS);
  lars.set_learning_rate(0.5f);
  lars.set_momentum(0.9f);
  lars.set_trust_coefficient(0.02f);
  FakeForwarder f;
  auto primary = MakeStore(SYNC, 1, &f, lars);
  auto backup = MakeStore(SYNC, 1, nullptr, lars);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> g = {0.5f * step, -1, 2, 0.25f};
    ASSERT_TRUE(primary->Push(0, step, {{0, 0, g}, {0, 1, g}}).ok());
    EXPECT_EQ(f.forwarded.size(), 2u * step);  // waits for the ratio
    ASSERT_TRUE(primary->trust().Apply(0, step, 0, 3.0 + step, 1.5).ok());
    ASSERT_EQ(f.forwarded.size(), 2u * step + 2);
    EXPECT_NE(f.forwarded.back().trust_ratio, 1.0f);
  }
  ASSERT_TRUE(ReplicatedUnits(backup->state()).Apply(f.forwarded).ok());
  for (uint32_t b = 0; b < 2; ++b) {
    EXPECT_EQ(backup->TEST_BlockValues(0, b), primary->TEST_BlockValues(0, b));
    EXPECT_EQ(backup->TEST_BlockVersion(0, b), 3);
  }
  // The backup as primary: the last step's norms, and its norms again.
  std::vector<double> out(6);
  absl::Notification pulled;
  absl::Status pull_status;
  const std::vector<BlockId> blocks = {{0, 0}, {0, 1}};
  backup->PullNorms(0, 2, blocks, out.data(),
                    [&](absl::Status st, absl::Duration) {
                      pull_status = std::move(st);
                      pulled.Notify();
                    });
  ASSERT_TRUE(pulled.WaitForNotificationWithTimeout(absl::Seconds(5)));
  ASSERT_TRUE(pull_status.ok()) << pull_status;
  EXPECT_EQ(out[2], 2);
  EXPECT_GT(out[0], 0);
  const std::vector<float> before = backup->TEST_BlockValues(0, 0);
  ASSERT_TRUE(backup->trust().Apply(0, 2, 0, 5.0, 1.5).ok());
  EXPECT_EQ(backup->TEST_BlockValues(0, 0), before);
  // A forward the backups refuse (a newer view) fails the ratio's push.
  f.status = absl::FailedPreconditionError("is not the primary of shard 0");
  std::vector<float> g = {1, 1, 1, 1};
  ASSERT_TRUE(primary->Push(0, 3, {{0, 0, g}, {0, 1, g}}).ok());
  EXPECT_TRUE(
      absl::IsFailedPrecondition(primary->trust().Apply(0, 3, 0, 3.0, 1.5)));
}

// A pserver holds the blocks of the shards it backs up too: a replicated
// trainer's norms name the blocks they are for, and only those move.
TEST(ParameterStoreReplicationTest, LarsNormsNameTheirBlocks) {
  OptimizerConfig lars;
  lars.set_type(OptimizerConfig::LARS);
  lars.set_learning_rate(0.5f);
  lars.set_trust_coefficient(0.02f);
  FakeForwarder f;
  f.served = 1;  // block 1 is backed up here, served elsewhere
  auto store = MakeStore(SYNC, 1, &f, lars);
  const std::vector<float> b = {5, 6, 7, 8};
  std::vector<float> g = {1, 1, 1, 1};
  ASSERT_TRUE(store->Push(0, 0, {{0, 0, g}}).ok());
  using TableNorm = TrustStep::TableNorm;
  // Every block of the table held here: block 1 is not served.
  std::vector<TableNorm> all = {{0, 3.0, 1.5, {}}};
  absl::Status s = store->trust().Apply(0, 0, all);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  std::vector<TableNorm> twice = {{0, 3.0, 1.5, {0, 0}}};
  EXPECT_TRUE(absl::IsInvalidArgument(store->trust().Apply(0, 0, twice)));
  std::vector<TableNorm> unknown = {{0, 3.0, 1.5, {7}}};
  EXPECT_TRUE(absl::IsNotFound(store->trust().Apply(0, 0, unknown)));
  EXPECT_EQ(store->TEST_BlockVersion(0, 0), 0);
  std::vector<TableNorm> mine = {{0, 3.0, 1.5, {0}}};
  ASSERT_TRUE(store->trust().Apply(0, 0, mine).ok());
  EXPECT_EQ(store->TEST_BlockVersion(0, 0), 1);
  EXPECT_EQ(store->TEST_BlockValues(0, 1), b);
  ASSERT_EQ(f.forwarded.size(), 1u);
  EXPECT_EQ(f.forwarded[0].block, 0u);
}

}  // namespace
}  // namespace shardps
