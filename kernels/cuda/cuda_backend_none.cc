// The CUDA backend's entry points in a build without CUDA
// (SHARDPS_WITH_CUDA=OFF or no nvcc): they say so.
#include "absl/status/status.h"
#include "kernels/cuda/cuda_backend.h"

namespace shardps {
namespace {

absl::Status NotBuilt() {
  return absl::UnimplementedError(
      "this build has no CUDA backend (built without nvcc or with "
      "-DSHARDPS_WITH_CUDA=OFF)");
}

}  // namespace

bool CudaBackendBuilt() { return false; }

absl::StatusOr<int> CudaDeviceCount() { return NotBuilt(); }

absl::StatusOr<std::string> DescribeCudaDevice(int device) {
  return NotBuilt();
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  return NotBuilt();
}

}  // namespace shardps
