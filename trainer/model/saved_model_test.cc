#include "trainer/model/saved_model.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "trainer/model/model.h"

namespace shardps {
namespace {

ModelConfig Config(int hidden) {
  ModelConfig c;
  auto* fc = c.add_layers();
  fc->set_name("fc1");
  fc->set_type(LayerConfig::FULLY_CONNECTED);
  fc->set_output_dim(hidden);
  c.add_layers()->set_type(LayerConfig::RELU);
  auto* out = c.add_layers();
  out->set_name("fc2");
  out->set_type(LayerConfig::FULLY_CONNECTED);
  out->set_output_dim(3);
  return c;
}

class SavedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/saved_model_test";
    std::filesystem::remove_all(dir_);
    model_ = std::move(*Model::Create(Config(5), 4, 3));
    model_->InitializeParameters(3);
    ASSERT_TRUE(SaveModel(dir_, model_->config(), model_->tables()).ok());
  }
  std::string dir_;
  std::unique_ptr<Model> model_;
};

TEST_F(SavedModelTest, RoundTrip) {
  auto other = std::move(*Model::Create(Config(5), 4, 3));
  other->InitializeParameters(99);
  ASSERT_TRUE(LoadModelParams(dir_, &other->tables()).ok());
  for (size_t t = 0; t < other->tables().size(); ++t) {
    EXPECT_EQ(other->tables()[t].value, model_->tables()[t].value);
  }
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/model.pbtxt"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/params.bin.tmp"));
}

TEST_F(SavedModelTest, OtherShapeIsFailedPrecondition) {
  auto other = std::move(*Model::Create(Config(6), 4, 3));
  absl::Status s = LoadModelParams(dir_, &other->tables());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("fc1.weight"), std::string::npos) << s;
}

TEST_F(SavedModelTest, CorruptedOrTruncatedIsDataLoss) {
  const std::string path = dir_ + "/params.bin";
  const auto size = std::filesystem::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.put('\x7f');
  }
  auto other = std::move(*Model::Create(Config(5), 4, 3));
  const auto before = other->tables()[0].value;
  absl::Status s = LoadModelParams(dir_, &other->tables());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(other->tables()[0].value, before);  // nothing half-loaded
  std::filesystem::resize_file(path, size - 10);
  EXPECT_EQ(LoadModelParams(dir_, &other->tables()).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(LoadModelParams(dir_ + "/missing", &other->tables()).code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardps
