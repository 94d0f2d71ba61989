#include "trainer/flags/config_override.h"

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "proto/model_config.pb.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

ModelConfig Mlp() {
  ModelConfig c;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        name: "mlp"
        layers { name: "fc1" type: FULLY_CONNECTED output_dim: 256 }
        layers { name: "relu1" type: RELU }
        layers { name: "fc2" type: FULLY_CONNECTED output_dim: 10 }
        optimizer { type: MOMENTUM learning_rate: 0.05 momentum: 0.9 }
        batch_size: 64
      )pb",
      &c));
  return c;
}

TEST(ConfigSetTest, SetsScalarsEnumsAndNestedFields) {
  ModelConfig c = Mlp();
  ASSERT_TRUE(ApplyConfigSet("optimizer.learning_rate=0.1, batch_size=128,"
                             "optimizer.type=ADAGRAD,layers[fc2].output_dim=7,"
                             "layers[0].name=first,data.scale=0.5",
                             &c)
                  .ok());
  EXPECT_FLOAT_EQ(c.optimizer().learning_rate(), 0.1f);
  EXPECT_FLOAT_EQ(c.optimizer().momentum(), 0.9f);  // the rest is kept
  EXPECT_EQ(c.optimizer().type(), OptimizerConfig::ADAGRAD);
  EXPECT_EQ(c.batch_size(), 128);
  EXPECT_EQ(c.layers(2).output_dim(), 7);
  EXPECT_EQ(c.layers(0).name(), "first");
  EXPECT_FLOAT_EQ(c.data().scale(), 0.5f);  // created
}

TEST(ConfigSetTest, NegativeIndexCountsFromTheEnd) {
  ModelConfig c = Mlp();
  ASSERT_TRUE(ApplyConfigSet("layers[-1].output_dim=3", &c).ok());
  EXPECT_EQ(c.layers(2).output_dim(), 3);
}

TEST(ConfigSetTest, EmptyChangesNothing) {
  ModelConfig c = Mlp();
  ASSERT_TRUE(ApplyConfigSet("", &c).ok());
  EXPECT_EQ(c.SerializeAsString(), Mlp().SerializeAsString());
}

TEST(ConfigSetTest, BadAssignmentsNameTheProblem) {
  struct Case {
    const char* set;
    const char* error;
  } cases[] = {
      {"optimizer.learning_rat=1", "has no field \"learning_rat\""},
      {"optimizer.learning_rate", "not path=value"},
      {"=1", "not path=value"},
      {"optimizer.learning_rate=fast", "not a finite number"},
      {"optimizer.learning_rate=nan", "not a finite number"},
      {"optimizer.learning_rate=1e300", "out of a float's range"},
      {"batch_size=1.5", "not an integer in range"},
      {"batch_size=99999999999", "not an integer in range"},
      {"optimizer.type=ADAM2", "is not one of SGD, MOMENTUM"},
      {"layers.output_dim=3", "layers is repeated"},
      {"batch_size[0]=3", "batch_size is not repeated"},
      {"layers[3].output_dim=3", "it has 3 element(s)"},
      {"layers[fc9].output_dim=3", "no element has that name"},
      {"layers[].output_dim=3", "an index is [N] or [name]"},
      {"optimizer=1", "a message field takes a path"},
      {"batch_size.x=1", "batch_size is not a message"},
      {"optimizer..type=SGD", "an empty field name"},
  };
  for (const Case& k : cases) {
    ModelConfig c = Mlp();
    absl::Status s = ApplyConfigSet(k.set, &c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.set;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.error)) << k.set;
    EXPECT_THAT(std::string(s.message()), HasSubstr("--config_set: ")) << k.set;
  }
}

}  // namespace
}  // namespace shardps
