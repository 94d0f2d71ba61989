#include "trainer/model/auc.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(AucTest, PerfectReversedAndTied) {
  const std::vector<float> scores = {0.1f, 0.4f, 0.35f, 0.8f, 0.7f};
  const std::vector<int32_t> labels = {0, 1, 0, 1, 1};
  EXPECT_DOUBLE_EQ(Auc(scores, labels), 1.0);
  const std::vector<int32_t> reversed = {1, 0, 1, 0, 0};
  EXPECT_DOUBLE_EQ(Auc(scores, reversed), 0.0);
  const std::vector<float> tied(5, 0.3f);
  EXPECT_DOUBLE_EQ(Auc(tied, labels), 0.5);
}

TEST(AucTest, HandComputedWithTies) {
  // Positives score 0.9, 0.5, 0.5; negatives 0.5, 0.2. Pairs (pos, neg):
  // 0.9 beats both (2); each 0.5 ties the 0.5 (1/2) and beats 0.2 (1):
  // U = 2 + 1.5 + 1.5 = 5 of 3 * 2 = 6 pairs.
  const std::vector<float> scores = {0.5f, 0.9f, 0.2f, 0.5f, 0.5f};
  const std::vector<int32_t> labels = {1, 1, 0, 0, 1};
  EXPECT_DOUBLE_EQ(Auc(scores, labels), 5.0 / 6.0);
  // Labels other than 0 count as positive.
  const std::vector<int32_t> labels7 = {7, 7, 0, 0, 7};
  EXPECT_DOUBLE_EQ(Auc(scores, labels7), 5.0 / 6.0);
}

TEST(AucTest, MatchesPairCountOnRandomData) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> score(0, 20);  // many ties
  std::bernoulli_distribution label(0.3);
  std::vector<float> s(500);
  std::vector<int32_t> y(500);
  for (int i = 0; i < 500; ++i) {
    s[i] = score(rng) / 20.0f;
    y[i] = label(rng);
  }
  double wins = 0, pairs = 0;
  for (int i = 0; i < 500; ++i) {
    for (int j = 0; j < 500; ++j) {
      if (y[i] == 1 && y[j] == 0) {
        pairs += 1;
        wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
      }
    }
  }
  EXPECT_NEAR(Auc(s, y), wins / pairs, 1e-12);
}

TEST(AucTest, UndefinedWithoutBothClassesIsNaN) {
  const std::vector<float> scores = {0.1f, 0.2f};
  EXPECT_TRUE(std::isnan(Auc(scores, std::vector<int32_t>{1, 1})));
  EXPECT_TRUE(std::isnan(Auc(scores, std::vector<int32_t>{0, 0})));
  EXPECT_TRUE(std::isnan(Auc({}, {})));
}

TEST(AucTest, NaNScoresRankLowest) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> scores = {nan, 0.3f, nan, 0.1f};
  const std::vector<int32_t> labels = {0, 1, 0, 1};
  EXPECT_DOUBLE_EQ(Auc(scores, labels), 1.0);
}

TEST(LogLossTest, Values) {
  const std::vector<float> p = {0.9f, 0.2f, 0.5f};
  const std::vector<int32_t> y = {1, 0, 1};
  const double want =
      -(std::log(0.9f) + std::log(1.0 - 0.2f) + std::log(0.5)) / 3.0;
  EXPECT_NEAR(LogLoss(p, y), want, 1e-7);
}

TEST(LogLossTest, ClipsProbabilities) {
  const std::vector<float> p = {0.0f, 1.0f, 1.0f, 0.0f};
  EXPECT_NEAR(LogLoss(p, std::vector<int32_t>{1, 0, 1, 0}),
              -(std::log(1e-7) * 2 + std::log1p(-1e-7) * 2) / 4, 1e-9);
  EXPECT_NEAR(LogLoss(std::vector<float>{0.0f}, std::vector<int32_t>{1}),
              16.118095650958319, 1e-9);
}

TEST(LogLossTest, EmptyOrNaNIsNaN) {
  EXPECT_TRUE(std::isnan(LogLoss({}, {})));
  EXPECT_TRUE(std::isnan(LogLoss(std::vector<float>{0.5f, std::nanf("")},
                                 std::vector<int32_t>{1, 0})));
}

}  // namespace
}  // namespace shardps
