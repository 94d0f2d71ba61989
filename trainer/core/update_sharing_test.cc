// Update sharing for threshold compression: which optimizers it takes,
// what the pservers then apply, the trainer-side momentum, and momentum
// masking.
#include "trainer/core/update_sharing.h"

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

TEST(UpdateSharingTest, TakesEveryOptimizerButFtrl) {
  OptimizerConfig ftrl;
  ftrl.set_type(OptimizerConfig::FTRL);
  ftrl.set_learning_rate(0.1f);
  std::vector<OptimizerConfig> opts = {Momentum(0.1f, 0.9f), ftrl};
  auto s = UpdateSharing::Create({"w", "b"}, &opts, {2, 2}, true, 64);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("table b has FTRL"), std::string::npos)
      << s.status();
  opts = {Momentum(0.1f, 1.5f)};
  s = UpdateSharing::Create({"w"}, &opts, {2}, true, 64);
  EXPECT_NE(s.status().message().find("table w: momentum must be in [0, 1)"),
            std::string::npos)
      << s.status();

  OptimizerConfig warmup = Momentum(0.1f, 0.9f);
  warmup.mutable_schedule()->set_type(LrSchedule::WARMUP);
  warmup.mutable_schedule()->set_warmup_steps(10);
  OptimizerConfig adam;
  adam.set_type(OptimizerConfig::ADAM);
  adam.set_learning_rate(0.1f);
  OptimizerConfig adagrad;
  adagrad.set_type(OptimizerConfig::ADAGRAD);
  adagrad.set_learning_rate(0.1f);
  opts = {warmup, adam, adagrad};
  ASSERT_TRUE(
      UpdateSharing::Create({"a", "b", "c"}, &opts, {2, 2, 2}, true, 64).ok());
  // The pservers add the mean update: SGD at rate 1.
  for (const OptimizerConfig& o : opts) {
    EXPECT_EQ(o.type(), OptimizerConfig::SGD);
    EXPECT_EQ(o.learning_rate(), 1.0f);
  }
}

// The update is what the pservers' own optimizer would subtract.
// --updates_threshold's default (0) per table: the values the sweeps of
// docs/tuning.md chose.
TEST(UpdateSharingTest, DefaultThresholdFollowsTheOptimizer) {
  EXPECT_EQ(UpdateSharing::DefaultThreshold(Momentum(0.05f, 0.9f)), 3e-2);
  for (auto type : {OptimizerConfig::SGD, OptimizerConfig::ADAM,
                    OptimizerConfig::ADAGRAD}) {
    OptimizerConfig o;
    o.set_type(type);
    EXPECT_EQ(UpdateSharing::DefaultThreshold(o), 1e-2)
        << OptimizerConfig::Type_Name(type);
  }
}

TEST(UpdateSharingTest, AdamAdagradAndSchedulesMatchThePserversOptimizer) {
  OptimizerConfig adam;
  adam.set_type(OptimizerConfig::ADAM);
  adam.set_learning_rate(0.01f);
  OptimizerConfig adagrad;
  adagrad.set_type(OptimizerConfig::ADAGRAD);
  adagrad.set_learning_rate(0.1f);
  OptimizerConfig warm = Momentum(0.1f, 0.9f);
  warm.mutable_schedule()->set_type(LrSchedule::WARMUP);
  warm.mutable_schedule()->set_warmup_steps(4);
  const std::vector<OptimizerConfig> configs = {adam, adagrad, warm};
  std::vector<OptimizerConfig> opts = configs;
  auto s = UpdateSharing::Create({"a", "b", "c"}, &opts, {3, 3, 3}, false, 64);
  ASSERT_TRUE(s.ok()) << s.status();
  struct Reference {
    std::unique_ptr<Optimizer> optimizer;
    std::vector<float> w = std::vector<float>(3, 0.5f);
    std::vector<std::vector<float>> slots;
  };
  std::vector<Reference> refs(configs.size());
  for (size_t t = 0; t < configs.size(); ++t) {
    auto o = Optimizer::Create(configs[t], 64);
    ASSERT_TRUE(o.ok());
    refs[t].optimizer = *std::move(o);
    refs[t].slots.assign(
        refs[t].optimizer->num_slots(),
        std::vector<float>(3, refs[t].optimizer->initial_slot_value()));
  }
  for (int64_t step = 0; step < 6; ++step) {
    const std::vector<float> g = {0.3f * (step + 1), -1.0f, 0.02f};
    (*s)->ComputeUpdates(step, {g.data(), g.data(), g.data()});
    for (size_t t = 0; t < configs.size(); ++t) {
      Reference& r = refs[t];
      std::vector<absl::Span<float>> spans;
      for (auto& x : r.slots) spans.push_back(absl::MakeSpan(x));
      const std::vector<float> before = r.w;
      r.optimizer->Apply(step, step, 1.0f, g, absl::MakeSpan(r.w), spans);
      for (int i = 0; i < 3; ++i) {
        // w - (w - u) rounds at w's scale.
        EXPECT_NEAR((*s)->updates()[t][i], before[i] - r.w[i], 2e-7)
            << "table " << t << " step " << step << " value " << i;
      }
    }
  }
}

TEST(UpdateSharingTest, MomentumAndNesterovOnTheTrainer) {
  std::vector<OptimizerConfig> opts = {Momentum(0.5f, 0.5f),
                                       Momentum(0.5f, 0.5f, true)};
  auto s = UpdateSharing::Create({"a", "b"}, &opts, {1, 1}, false, 64);
  ASSERT_TRUE(s.ok()) << s.status();
  const float g = 2.0f;
  (*s)->ComputeUpdates(0, {&g, &g});
  // v = 2: u = 0.5 * 2 = 1; Nesterov u = 0.5 * (2 + 0.5 * 2) = 1.5.
  EXPECT_EQ((*s)->updates()[0][0], 1.0f);
  EXPECT_EQ((*s)->updates()[1][0], 1.5f);
  (*s)->ComputeUpdates(0, {&g, &g});
  // v = 0.5 * 2 + 2 = 3: u = 1.5; Nesterov u = 0.5 * (2 + 1.5) = 1.75.
  EXPECT_EQ((*s)->updates()[0][0], 1.5f);
  EXPECT_EQ((*s)->updates()[1][0], 1.75f);
  (*s)->Reset();
  (*s)->ComputeUpdates(0, {&g, &g});
  EXPECT_EQ((*s)->updates()[0][0], 1.0f);
}

TEST(UpdateSharingTest, MaskingZeroesTheVelocityOfSentValues) {
  for (bool masking : {true, false}) {
    std::vector<OptimizerConfig> opts = {Momentum(1.0f, 0.5f)};
    auto s = UpdateSharing::Create({"w"}, &opts, {2}, masking, 64);
    ASSERT_TRUE(s.ok()) << s.status();
    const std::vector<float> g = {4.0f, 0.001f};
    (*s)->ComputeUpdates(0, {g.data()});
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
    (*s)->ComputeUpdates(0, {g.data()});
    // Value 0 was sent: its velocity restarts (masking) or goes on.
    EXPECT_EQ((*s)->updates()[0][0], masking ? 4.0f : 6.0f) << masking;
    EXPECT_FLOAT_EQ((*s)->updates()[0][1], 0.0015f);
  }
}

}  // namespace
}  // namespace shardps
