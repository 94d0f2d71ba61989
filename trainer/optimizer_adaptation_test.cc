#include "trainer/optimizer_adaptation.h"

#include <cmath>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

ModelConfig Parse(const char* text) {
  ModelConfig c;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &c));
  return c;
}

TEST(OptimizerAdaptationTest, StatisticsOfASummary) {
  LibsvmSummary s;
  s.records = 1000;
  s.features = 20000;
  s.positives = 150;
  for (uint64_t id = 0; id < 2000; ++id) s.ids.Add(id);
  absl::StatusOr<DataStatistics> d = StatisticsOf(s);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->features_per_record, 20);
  EXPECT_EQ(d->click_rate, 0.15);
  EXPECT_EQ(d->distinct_share, 0.1);
}

TEST(OptimizerAdaptationTest, DataTheRuleCannotRead) {
  LibsvmSummary s;
  EXPECT_THAT(StatisticsOf(s).status().message(), HasSubstr("0 records"));
  s.records = 10;
  s.features = 30;
  for (int64_t positives : {0, 10}) {
    s.positives = positives;
    absl::Status st = StatisticsOf(s).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("both labels"));
  }
}

TEST(OptimizerAdaptationTest, ReferenceDataKeepsTheSettings) {
  ModelConfig c = Parse(
      "optimizer { type: ADAGRAD learning_rate: 0.22 "
      "initial_accumulator: 2e-5 }");
  absl::StatusOr<std::string> line = AdaptOptimizersToData({20, 0.15, 0.2}, &c);
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_FLOAT_EQ(c.optimizer().learning_rate(), 0.22f);
  EXPECT_FLOAT_EQ(c.optimizer().initial_accumulator(), 2e-5f);
  EXPECT_THAT(*line, HasSubstr("click rate 0.15"));
}

TEST(OptimizerAdaptationTest, MovesEveryAdagradOptimizer) {
  ModelConfig c = Parse(
      "optimizer { type: ADAGRAD learning_rate: 0.2 "
      "initial_accumulator: 1e-4 }"
      "sparse_input { dim: 1 optimizer { type: ADAGRAD learning_rate: 1 } }"
      "layers { type: BIAS optimizer { type: ADAGRAD learning_rate: 0.5 "
      "initial_accumulator: 0.01 } }"
      "layers { type: RELU }");
  // F * C = 5 * 0.15 (a quarter of the reference): learning rates double;
  // U / C = 0.4 / 0.3 (the reference's): accumulators stay.
  ASSERT_TRUE(AdaptOptimizersToData({5, 0.3, 0.4}, &c).ok());
  EXPECT_NEAR(c.optimizer().learning_rate(), 0.2 * std::sqrt(2.0), 1e-6);
  EXPECT_FLOAT_EQ(c.optimizer().initial_accumulator(), 1e-4f);
  EXPECT_NEAR(c.sparse_input().optimizer().learning_rate(), std::sqrt(2.0),
              1e-6);
  // Left 0, the accumulator is ADAGRAD's default, 0.1.
  EXPECT_FLOAT_EQ(c.sparse_input().optimizer().initial_accumulator(), 0.1f);
  EXPECT_NEAR(c.layers(0).optimizer().learning_rate(), 0.5 * std::sqrt(2.0),
              1e-6);
  EXPECT_FALSE(c.layers(1).has_optimizer());

  // A tenth of the click rate: learning rate times sqrt(10), accumulator
  // times 10.
  ModelConfig d = Parse(
      "optimizer { type: ADAGRAD learning_rate: 0.22 "
      "initial_accumulator: 2e-5 }");
  ASSERT_TRUE(AdaptOptimizersToData({20, 0.015, 0.2}, &d).ok());
  EXPECT_NEAR(d.optimizer().learning_rate(), 0.22 * std::sqrt(10.0), 1e-5);
  EXPECT_NEAR(d.optimizer().initial_accumulator(), 2e-4, 1e-9);
}

TEST(OptimizerAdaptationTest, OnlyAdagrad) {
  ModelConfig c = Parse(
      "optimizer { type: ADAGRAD learning_rate: 0.2 }"
      "layers { name: 'b' type: BIAS optimizer { type: MOMENTUM "
      "learning_rate: 0.1 } }");
  absl::Status s = AdaptOptimizersToData({20, 0.15, 0.2}, &c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("layer b's optimizer is MOMENTUM"));
  EXPECT_FLOAT_EQ(c.optimizer().learning_rate(), 0.2f);  // unchanged
}

}  // namespace
}  // namespace shardps
