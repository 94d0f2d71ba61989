// LARS (You et al. 2017) against a reference: the paper's Algorithm 1 over
// the whole table in double precision, written here independently of the
// optimizer's kernel, with the table cut into blocks as pservers hold it.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "optimizer/optimizer.h"

namespace shardps {
namespace {

OptimizerConfig Lars(float lr, float mu, float eta, float wd) {
  OptimizerConfig c;
  c.set_type(OptimizerConfig::LARS);
  c.set_learning_rate(lr);
  c.set_momentum(mu);
  c.set_trust_coefficient(eta);
  c.set_weight_decay(wd);
  return c;
}

// One step of Algorithm 1 on the whole table: local_lr = eta * |w| /
// (|g| + wd * |w|); v = mu * v + lr * local_lr * (g + wd * w); w -= v.
void ReferenceStep(double lr, double mu, double eta, double wd,
                   const std::vector<double>& g, std::vector<double>* w,
                   std::vector<double>* v) {
  double ww = 0, gg = 0;
  for (size_t i = 0; i < w->size(); ++i) {
    ww += (*w)[i] * (*w)[i];
    gg += g[i] * g[i];
  }
  const double wn = std::sqrt(ww), gn = std::sqrt(gg);
  const double local = wn > 0 && gn > 0 ? eta * wn / (gn + wd * wn) : 1.0;
  for (size_t i = 0; i < w->size(); ++i) {
    (*v)[i] = mu * (*v)[i] + lr * local * (g[i] + wd * (*w)[i]);
    (*w)[i] -= (*v)[i];
  }
}

TEST(LarsTest, BlocksWithSummedNormsMatchTheWholeTableReference) {
  const float lr = 2.0f, mu = 0.9f, eta = 0.01f, wd = 5e-4f;
  auto opt = Optimizer::Create(Lars(lr, mu, eta, wd), 1);
  ASSERT_TRUE(opt.ok()) << opt.status();
  ASSERT_TRUE((*opt)->needs_table_norms());
  ASSERT_EQ((*opt)->num_slots(), 1);
  // 1,000 values in blocks of 384, 384 and 232, as --block_size would cut
  // them; the gradient is a sum of two trainers' times 1/2.
  const std::vector<size_t> starts = {0, 384, 768, 1000};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> w(1000), v(1000, 0);
  for (float& x : w) x = 0.05f * normal(rng);
  std::vector<double> ref_w(w.begin(), w.end()), ref_v(1000, 0);
  for (int step = 0; step < 20; ++step) {
    std::vector<float> sum(1000);
    for (float& x : sum) x = 0.02f * normal(rng);
    std::vector<double> mean(1000);
    for (size_t i = 0; i < 1000; ++i) mean[i] = sum[i] * 0.5f;
    ReferenceStep(lr, mu, eta, wd, mean, &ref_w, &ref_v);
    // Each block's squared sums; they meet in block order.
    Optimizer::SquaredNorms total;
    for (size_t b = 0; b + 1 < starts.size(); ++b) {
      const size_t n = starts[b + 1] - starts[b];
      Optimizer::SquaredNorms part = Optimizer::Partials(
          0.5f, absl::MakeConstSpan(sum).subspan(starts[b], n),
          absl::MakeConstSpan(w).subspan(starts[b], n));
      total.weights += part.weights;
      total.gradient += part.gradient;
    }
    const float ratio =
        (*opt)->TrustRatio(std::sqrt(total.weights), std::sqrt(total.gradient));
    for (size_t b = 0; b + 1 < starts.size(); ++b) {
      const size_t n = starts[b + 1] - starts[b];
      absl::Span<float> slot = absl::MakeSpan(v).subspan(starts[b], n);
      (*opt)->Apply(step, step, 0.5f,
                    absl::MakeConstSpan(sum).subspan(starts[b], n),
                    absl::MakeSpan(w).subspan(starts[b], n),
                    absl::MakeConstSpan(&slot, 1), ratio);
    }
    double err = 0, scale = 0;
    for (size_t i = 0; i < 1000; ++i) {
      err = std::max(err, std::fabs(w[i] - ref_w[i]));
      scale = std::max(scale, std::fabs(ref_w[i]));
    }
    ASSERT_LT(err, 1e-5 * scale) << "step " << step;
  }
  // The trust ratio did its work: the reference moved the weights.
  EXPECT_GT(std::fabs(ref_w[0] - w[0]) + std::fabs(ref_v[0]), 0);
}

TEST(LarsTest, RatioIsOneWhenANormIsZeroAndFollowsTheFormula) {
  auto opt = *Optimizer::Create(Lars(0.1f, 0.9f, 0.001f, 0.01f), 1);
  EXPECT_EQ(opt->TrustRatio(0, 3), 1.0f);
  EXPECT_EQ(opt->TrustRatio(3, 0), 1.0f);
  EXPECT_FLOAT_EQ(opt->TrustRatio(10, 2), 0.001f * 10 / (2 + 0.01f * 10));
  // Past float's range (a denormal gradient norm, or a client's made-up
  // norms): capped, never an overflowed cast.
  auto plain = *Optimizer::Create(Lars(0.1f, 0.9f, 0.001f, 0), 1);
  EXPECT_EQ(plain->TrustRatio(1e300, 1e-300),
            std::numeric_limits<float>::max());
  EXPECT_EQ(plain->TrustRatio(1.0, 1e-45), std::numeric_limits<float>::max());
}

TEST(LarsTest, DefaultsAndRefusals) {
  OptimizerConfig c = Lars(0.1f, 0.9f, 0, 0);
  auto opt = Optimizer::Create(c, 1);
  ASSERT_TRUE(opt.ok());
  EXPECT_FLOAT_EQ((*opt)->config().trust_coefficient(), 0.001f);
  for (OptimizerConfig bad :
       {Lars(0.1f, 1.0f, 0.001f, 0), Lars(0.1f, 0.9f, -1, 0),
        Lars(0.1f, 0.9f, 0.001f, -0.1f), Lars(0.1f, 0.9f, NAN, 0)}) {
    EXPECT_EQ(Optimizer::Create(bad, 1).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad.ShortDebugString();
  }
  c.set_nesterov(true);
  EXPECT_EQ(Optimizer::Create(c, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Other optimizers need no table norms.
  c = Lars(0.1f, 0.9f, 0.001f, 0);
  c.set_type(OptimizerConfig::MOMENTUM);
  EXPECT_FALSE((*Optimizer::Create(c, 1))->needs_table_norms());
}

}  // namespace
}  // namespace shardps
