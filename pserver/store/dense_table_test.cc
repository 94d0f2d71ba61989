// One dense block alone: initial values and optimizer state, the mean of a
// sync step, async updates, and a restore that forgets the step.
#include "pserver/store/dense_table.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

std::unique_ptr<Optimizer> Make(const OptimizerConfig& c) {
  return std::move(*Optimizer::Create(c, 1));
}

// Two trainers' random gradients of one sync step into `b`, which then
// completes the step (ApplyStep).
std::optional<AppliedUpdate> PushRandomStep(DenseTableBlock& b,
                                            std::mt19937& rng,
                                            std::vector<WaiterPtr>* ready)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
  std::normal_distribution<float> noise;
  const size_t n = b.value.size();
  std::vector<float> g0(n), g1(n);
  for (size_t i = 0; i < n; ++i) {
    g0[i] = noise(rng);
    g1[i] = noise(rng);
  }
  b.Accumulate(PushPayload{g0, {}, 1}, true);
  b.Accumulate(PushPayload{g1, {}, 1}, false);
  b.barrier.Receive(0, 1);
  b.barrier.Receive(1, 1);
  PushPayload last{g1, {}, 1};
  return b.ApplyStep(&last, ready);
}

TEST(DenseTableBlockTest, SyncStepAppliesTheMeanOfTheTrainers) {
  Membership m(2, true);
  auto sgd = Make(testing::Sgd(1.0f));
  DenseTableBlock b(0, 3, 2, "w", sgd.get(), &m, 0);
  EXPECT_EQ(b.name(), "table w block 3");
  std::vector<WaiterPtr> ready;
  absl::MutexLock l(&b.mu);
  b.SetInitialValue(std::vector<float>{1, 1});
  const std::vector<float> g0 = {2, 4}, g1 = {4, 0};
  b.Accumulate(PushPayload{g0, {}, 1}, /*first=*/true);
  b.Accumulate(PushPayload{g1, {}, 1}, false);
  b.barrier.Receive(0, 1);
  b.barrier.Receive(1, 1);
  PushPayload last{g1, {}, 1};
  b.ApplyStep(&last, &ready);
  EXPECT_EQ(b.value, (std::vector<float>{-2, -1}));
  EXPECT_EQ(b.barrier.version(), 1);
}

TEST(DenseTableBlockTest, OneTrainerAppliesItsPushAsItIs) {
  Membership m(1, true);
  auto sgd = Make(testing::Sgd(0.5f));
  DenseTableBlock b(0, 0, 2, "w", sgd.get(), &m, 0);
  std::vector<WaiterPtr> ready;
  absl::MutexLock l(&b.mu);
  b.SetInitialValue(std::vector<float>{1, 1});
  const std::vector<float> g = {2, -2};
  PushPayload p{g, {}, 1};
  b.Accumulate(p, true);
  b.barrier.Receive(0, 1);
  b.ApplyStep(&p, &ready);
  EXPECT_EQ(b.value, (std::vector<float>{0, 2}));
}

// A sink that throws (a pull's reply that cannot grow) leaves the block
// unlocked, replicated or not: the next read and push go ahead.
TEST(DenseTableBlockTest, AReadWhoseSinkThrowsLeavesTheBlockUnlocked) {
  for (bool replicated : {false, true}) {
    Membership m(1, true);
    auto sgd = Make(testing::Sgd(1.0f));
    DenseTableBlock b(0, 0, 2, "w", sgd.get(), &m, 0);
    if (replicated) b.set_replicated();
    {
      absl::MutexLock l(&b.mu);
      b.SetInitialValue(std::vector<float>{1, 1});
    }
    PullTarget t;
    t.unit = &b;
    EXPECT_THROW(
        b.Read(t, [](uint32_t, uint32_t, int64_t,
                     absl::Span<const float>) { throw std::bad_alloc(); }),
        std::bad_alloc);
    if (b.mu.TryLock()) {
      b.mu.Unlock();
    } else {
      ADD_FAILURE() << "the block stayed locked; replicated: " << replicated;
    }
    std::vector<float> got;
    b.Read(t, [&](uint32_t, uint32_t, int64_t, absl::Span<const float> v) {
      got.assign(v.begin(), v.end());
    });
    EXPECT_EQ(got, (std::vector<float>{1, 1}));
  }
}

