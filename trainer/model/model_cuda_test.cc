// A model's training step on the CUDA backend against the CPU backend.
// Skipped without a CUDA device.
#include <cmath>
#include <string>
#include <vector>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/testing/cuda_test.h"
#include "trainer/model/model.h"

namespace shardps {
namespace {

using testing_cuda::CudaTest;
using testing_cuda::Random;

using CudaModelTest = CudaTest;

// configs/fmnist_cnn.pbtxt's layers plus dropout: one training step and an
// evaluation on each backend give the same loss and gradients.
TEST_F(CudaModelTest, CnnTrainingStepMatchesCpu) {
  ModelConfig config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        layers { type: CONV2D filters: 8 kernel_size: 3 padding: 1 }
        layers { type: RELU }
        layers { type: MAX_POOL pool_size: 2 }
        layers { type: CONV2D filters: 16 kernel_size: 3 padding: 1 }
        layers { type: TANH }
        layers { type: AVG_POOL pool_size: 2 }
        layers { type: FLATTEN }
        layers { type: DROPOUT dropout_rate: 0.2 }
        layers { type: FULLY_CONNECTED output_dim: 10 }
        loss { type: SOFTMAX_CROSS_ENTROPY }
        seed: 4
      )pb",
      &config));
  auto cpu = Model::Create(config, 784, 10);
  auto gpu = Model::Create(config, 784, 10, std::move(gpu_));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  (*cpu)->InitializeParameters(3);
  (*gpu)->InitializeParameters(3);
  const int batch = 16;
  std::vector<float> x = Random(batch * 784, 10);
  for (float& v : x) v = std::fabs(v);
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % 10;
  auto cs = (*cpu)->TrainBatch(x.data(), labels.data(), batch);
  auto gs = (*gpu)->TrainBatch(x.data(), labels.data(), batch);
  ASSERT_TRUE(cs.ok()) << cs.status();
  ASSERT_TRUE(gs.ok()) << gs.status();
  EXPECT_NEAR(cs->loss_sum, gs->loss_sum, 1e-3);
  for (size_t t = 0; t < (*cpu)->tables().size(); ++t) {
    ExpectNear((*cpu)->tables()[t].grad, (*gpu)->tables()[t].grad, 1e-3f,
               (*cpu)->tables()[t].name);
  }
  std::vector<float> cp(batch * 10), gp(batch * 10);
  auto ce = (*cpu)->Evaluate(x.data(), labels.data(), batch, cp.data());
  auto ge = (*gpu)->Evaluate(x.data(), labels.data(), batch, gp.data());
  ASSERT_TRUE(ce.ok() && ge.ok());
  EXPECT_NEAR(ce->loss_sum, ge->loss_sum, 1e-3);
  ExpectNear(cp, gp, 1e-4f, "probabilities");
}

// An MLP on both backends: the gradients that a trainer's after_backward
// hook reads in tables() are final when it is called (the GPU's are
// downloaded, queued, before each hook), and so are the input gradient and,
// without hooks, every table's gradient when TrainBatch returns.
TEST_F(CudaModelTest, MlpGradientsAreFinalAtHooksAndReturn) {
  ModelConfig config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        layers { type: FULLY_CONNECTED output_dim: 32 }
        layers { type: RELU }
        layers { type: FULLY_CONNECTED output_dim: 16 }
        layers { type: SIGMOID }
        layers { type: FULLY_CONNECTED output_dim: 10 }
        loss { type: SOFTMAX_CROSS_ENTROPY }
      )pb",
      &config));
  auto cpu = Model::Create(config, 20, 10);
  auto gpu = Model::Create(config, 20, 10, std::move(gpu_));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  (*cpu)->InitializeParameters(5);
  (*gpu)->InitializeParameters(5);
  const int batch = 12;
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = (3 * i) % 10;
  for (bool with_hooks : {true, false}) {
    const std::vector<float> x = Random(batch * 20, with_hooks ? 11 : 12);
    std::vector<std::vector<float>> at_hook((*gpu)->tables().size());
    Model::LayerHooks hooks;
    hooks.after_backward = [&](const std::vector<int>& tables) {
      for (int t : tables) at_hook[t] = (*gpu)->tables()[t].grad;
      return absl::OkStatus();
    };
    std::vector<float> cpu_dx(batch * 20), gpu_dx(batch * 20, -1.0f);
    auto cs = (*cpu)->TrainBatch(x.data(), labels.data(), batch, cpu_dx.data());
    auto gs = (*gpu)->TrainBatch(x.data(), labels.data(), batch, gpu_dx.data(),
                                 with_hooks ? &hooks : nullptr);
    ASSERT_TRUE(cs.ok()) << cs.status();
    ASSERT_TRUE(gs.ok()) << gs.status();
    EXPECT_NEAR(cs->loss_sum, gs->loss_sum, 1e-4);
    EXPECT_EQ(cs->correct, gs->correct);
    for (size_t t = 0; t < (*cpu)->tables().size(); ++t) {
      const std::string& name = (*cpu)->tables()[t].name;
      ExpectNear((*cpu)->tables()[t].grad, (*gpu)->tables()[t].grad, 1e-4f,
                 name);
      if (with_hooks) {
        ExpectNear((*cpu)->tables()[t].grad, at_hook[t], 1e-4f,
                   name + " at its hook");
      }
    }
    ExpectNear(cpu_dx, gpu_dx, 1e-4f, "input gradient");
  }
}

}  // namespace
}  // namespace shardps
