#include "optimizer/optimizer.h"

#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

OptimizerConfig Momentum(float lr, float mu) {
  OptimizerConfig c;
  c.set_type(OptimizerConfig::MOMENTUM);
  c.set_learning_rate(lr);
  c.set_momentum(mu);
  return c;
}

TEST(LearningRateScheduleTest, Constant) {
  auto s = LearningRateSchedule::Create(Momentum(0.05f, 0.9f), 128);
  ASSERT_TRUE(s.ok());
  EXPECT_FLOAT_EQ(s->At(0), 0.05f);
  EXPECT_FLOAT_EQ(s->At(100000), 0.05f);
}

TEST(LearningRateScheduleTest, StepDecay) {
  OptimizerConfig c = Momentum(1.0f, 0.9f);
  c.mutable_schedule()->set_type(LrSchedule::STEP);
  c.mutable_schedule()->set_step_size(10);
  c.mutable_schedule()->set_gamma(0.5f);
  auto s = LearningRateSchedule::Create(c, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_FLOAT_EQ(s->At(9), 1.0f);
  EXPECT_FLOAT_EQ(s->At(10), 0.5f);
  EXPECT_FLOAT_EQ(s->At(25), 0.25f);
}

TEST(LearningRateScheduleTest, WarmupWithLinearScalingRule) {
  // Goyal et al.: lr 0.1 for batch 256; global batch 1024 ramps from 0.1 to
  // 0.4 over the warm-up.
  OptimizerConfig c = Momentum(0.1f, 0.9f);
  c.mutable_schedule()->set_type(LrSchedule::WARMUP);
  c.mutable_schedule()->set_warmup_steps(100);
  c.mutable_schedule()->set_reference_batch_size(256);
  auto s = LearningRateSchedule::Create(c, 1024);
  ASSERT_TRUE(s.ok());
  EXPECT_FLOAT_EQ(s->At(0), 0.1f);
  EXPECT_FLOAT_EQ(s->At(50), 0.25f);
  EXPECT_FLOAT_EQ(s->At(100), 0.4f);
  EXPECT_FLOAT_EQ(s->At(1000), 0.4f);
}

TEST(OptimizerTest, RejectsBadConfigs) {
  OptimizerConfig c = Momentum(-1.0f, 0.9f);
  EXPECT_EQ(Optimizer::Create(c, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  c = Momentum(0.1f, 1.5f);
  EXPECT_EQ(Optimizer::Create(c, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  c = Momentum(0.1f, 0.5f);
  c.mutable_schedule()->set_type(LrSchedule::STEP);
  EXPECT_EQ(Optimizer::Create(c, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The audit's learning rates: NaN, infinite, and 3e38 (finite, and it drove
// parameters to -inf in three steps of in-bound gradients).
TEST(OptimizerTest, RejectsLearningRatesThatAreNotSane) {
  for (float lr : {std::numeric_limits<float>::quiet_NaN(),
                   std::numeric_limits<float>::infinity(), 3e38f, 1.5e4f}) {
    absl::Status s = Optimizer::Create(Momentum(lr, 0.9f), 1).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << lr;
    EXPECT_NE(s.message().find("learning_rate must be in (0, 10000]"),
              std::string::npos)
        << s;
  }
  EXPECT_TRUE(Optimizer::Create(Momentum(kMaxLearningRate, 0.9f), 1).ok());
  // Within the bound, but not once the linear scaling rule has scaled it.
  OptimizerConfig c = Momentum(100.0f, 0.9f);
  c.mutable_schedule()->set_type(LrSchedule::WARMUP);
  c.mutable_schedule()->set_reference_batch_size(1);
  EXPECT_TRUE(Optimizer::Create(c, 100).ok());
  absl::Status s = Optimizer::Create(c, 1000).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("at most 10000"), std::string::npos) << s;
}

TEST(OptimizerTest, SlotsPerType) {
  OptimizerConfig c;
  c.set_learning_rate(0.1f);
  c.set_type(OptimizerConfig::SGD);
  EXPECT_EQ((*Optimizer::Create(c, 1))->num_slots(), 0);
  c.set_type(OptimizerConfig::ADAGRAD);
  auto adagrad = *Optimizer::Create(c, 1);
  EXPECT_EQ(adagrad->num_slots(), 1);
  EXPECT_FLOAT_EQ(adagrad->initial_slot_value(), 0.1f);
  c.set_type(OptimizerConfig::ADAM);
  EXPECT_EQ((*Optimizer::Create(c, 1))->num_slots(), 2);
}

TEST(OptimizerTest, AdamBiasCorrectionUsesUpdateCount) {
  OptimizerConfig c;
  c.set_type(OptimizerConfig::ADAM);
  c.set_learning_rate(0.01f);
  c.set_epsilon(1e-12f);
  auto opt = *Optimizer::Create(c, 1);
  std::vector<float> p = {0}, m = {0}, v = {0}, g = {5};
  std::vector<absl::Span<float>> slots = {absl::MakeSpan(m), absl::MakeSpan(v)};
  opt->Apply(0, 0, 1.0f, g, absl::MakeSpan(p), slots);
  EXPECT_NEAR(p[0], -0.01f, 1e-6);
  opt->Apply(1, 1, 1.0f, g, absl::MakeSpan(p), slots);
  EXPECT_NEAR(p[0], -0.02f, 1e-6);  // constant gradient: lr per step
}

}  // namespace
}  // namespace shardps
