// The GPU threshold encoder's entry point in a build without CUDA
// (SHARDPS_WITH_CUDA=OFF or no nvcc): it says so.
#include "absl/status/status.h"
#include "compression/cuda_threshold_encoder.h"

namespace shardps {

absl::StatusOr<std::unique_ptr<CudaThresholdEncoder>>
CudaThresholdEncoder::Create(int device) {
  return absl::UnimplementedError(
      "this build has no CUDA threshold encoder (built without nvcc or with "
      "-DSHARDPS_WITH_CUDA=OFF)");
}

}  // namespace shardps
