// Test-only helpers for code that runs on a CUDA device: a fixture that
// skips (printing "no CUDA device, skipping", which ctest reports as a skip)
// where no device is usable, and copies between host vectors and device
// buffers.
#ifndef SHARDPS_KERNELS_TESTING_CUDA_TEST_H_
#define SHARDPS_KERNELS_TESTING_CUDA_TEST_H_

#include <cmath>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace shardps {
namespace testing_cuda {

inline std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Why there is no device, or "" when there is one.
inline std::string NoDevice() {
  absl::StatusOr<int> n = CudaDeviceCount();
  if (!n.ok()) return std::string(n.status().message());
  if (*n == 0) return "0 CUDA devices";
  return "";
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = NoDevice();
    if (!why.empty()) {
      std::cout << "no CUDA device, skipping: " << why << std::endl;
      GTEST_SKIP() << "no CUDA device: " << why;
    }
    auto b = CreateCudaBackend(0);
    ASSERT_TRUE(b.ok()) << b.status();
    gpu_ = std::move(b).value();
  }

  // A device copy of `host`.
  BackendBuffer Dev(const std::vector<float>& host) {
    BackendBuffer b;
    EXPECT_TRUE(b.Allocate(gpu_.get(), host.size()).ok());
    EXPECT_TRUE(gpu_->Upload(host.data(), host.size(), b.data()).ok());
    return b;
  }
  BackendBuffer Zeros(size_t n) {
    BackendBuffer b;
    EXPECT_TRUE(b.Allocate(gpu_.get(), n).ok());
    return b;
  }
  std::vector<float> Host(const BackendBuffer& b) {
    std::vector<float> h(b.size());
    EXPECT_TRUE(gpu_->Download(b.data(), b.size(), h.data()).ok());
    return h;
  }
  static void ExpectNear(const std::vector<float>& want,
                         const std::vector<float>& got, float tol,
                         const std::string& what) {
    ASSERT_EQ(want.size(), got.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(want[i], got[i], tol * std::max(1.0f, std::fabs(want[i])))
          << what << "[" << i << "]";
    }
  }

  CpuBackend cpu_;
  std::unique_ptr<Backend> gpu_;
};

}  // namespace testing_cuda
}  // namespace shardps

#endif  // SHARDPS_KERNELS_TESTING_CUDA_TEST_H_
