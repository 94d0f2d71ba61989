// One dense block alone: initial values and optimizer state, the mean of a
// sync step, async updates, and a restore that forgets the step.
#include "pserver/store/dense_table.h"

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

std::unique_ptr<Optimizer> Make(const OptimizerConfig& c) {
  return std::move(*Optimizer::Create(c, 1));
}

// Two trainers' random gradients of one sync step into `b`, which then
// completes the step (ApplyStep).
void PushRandomStep(DenseTableBlock& b, std::mt19937& rng,
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
  b.ApplyStep(&last, ready);
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
  primary.set_update_sink(
      [&](AppliedUpdate u) { sent.push_back(std::move(u)); });
  std::mt19937 rng(5);
  for (int step = 0; step < 30; ++step) PushRandomStep(primary, rng, &ready);
  // Then async-style pushes, applied as they are.
  for (int k = 0; k < 5; ++k) {
    const std::vector<float> g(5, 0.25f * k);
    primary.ApplyNow(30 + k, PushPayload{g, {}, 1});
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

// LARS with replication: the primary's steps wait for their trust ratio;
// the updates it forwards carry the ratio, so the backup ends with the same
// bits, and keep the step's norms, so that the backup, once primary,
// answers a norms pull and a late ratio of a step it applied.
TEST(DenseTableBlockTest, ABackupOfALarsBlockTakesTheRatioAndKeepsTheNorms) {
  Membership m(2, true);
  OptimizerConfig c;
  c.set_type(OptimizerConfig::LARS);
  c.set_learning_rate(0.5f);
  c.set_momentum(0.9f);
  c.set_trust_coefficient(0.02f);
  auto lars = Make(c);
  DenseTableBlock primary(0, 0, 4, "w", lars.get(), &m, 0);
  DenseTableBlock backup(0, 0, 4, "w", lars.get(), &m, 0);
  std::vector<AppliedUpdate> sent;
  std::vector<WaiterPtr> ready;
  const std::vector<float> init = {1, -2, 3, 4};
  {
    absl::MutexLock lp(&primary.mu);
    absl::MutexLock lb(&backup.mu);
    primary.SetInitialValue(init);
    backup.SetInitialValue(init);
    primary.set_update_sink(
        [&](AppliedUpdate u) { sent.push_back(std::move(u)); });
  }
  std::mt19937 rng(7);
  for (int step = 0; step < 10; ++step) {
    {
      absl::MutexLock lp(&primary.mu);
      absl::MutexLock lb(&backup.mu);
      PushRandomStep(primary, rng, &ready);  // assembled, not applied
      ASSERT_EQ(primary.barrier.version(), step);
      // A ratio where the step's pushes have not all come: refused.
      absl::Status early = backup.CanApplyTrust(step).status();
      EXPECT_TRUE(absl::IsFailedPrecondition(early));
      EXPECT_NE(early.message().find("not assembled yet"), std::string::npos)
          << early;
      ASSERT_TRUE(*primary.CanApplyTrust(step));
      const float ratio = 0.5f + 0.1f * static_cast<float>(step);
      primary.ApplyTrust(step, ratio, &ready);
      ASSERT_EQ(sent.size(), static_cast<size_t>(step + 1));
      EXPECT_EQ(sent.back().trust_ratio, ratio);
      ASSERT_TRUE(backup.ApplyReplicated(sent.back(), &ready).ok());
      EXPECT_TRUE(*backup.NormsReady(step));
      // A ratio of a step the backup applied changes nothing.
      ASSERT_TRUE(*backup.CanApplyTrust(step));
      const std::vector<float> before = backup.value;
      backup.ApplyTrust(step, 100.0f, &ready);
      EXPECT_EQ(backup.value, before);
    }
    // The backup answers the step's norms with the primary's bits.
    double p_norms[3], b_norms[3];
    PullTarget pt;
    pt.norms_out = p_norms;
    primary.Read(pt, nullptr);
    pt.norms_out = b_norms;
    backup.Read(pt, nullptr);
    EXPECT_EQ(std::memcmp(p_norms, b_norms, sizeof(p_norms)), 0) << step;
    EXPECT_EQ(b_norms[2], step);
  }
  absl::MutexLock lp(&primary.mu);
  absl::MutexLock lb(&backup.mu);
  EXPECT_EQ(backup.barrier.version(), 10);
  EXPECT_EQ(std::memcmp(backup.value.data(), primary.value.data(),
                        primary.value.size() * sizeof(float)),
            0);
  EXPECT_NE(primary.value, init);
  // A ratio on a block without LARS is refused.
  auto sgd = Make(testing::Sgd(1.0f));
  DenseTableBlock plain(0, 0, 4, "w", sgd.get(), &m, 0);
  absl::MutexLock l(&plain.mu);
  plain.SetInitialValue(init);
  EXPECT_TRUE(absl::IsInvalidArgument(plain.ApplyReplicated(sent[0], &ready)));
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
