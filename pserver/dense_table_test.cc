// One dense block alone: initial values and optimizer state, the mean of a
// sync step, async updates, and a restore that forgets the step.
#include "pserver/dense_table.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

std::unique_ptr<Optimizer> Make(const OptimizerConfig& c) {
  return std::move(*Optimizer::Create(c, 1));
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

}  // namespace
}  // namespace shardps
