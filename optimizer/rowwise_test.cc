// Row-wise Adagrad and partial row-wise Adam against a reference written
// out in double precision (the computation a numpy reference makes), over
// many steps, to 1e-6; and their state widths and guards.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "optimizer/optimizer.h"

namespace shardps {
namespace {

std::unique_ptr<Optimizer> Make(OptimizerConfig::Type type, float lr) {
  OptimizerConfig c;
  c.set_type(type);
  c.set_learning_rate(lr);
  auto o = Optimizer::Create(c, 1);
  EXPECT_TRUE(o.ok()) << o.status();
  return std::move(*o);
}

std::vector<std::vector<float>> Gradients(int steps, int dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<std::vector<float>> g(steps, std::vector<float>(dim));
  for (auto& row : g) {
    for (float& x : row) x = n(rng);
  }
  return g;
}

TEST(RowwiseOptimizerTest, StateWidths) {
  auto ada = Make(OptimizerConfig::ROWWISE_ADAGRAD, 0.1f);
  EXPECT_TRUE(ada->rowwise());
  EXPECT_EQ(ada->num_slots(), 1);
  EXPECT_EQ(ada->SlotWidth(0, 16), 1);
  EXPECT_EQ(ada->StateFloats(16), 1);
  EXPECT_FLOAT_EQ(ada->initial_slot_value(), 0.1f);  // Adagrad's default
  auto adam = Make(OptimizerConfig::ROWWISE_ADAM, 0.1f);
  EXPECT_EQ(adam->SlotWidth(0, 16), 16);
  EXPECT_EQ(adam->SlotWidth(1, 16), 1);
  EXPECT_EQ(adam->StateFloats(16), 17);
  auto plain = Make(OptimizerConfig::ADAM, 0.1f);
  EXPECT_FALSE(plain->rowwise());
  EXPECT_EQ(plain->StateFloats(16), 32);
}

TEST(RowwiseOptimizerTest, AdagradMatchesTheReference) {
  constexpr int kDim = 16, kSteps = 200;
  const float lr = 0.05f, scale = 0.5f;
  auto opt = Make(OptimizerConfig::ROWWISE_ADAGRAD, lr);
  const double eps = opt->config().epsilon();
  std::vector<float> w(kDim, 0.3f), acc(1, opt->initial_slot_value());
  std::vector<double> rw(kDim, 0.3), racc = {opt->initial_slot_value()};
  const auto grads = Gradients(kSteps, kDim, 1);
  for (int t = 0; t < kSteps; ++t) {
    absl::Span<float> slots[] = {absl::MakeSpan(acc)};
    ASSERT_TRUE(
        opt->ApplyIfFinite(t, t, scale, grads[t], absl::MakeSpan(w), slots));
    double mean = 0;
    for (int i = 0; i < kDim; ++i) {
      mean += std::pow(double{grads[t][i]} * scale, 2) / kDim;
    }
    racc[0] += mean;
    for (int i = 0; i < kDim; ++i) {
      rw[i] -= lr * grads[t][i] * scale / (std::sqrt(racc[0]) + eps);
    }
  }
  EXPECT_NEAR(acc[0], racc[0], 1e-6 * racc[0]);
  for (int i = 0; i < kDim; ++i) EXPECT_NEAR(w[i], rw[i], 1e-6) << i;
}

TEST(RowwiseOptimizerTest, AdamMatchesTheReference) {
  constexpr int kDim = 16, kSteps = 200;
  const float lr = 0.01f, scale = 1.0f;
  auto opt = Make(OptimizerConfig::ROWWISE_ADAM, lr);
  const double b1 = opt->config().beta1(), b2 = opt->config().beta2(),
               eps = opt->config().epsilon();
  std::vector<float> w(kDim, -0.2f), m(kDim, 0.0f), v(1, 0.0f);
  std::vector<double> rw(kDim, -0.2), rm(kDim, 0.0);
  double rv = 0;
  const auto grads = Gradients(kSteps, kDim, 2);
  for (int t = 0; t < kSteps; ++t) {
    absl::Span<float> slots[] = {absl::MakeSpan(m), absl::MakeSpan(v)};
    ASSERT_TRUE(
        opt->ApplyIfFinite(t, t, scale, grads[t], absl::MakeSpan(w), slots));
    double mean = 0;
    for (int i = 0; i < kDim; ++i) mean += std::pow(grads[t][i], 2) / kDim;
    rv = b2 * rv + (1 - b2) * mean;
    const double lr_t =
        lr * std::sqrt(1 - std::pow(b2, t + 1)) / (1 - std::pow(b1, t + 1));
    for (int i = 0; i < kDim; ++i) {
      rm[i] = b1 * rm[i] + (1 - b1) * grads[t][i];
      rw[i] -= lr_t * rm[i] / (std::sqrt(rv) + eps);
    }
  }
  EXPECT_NEAR(v[0], rv, 1e-6);
  for (int i = 0; i < kDim; ++i) {
    EXPECT_NEAR(m[i], rm[i], 1e-6) << i;
    EXPECT_NEAR(w[i], rw[i], 1e-6) << i;
  }
}

TEST(RowwiseOptimizerTest, ANonFiniteUpdateLeavesTheRowAsItWas) {
  auto opt = Make(OptimizerConfig::ROWWISE_ADAM, 1.0f);
  std::vector<float> w = {1.0f, 2.0f}, m = {0.5f, 0.5f}, v = {0.25f};
  const std::vector<float> g = {3e38f, 3e38f};  // g^2 overflows float
  absl::Span<float> slots[] = {absl::MakeSpan(m), absl::MakeSpan(v)};
  EXPECT_FALSE(opt->ApplyIfFinite(0, 0, 10.0f, g, absl::MakeSpan(w), slots));
  EXPECT_EQ(w, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(m, (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(v, std::vector<float>{0.25f});
}

}  // namespace
}  // namespace shardps
