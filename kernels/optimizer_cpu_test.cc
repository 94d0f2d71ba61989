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

TEST(OptimizerCpuTest, FtrlMatchesTheClosedForm) {
  // One step from w = z = n = 0 with g = 2, alpha 0.5, beta 1, l1 0.1,
  // l2 0.2: n = 4; sigma = 2 / 0.5 = 4; z = 2 - 4 * 0 = 2;
  // w = -(2 - 0.1) / ((1 + 2) / 0.5 + 0.2) = -1.9 / 6.2.
  std::vector<float> p = {0}, z = {0}, n = {0}, g = {2};
  ApplyFtrl<CpuDevice>()(0.5f, 1.0f, 0.1f, 0.2f, 1.0f, g, absl::MakeSpan(p),
                         absl::MakeSpan(z), absl::MakeSpan(n));
  EXPECT_FLOAT_EQ(n[0], 4.0f);
  EXPECT_FLOAT_EQ(z[0], 2.0f);
  EXPECT_FLOAT_EQ(p[0], -1.9f / 6.2f);
}

TEST(OptimizerCpuTest, FtrlL1KeepsSmallWeightsAtZero) {
  std::vector<float> p = {0}, z = {0}, n = {0}, g = {0.05f};
  ApplyFtrl<CpuDevice>()(0.5f, 1.0f, 0.1f, 0.0f, 1.0f, g, absl::MakeSpan(p),
                         absl::MakeSpan(z), absl::MakeSpan(n));
  EXPECT_EQ(p[0], 0.0f);  // |z| = 0.05 <= l1: sparsity
}

}  // namespace
}  // namespace shardps