TEST(DenseTableBlockTest, AsyncUpdatesAndStateSurviveARestore) {
  Membership m(2, false);
  auto momentum = Make(testing::Momentum(1.0f, 0.5f));
  DenseTableBlock b(1, 0, 1, "b", momentum.get(), &m, 0);
  absl::MutexLock l(&b.mu);
  b.SetInitialValue(std::vector<float>{0});
  ASSERT_EQ(b.slots.size(), 1u);  // the velocity
  const std::vector<float> g = {1};
  b.ApplyNow(0, PushPayload{g, {}, 1});
  b.ApplyNow(1, PushPayload{g, {}, 1});
  EXPECT_EQ(b.value, (std::vector<float>{-2.5f}));  // v = 1, then 1.5
  EXPECT_EQ(b.barrier.version(), 2);
  std::vector<WaiterPtr> dropped;
  b.Restore(9, {3}, {{0.5f}}, &dropped);
  EXPECT_EQ(b.barrier.version(), 9);
  b.ApplyNow(9, PushPayload{g, {}, 1});
  EXPECT_EQ(b.value, (std::vector<float>{1.75f}));  // v = 1.25
}

// Two trainers' sync steps on a primary block; each applied update goes to
// a backup block, which must end with the same values and Adam state, to
// the last bit.
TEST(DenseTableBlockTest, ABackupApplyingTheUpdatesHoldsTheSameBits) {
  Membership m(2, true);
  auto adam = Make(testing::Adam(0.01f));
  DenseTableBlock primary(0, 1, 5, "w", adam.get(), &m, 0);
  DenseTableBlock backup(0, 1, 5, "w", adam.get(), &m, 0);
  std::vector<AppliedUpdate> sent;
  std::vector<WaiterPtr> ready;
  absl::MutexLock lp(&primary.mu);
  absl::MutexLock lb(&backup.mu);
  const std::vector<float> init = {0.1f, -0.2f, 0.3f, 0.7f, -1.0f};
  primary.SetInitialValue(init);
  backup.SetInitialValue(init);
  primary.set_replicated();
  std::mt19937 rng(5);
  for (int step = 0; step < 30; ++step) {
    std::optional<AppliedUpdate> u = PushRandomStep(primary, rng, &ready);
    ASSERT_TRUE(u.has_value());
    sent.push_back(std::move(*u));
  }
  // Then async-style pushes, applied as they are.
  for (int k = 0; k < 5; ++k) {
    const std::vector<float> g(5, 0.25f * k);
    std::optional<AppliedUpdate> u =
        primary.ApplyNow(30 + k, PushPayload{g, {}, 1});
    ASSERT_TRUE(u.has_value());
    sent.push_back(std::move(*u));
  }
  ASSERT_EQ(sent.size(), 35u);
  EXPECT_EQ(sent[3].version, 3);
  EXPECT_EQ(sent[3].scales, (std::vector<float>{0.5f}));
  EXPECT_TRUE(sent[3].sync);
  EXPECT_FALSE(sent[34].sync);
  for (const AppliedUpdate& u : sent) {
    ASSERT_TRUE(backup.ApplyReplicated(u, &ready).ok());
  }
  EXPECT_EQ(backup.barrier.version(), primary.barrier.version());
  ASSERT_EQ(backup.value.size(), primary.value.size());
  EXPECT_EQ(std::memcmp(backup.value.data(), primary.value.data(),
                        primary.value.size() * sizeof(float)),
            0);
  ASSERT_EQ(backup.slots.size(), primary.slots.size());
  for (size_t s = 0; s < primary.slots.size(); ++s) {
    EXPECT_EQ(std::memcmp(backup.slots[s].data(), primary.slots[s].data(),
                          primary.slots[s].size() * sizeof(float)),
              0)
        << "slot " << s;
  }
  EXPECT_NE(primary.value, init) << "nothing was applied: the test is void";
}

