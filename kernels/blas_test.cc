#include "kernels/blas.h"

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/activation_functors.h"

namespace shardps {
namespace {

// Reference: C = alpha * op(A) op(B) + beta * C, accumulated in double.
void NaiveGemm(bool ta, bool tb, int m, int n, int k, float alpha,
               const std::vector<float>& a, int lda,
               const std::vector<float>& b, int ldb, float beta,
               std::vector<float>* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int p = 0; p < k; ++p) {
        const float av = ta ? a[p * lda + i] : a[i * lda + p];
        const float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        acc += static_cast<double>(av) * bv;
      }
      float& out = (*c)[i * ldc + j];
      out = static_cast<float>(alpha * acc + beta * out);
    }
  }
}

std::vector<float> RandomVector(size_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

class GemmTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(GemmTest, MatchesNaiveLoop) {
  const bool ta = std::get<0>(GetParam());
  const bool tb = std::get<1>(GetParam());
  std::mt19937 rng(42);
  const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {13, 17, 11}, {33, 9, 65}};
  for (const auto& s : shapes) {
    const int m = s[0], n = s[1], k = s[2];
    // Stored shapes, with padding on the leading dimension.
    const int a_rows = ta ? k : m, a_cols = ta ? m : k;
    const int b_rows = tb ? n : k, b_cols = tb ? k : n;
    const int lda = a_cols + 2, ldb = b_cols + 1, ldc = n + 3;
    const auto a = RandomVector(static_cast<size_t>(a_rows) * lda, &rng);
    const auto b = RandomVector(static_cast<size_t>(b_rows) * ldb, &rng);
    const auto c0 = RandomVector(static_cast<size_t>(m) * ldc, &rng);
    for (float beta : {0.0f, 1.0f, 0.5f}) {
      const float alpha = 1.5f;
      std::vector<float> want = c0, got = c0;
      NaiveGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, &want, ldc);
      Gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta,
           got.data(), ldc);
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < ldc; ++j) {
          const size_t idx = static_cast<size_t>(i) * ldc + j;
          if (j >= n) {
            // Padding beyond n columns is never written.
            EXPECT_EQ(got[idx], c0[idx]);
          } else {
            EXPECT_NEAR(got[idx], want[idx], 1e-4f * (1 + k))
                << "m=" << m << " n=" << n << " k=" << k << " i=" << i
                << " j=" << j << " beta=" << beta;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, GemmTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Bool()));

TEST(GemmTest, SingleThreadGivesSameResult) {
  SetBlasThreads(1);
  std::mt19937 rng(7);
  const int m = 64, n = 31, k = 50;
  const auto a = RandomVector(m * k, &rng);
  const auto b = RandomVector(k * n, &rng);
  std::vector<float> want(m * n, 0.0f), got(m * n, 0.0f);
  NaiveGemm(false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, &want, n);
  Gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, got.data(),
       n);
  for (int i = 0; i < m * n; ++i) EXPECT_NEAR(got[i], want[i], 1e-4f);
}

TEST(ActivationFunctorsTest, SigmoidAndLogisticAreStable) {
  EXPECT_FLOAT_EQ(SigmoidForward(0.0f), 0.5f);
  EXPECT_FLOAT_EQ(SigmoidForward(100.0f), 1.0f);
  EXPECT_NEAR(SigmoidForward(-100.0f), 0.0f, 1e-40f);
  EXPECT_GT(SigmoidForward(-100.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(LogSigmoid(-1000.0f)));
  EXPECT_FLOAT_EQ(LogSigmoid(-1000.0f), -1000.0f);
  EXPECT_NEAR(LogSigmoid(0.0f), -std::log(2.0f), 1e-6f);
  EXPECT_FLOAT_EQ(LogisticLoss(1000.0f, 1.0f), 0.0f);
  EXPECT_FLOAT_EQ(LogisticLoss(1000.0f, 0.0f), 1000.0f);
  EXPECT_FLOAT_EQ(LogisticLoss(-1000.0f, 1.0f), 1000.0f);
  EXPECT_NEAR(LogisticLoss(0.3f, 1.0f), -std::log(1 / (1 + std::exp(-0.3))),
              1e-6);
  EXPECT_NEAR(LogisticLossGrad(0.3f, 1.0f), SigmoidForward(0.3f) - 1.0f, 1e-7f);
}

TEST(ActivationFunctorsTest, BackwardFromOutput) {
  for (float x : {-2.0f, -0.5f, 0.25f, 1.5f}) {
    const float h = 1e-3f;
    const float ys = SigmoidForward(x);
    const float ds = (SigmoidForward(x + h) - SigmoidForward(x - h)) / (2 * h);
    EXPECT_NEAR(SigmoidBackward(ys, 2.0f), 2.0f * ds, 1e-3f);
    const float yt = TanhForward(x);
    const float dt = (TanhForward(x + h) - TanhForward(x - h)) / (2 * h);
    EXPECT_NEAR(TanhBackward(yt, 2.0f), 2.0f * dt, 1e-3f);
    EXPECT_EQ(ReluBackward(ReluForward(x), 3.0f), x > 0 ? 3.0f : 0.0f);
  }
}

}  // namespace
}  // namespace shardps
