#include "kernels/optimizer_cpu.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(OptimizerCpuTest, SgdScalesGradient) {
  std::vector<float> p = {1, 2, 3};
  std::vector<float> g = {2, 4, -6};
  ApplySgd<CpuDevice>()(0.5f, 0.5f, g, absl::MakeSpan(p));
  EXPECT_FLOAT_EQ(p[0], 0.5f);
  EXPECT_FLOAT_EQ(p[1], 1.0f);
  EXPECT_FLOAT_EQ(p[2], 4.5f);
}

TEST(OptimizerCpuTest, MomentumMatchesPyTorchForm) {
  // v = 0.9v + g; p -= 0.1v, two steps with g = 1.
  std::vector<float> p = {0}, v = {0}, g = {1};
  ApplyMomentum<CpuDevice> apply;
  apply(0.1f, 0.9f, false, 1.0f, g, absl::MakeSpan(p), absl::MakeSpan(v));
  EXPECT_FLOAT_EQ(v[0], 1.0f);
  EXPECT_FLOAT_EQ(p[0], -0.1f);
  apply(0.1f, 0.9f, false, 1.0f, g, absl::MakeSpan(p), absl::MakeSpan(v));
  EXPECT_FLOAT_EQ(v[0], 1.9f);
  EXPECT_FLOAT_EQ(p[0], -0.29f);
}

TEST(OptimizerCpuTest, NesterovLooksAhead) {
  std::vector<float> p = {0}, v = {0}, g = {1};
  ApplyMomentum<CpuDevice>()(0.1f, 0.9f, true, 1.0f, g, absl::MakeSpan(p),
                             absl::MakeSpan(v));
  // v = 1; p -= 0.1 * (1 + 0.9 * 1).
  EXPECT_FLOAT_EQ(v[0], 1.0f);
  EXPECT_FLOAT_EQ(p[0], -0.19f);
}

TEST(OptimizerCpuTest, AdagradAccumulatesSquares) {
  std::vector<float> p = {0}, acc = {0.1f}, g = {2};
  ApplyAdagrad<CpuDevice>()(1.0f, 0.0f, 1.0f, g, absl::MakeSpan(p),
                            absl::MakeSpan(acc));
  EXPECT_FLOAT_EQ(acc[0], 4.1f);
  EXPECT_FLOAT_EQ(p[0], -2.0f / std::sqrt(4.1f));
}

TEST(OptimizerCpuTest, AdamFirstStepMovesByLearningRate) {
  // With bias correction, Adam's first step is lr * sign(g) (eps = 0).
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f;
  const float lr_t = lr * std::sqrt(1 - b2) / (1 - b1);
  std::vector<float> p = {1, 1}, m = {0, 0}, v = {0, 0}, g = {3, -0.5f};
  ApplyAdam<CpuDevice>()(lr_t, b1, b2, 0.0f, 1.0f, g, absl::MakeSpan(p),
                         absl::MakeSpan(m), absl::MakeSpan(v));
  EXPECT_NEAR(p[0], 1 - lr, 1e-6);
  EXPECT_NEAR(p[1], 1 + lr, 1e-6);
}

}  // namespace
}  // namespace shardps