// A replicated block's update is in flight from its apply step until the
// caller settles it (it has reached the backups): a pull's read and the
// next push's locks wait for it, so that no pull sees an update a backup
// may not hold and the backups get the block's updates in order.
TEST(DenseTableBlockTest, AReplicatedBlockHoldsPullsAndPushesUntilSettled) {
  Membership m(1, false);
  auto sgd = Make(testing::Sgd(1.0f));
  DenseTableBlock b(0, 0, 2, "w", sgd.get(), &m, 0);
  b.set_replicated();
  std::optional<AppliedUpdate> u;
  {
    absl::MutexLock l(&b.mu);
    b.SetInitialValue({1.0f, 1.0f});
    EXPECT_TRUE(b.settled());
    u = b.ApplyNow(0, PushPayload{{0.5f, 0.5f}, {}, 1});
    ASSERT_TRUE(u.has_value());
    EXPECT_EQ(u->version, 0);
    EXPECT_FALSE(b.settled());
  }
  std::atomic<bool> read{false}, locked{false};
  std::vector<float> seen;
  std::thread puller([&] {
    PullTarget t;
    t.unit = &b;
    b.Read(t, [&](uint32_t, uint32_t, int64_t, absl::Span<const float> v) {
      seen.assign(v.begin(), v.end());
    });
    read = true;
  });
  std::thread pusher([&] {
    BarrierUnit* unit = &b;
    UnitLocks l(absl::MakeConstSpan(&unit, 1));
    locked = true;
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(read) << "a pull read an update still in flight";
  EXPECT_FALSE(locked) << "a push took a block whose update is in flight";
  b.Settle();
  puller.join();
  pusher.join();
  EXPECT_TRUE(read);
  EXPECT_TRUE(locked);
  EXPECT_EQ(seen, (std::vector<float>{0.5f, 0.5f}));
  // A block not replicated returns nothing to forward and never waits.
  DenseTableBlock plain(0, 1, 2, "w", sgd.get(), &m, 0);
  absl::MutexLock l(&plain.mu);
  plain.SetInitialValue({1.0f, 1.0f});
  EXPECT_FALSE(plain.ApplyNow(0, PushPayload{{0.5f, 0.5f}, {}, 1}).has_value());
  EXPECT_TRUE(plain.settled());
}

// LARS with replication: the primary's steps wait for their trust ratio;
// the updates it forwards carry the ratio, so the backup ends with the same
// bits, and keep the step's norms, so that the backup, once primary,
// answers a norms pull and a late ratio of a step it applied.
class LarsReplicationTest : public ::testing::Test {
 protected:
  static OptimizerConfig LarsConfig() {
    OptimizerConfig c;
    c.set_type(OptimizerConfig::LARS);
    c.set_learning_rate(0.5f);
    c.set_momentum(0.9f);
    c.set_trust_coefficient(0.02f);
    return c;
  }

  // Both blocks start at init_; the primary is replicated.
  LarsReplicationTest() {
    {
      absl::MutexLock lp(&primary_.mu);
      absl::MutexLock lb(&backup_.mu);
      primary_.SetInitialValue(init_);
      backup_.SetInitialValue(init_);
    }
    primary_.set_replicated();
  }

  // Assembles `step` on the primary, applies its ratio there and forwards
  // the update to the backup, checking what each refuses on the way.
  void AssembleAndForwardStep(int step) {
    absl::MutexLock lp(&primary_.mu);
    absl::MutexLock lb(&backup_.mu);
    // Assembled, not applied: nothing to forward yet.
    EXPECT_FALSE(PushRandomStep(primary_, rng_, &ready_).has_value());
    ASSERT_EQ(primary_.barrier.version(), step);
    // A ratio where the step's pushes have not all come: refused.
    absl::Status early = backup_.CanApplyTrust(step).status();
    EXPECT_TRUE(absl::IsFailedPrecondition(early));
    EXPECT_NE(early.message().find("not assembled yet"), std::string::npos)
        << early;
    ASSERT_TRUE(*primary_.CanApplyTrust(step));
    const float ratio = 0.5f + 0.1f * static_cast<float>(step);
    std::optional<AppliedUpdate> u = primary_.ApplyTrust(step, ratio, &ready_);
    ASSERT_TRUE(u.has_value());
    sent_.push_back(std::move(*u));
    EXPECT_EQ(sent_.back().trust_ratio, ratio);
    ASSERT_TRUE(backup_.ApplyReplicated(sent_.back(), &ready_).ok());
    EXPECT_TRUE(*backup_.NormsReady(step));
    // A ratio of a step the backup applied changes nothing.
    ASSERT_TRUE(*backup_.CanApplyTrust(step));
    const std::vector<float> before = backup_.value;
    EXPECT_FALSE(backup_.ApplyTrust(step, 100.0f, &ready_).has_value());
    EXPECT_EQ(backup_.value, before);
  }

  // The backup answers `step`'s norms with the primary's bits.
  void ExpectSameNorms(int step) {
    double p_norms[3], b_norms[3];
    PullTarget pt;
    pt.norms_out = p_norms;
    primary_.Read(pt, nullptr);
    pt.norms_out = b_norms;
    backup_.Read(pt, nullptr);
    EXPECT_EQ(std::memcmp(p_norms, b_norms, sizeof(p_norms)), 0) << step;
    EXPECT_EQ(b_norms[2], step);
  }

  Membership m_{2, true};
  std::unique_ptr<Optimizer> lars_ = Make(LarsConfig());
  DenseTableBlock primary_{0, 0, 4, "w", lars_.get(), &m_, 0};
  DenseTableBlock backup_{0, 0, 4, "w", lars_.get(), &m_, 0};
  std::vector<AppliedUpdate> sent_;
  std::vector<WaiterPtr> ready_;
  const std::vector<float> init_ = {1, -2, 3, 4};
  std::mt19937 rng_{7};
};

TEST_F(LarsReplicationTest, ABackupOfALarsBlockTakesTheRatioAndKeepsTheNorms) {
  for (int step = 0; step < 10; ++step) {
    ASSERT_NO_FATAL_FAILURE(AssembleAndForwardStep(step));
    primary_.Settle();  // the backup holds it: pulls may read it
    ExpectSameNorms(step);
  }
  absl::MutexLock lp(&primary_.mu);
  absl::MutexLock lb(&backup_.mu);
  EXPECT_EQ(backup_.barrier.version(), 10);
  EXPECT_EQ(std::memcmp(backup_.value.data(), primary_.value.data(),
                        primary_.value.size() * sizeof(float)),
            0);
  EXPECT_NE(primary_.value, init_);
}

// A ratio on a block without LARS is refused.
TEST_F(LarsReplicationTest, ALarsUpdateOnABlockWithoutLarsIsRefused) {
  ASSERT_NO_FATAL_FAILURE(AssembleAndForwardStep(0));
  auto sgd = Make(testing::Sgd(1.0f));
  DenseTableBlock plain(0, 0, 4, "w", sgd.get(), &m_, 0);
  absl::MutexLock l(&plain.mu);
  plain.SetInitialValue(init_);
  EXPECT_TRUE(
      absl::IsInvalidArgument(plain.ApplyReplicated(sent_[0], &ready_)));
}

TEST(DenseTableBlockTest, AReplicatedUpdateMustFollowTheVersion) {
  Membership m(1, true);
  auto sgd = Make(testing::Sgd(1.0f));
  DenseTableBlock b(2, 0, 2, "w", sgd.get(), &m, 0);
  std::vector<WaiterPtr> ready;
  absl::MutexLock l(&b.mu);
  b.SetInitialValue(std::vector<float>{1, 1});
  AppliedUpdate u;
  u.table_id = 2;
  u.scales = {1.0f};
  u.grad = {1, 1};
  ASSERT_TRUE(b.ApplyReplicated(u, &ready).ok());
  // The same update again, and one that skips a version: refused.
  EXPECT_TRUE(absl::IsFailedPrecondition(b.ApplyReplicated(u, &ready)));
  u.version = 2;
  EXPECT_TRUE(absl::IsFailedPrecondition(b.ApplyReplicated(u, &ready)));
  u.version = 1;
  u.grad = {1, 1, 1};
  EXPECT_TRUE(absl::IsInvalidArgument(b.ApplyReplicated(u, &ready)));
  u.grad = {1, 1};
  u.scales = {1.0f, 1.0f};
  EXPECT_TRUE(absl::IsInvalidArgument(b.ApplyReplicated(u, &ready)));
  u.scales = {1.0f};
  u.block = 3;
  EXPECT_TRUE(absl::IsInvalidArgument(b.ApplyReplicated(u, &ready)));
  EXPECT_EQ(b.value, (std::vector<float>{0, 0}));
  EXPECT_EQ(b.barrier.version(), 1);
}

}  // namespace
}  // namespace shardps
