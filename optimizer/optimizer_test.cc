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

// An infinite initial accumulator would start Adagrad's state non-finite.
TEST(OptimizerTest, RejectsInitialAccumulatorsThatAreNotSane) {
  OptimizerConfig c;
  c.set_type(OptimizerConfig::ADAGRAD);
  c.set_learning_rate(0.1f);
  for (float a : {-1.0f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), 3e38f, 2e6f}) {
    c.set_initial_accumulator(a);
    const absl::Status s = Optimizer::Create(c, 1).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << a;
    EXPECT_NE(s.message().find("initial_accumulator must be in [0, 1e+06]"),
              std::string::npos)
        << s;
  }
  c.set_initial_accumulator(1e6f);
  EXPECT_TRUE(Optimizer::Create(c, 1).ok());
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

// Every type, with a learning rate of `lr`.
std::vector<OptimizerConfig> EveryType(float lr) {
  std::vector<OptimizerConfig> out;
  for (OptimizerConfig::Type t :
       {OptimizerConfig::SGD, OptimizerConfig::MOMENTUM,
        OptimizerConfig::ADAGRAD, OptimizerConfig::ADAM, OptimizerConfig::FTRL,
        OptimizerConfig::LARS}) {
    OptimizerConfig c;
    c.set_type(t);
    c.set_learning_rate(lr);
    if (t == OptimizerConfig::MOMENTUM || t == OptimizerConfig::LARS) {
      c.set_momentum(0.9f);
    }
    out.push_back(c);
    if (t == OptimizerConfig::MOMENTUM) {
      c.set_nesterov(true);
      out.push_back(c);
    }
  }
  return out;
}

// A value and its optimizer's state, `n` elements each.
struct Params {
  Params(const Optimizer& opt, size_t n) : value(n) {
    for (size_t i = 0; i < n; ++i) value[i] = 0.01f * static_cast<float>(i % 7);
    state.assign(opt.num_slots(),
                 std::vector<float>(n, opt.initial_slot_value()));
  }
  std::vector<absl::Span<float>> slots() {
    std::vector<absl::Span<float>> out;
    for (auto& s : state) out.push_back(absl::MakeSpan(s));
    return out;
  }
  bool operator==(const Params& o) const {
    return value == o.value && state == o.state;
  }
  std::vector<float> value;
  std::vector<std::vector<float>> state;
};

TEST(OptimizerTest, ApplyIfFiniteEqualsApplyWhenTheResultIsFinite) {
  constexpr size_t kN = 5000;  // past two chunks
  std::vector<float> g(kN);
  for (size_t i = 0; i < kN; ++i) g[i] = 0.5f - 0.001f * i;
  for (const OptimizerConfig& c : EveryType(0.1f)) {
    auto opt = *Optimizer::Create(c, 1);
    Params a(*opt, kN), b(*opt, kN);
    for (int step = 0; step < 3; ++step) {
      opt->Apply(step, step, 0.5f, g, absl::MakeSpan(a.value), a.slots(), 0.7f);
      ASSERT_TRUE(opt->ApplyIfFinite(step, step, 0.5f, g,
                                     absl::MakeSpan(b.value), b.slots(), 0.7f))
          << c.ShortDebugString();
    }
    EXPECT_TRUE(a == b) << c.ShortDebugString();
  }
}

TEST(OptimizerTest, ApplyIfFiniteChangesNothingWhenAnElementWouldOverflow) {
  constexpr size_t kN = 5000;
  const float kHuge = 3e38f;  // in bounds for a push; times lr, infinite
  for (size_t bad : {size_t{0}, size_t{2047}, size_t{2048}, kN - 1}) {
    std::vector<float> g(kN, 0.25f);
    g[bad] = kHuge;
    for (const OptimizerConfig& c : EveryType(100.0f)) {
      auto opt = *Optimizer::Create(c, 1);
      Params p(*opt, kN);
      opt->Apply(0, 0, 1.0f, std::vector<float>(kN, 0.1f),
                 absl::MakeSpan(p.value), p.slots());
      const Params before = p;
      EXPECT_FALSE(
          opt->ApplyIfFinite(1, 1, 1.0f, g, absl::MakeSpan(p.value), p.slots()))
          << c.ShortDebugString() << " bad element " << bad;
      EXPECT_TRUE(p == before) << c.ShortDebugString() << " bad " << bad;
    }
  }
}

TEST(OptimizerTest, ApplyIfFiniteRefusesAScaleThatIsNotFinite) {
  auto sgd = *Optimizer::Create(EveryType(0.1f)[0], 1);
  Params q(*sgd, 10);
  const Params before = q;
  EXPECT_FALSE(sgd->ApplyIfFinite(0, 0, std::numeric_limits<float>::infinity(),
                                  std::vector<float>(10, 1.0f),
                                  absl::MakeSpan(q.value), q.slots()));
  EXPECT_TRUE(q == before);
}

TEST(OptimizerTest, ApplyIfFiniteChecksAdamWhoseRatioCanGrow) {
  // beta1^2 >= beta2: m / sqrt(v) can grow from step to step, so even
  // small gradients take the checked path; it still equals Apply.
  OptimizerConfig c;
  c.set_type(OptimizerConfig::ADAM);
  c.set_learning_rate(0.1f);
  c.set_beta1(0.99f);
  c.set_beta2(0.5f);
  auto opt = *Optimizer::Create(c, 1);
  Params a(*opt, 3000), b(*opt, 3000);
  std::vector<float> g(3000, 0.01f);
  for (int step = 0; step < 3; ++step) {
    opt->Apply(step, step, 1.0f, g, absl::MakeSpan(a.value), a.slots());
    ASSERT_TRUE(opt->ApplyIfFinite(step, step, 1.0f, g, absl::MakeSpan(b.value),
                                   b.slots()));
  }
  EXPECT_TRUE(a == b);
}

}  // namespace
}  // namespace shardps
