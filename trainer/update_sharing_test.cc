// Update sharing for threshold compression: which optimizers it takes,
// what the pservers then apply, the trainer-side momentum, and momentum
// masking.
#include "trainer/update_sharing.h"

#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

OptimizerConfig Momentum(float lr, float mu, bool nesterov = false) {
  OptimizerConfig o;
  o.set_type(OptimizerConfig::MOMENTUM);
  o.set_learning_rate(lr);
  o.set_momentum(mu);
  o.set_nesterov(nesterov);
  return o;
}

TEST(UpdateSharingTest, TakesSgdAndMomentumWithConstantRatesOnly) {
  OptimizerConfig adam;
  adam.set_type(OptimizerConfig::ADAM);
  adam.set_learning_rate(0.1f);
  std::vector<OptimizerConfig> opts = {Momentum(0.1f, 0.9f), adam};
  auto s = UpdateSharing::Create({"w", "b"}, &opts, {2, 2}, true);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("table b needs an SGD or MOMENTUM"),
            std::string::npos)
      << s.status();
  OptimizerConfig warmup = Momentum(0.1f, 0.9f);
  warmup.mutable_schedule()->set_type(LrSchedule::WARMUP);
  opts = {warmup};
  EXPECT_FALSE(UpdateSharing::Create({"w"}, &opts, {2}, true).ok());

  opts = {Momentum(0.1f, 0.9f)};
  ASSERT_TRUE(UpdateSharing::Create({"w"}, &opts, {2}, true).ok());
  // The pservers add the mean update: SGD at rate 1.
  EXPECT_EQ(opts[0].type(), OptimizerConfig::SGD);
  EXPECT_EQ(opts[0].learning_rate(), 1.0f);
}

TEST(UpdateSharingTest, MomentumAndNesterovOnTheTrainer) {
  std::vector<OptimizerConfig> opts = {Momentum(0.5f, 0.5f),
                                       Momentum(0.5f, 0.5f, true)};
  auto s = UpdateSharing::Create({"a", "b"}, &opts, {1, 1}, false);
  ASSERT_TRUE(s.ok()) << s.status();
  const float g = 2.0f;
  (*s)->ComputeUpdates({&g, &g});
  // v = 2: u = 0.5 * 2 = 1; Nesterov u = 0.5 * (2 + 0.5 * 2) = 1.5.
  EXPECT_EQ((*s)->updates()[0][0], 1.0f);
  EXPECT_EQ((*s)->updates()[1][0], 1.5f);
  (*s)->ComputeUpdates({&g, &g});
  // v = 0.5 * 2 + 2 = 3: u = 1.5; Nesterov u = 0.5 * (2 + 1.5) = 1.75.
  EXPECT_EQ((*s)->updates()[0][0], 1.5f);
  EXPECT_EQ((*s)->updates()[1][0], 1.75f);
  (*s)->Reset();
  (*s)->ComputeUpdates({&g, &g});
  EXPECT_EQ((*s)->updates()[0][0], 1.0f);
}

TEST(UpdateSharingTest, MaskingZeroesTheVelocityOfSentValues) {
  for (bool masking : {true, false}) {
    std::vector<OptimizerConfig> opts = {Momentum(1.0f, 0.5f)};
    auto s = UpdateSharing::Create({"w"}, &opts, {2}, masking);
    ASSERT_TRUE(s.ok()) << s.status();
    const std::vector<float> g = {4.0f, 0.001f};
    (*s)->ComputeUpdates({g.data()});
    ThresholdPushEncoder::Options eo;
    eo.adaptive = false;
    eo.threshold = 1.0;
    ThresholdPushEncoder encoder(eo, {2});
    std::string msg;
    ASSERT_TRUE(
        encoder
            .Encode(0, 0, 0, absl::MakeConstSpan((*s)->updates()[0], 2), &msg)
            .ok());
    EXPECT_EQ(encoder.sent_mask(0), (std::vector<uint8_t>{1, 0}));
    (*s)->MaskSent(encoder);
    (*s)->ComputeUpdates({g.data()});
    // Value 0 was sent: its velocity restarts (masking) or goes on.
    EXPECT_EQ((*s)->updates()[0][0], masking ? 4.0f : 6.0f) << masking;
    EXPECT_FLOAT_EQ((*s)->updates()[0][1], 0.0015f);
  }
}

}  // namespace
}  // namespace shardps
