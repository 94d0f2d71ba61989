#ifndef SHARDPS_COMPRESSION_CUDA_THRESHOLD_ENCODER_H_
#define SHARDPS_COMPRESSION_CUDA_THRESHOLD_ENCODER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "compression/threshold_codec.h"

namespace shardps {

// EncodeThresholdOrBitmap (common/threshold_codec.h) on a residual that
// lives in CUDA device memory: the same format choice and the same bytes,
// with the residual updated in place on the device. The threshold message
// is an order-preserving stream compaction: a flag per element, an
// exclusive prefix sum (CUB) giving each selected element its slot, then a
// scatter of ThresholdEntry in index order. The bitmap is one word per
// thread over codec::BitmapCode. Both call the per-element functions of
// codec::, so the CPU tests of those functions test the GPU's math.
// No CUDA headers here: built only with CUDA (kernels/cuda_threshold_
// encoder.cu). Requires external synchronization.
class CudaThresholdEncoder {
 public:
  virtual ~CudaThresholdEncoder() = default;

  // An encoder with its own stream on `device`.
  static absl::StatusOr<std::unique_ptr<CudaThresholdEncoder>> Create(
      int device);

  // Same contract and errors as EncodeThresholdOrBitmap, with `residual`
  // pointing at n floats of device memory; the message is appended to
  // `*out` on the host. CUDA errors come back as InternalError.
  // The encoder runs on a stream of its own, not ordered with any other:
  // work that writes `residual` on another stream (a CudaBackend's) must
  // have completed before the call, e.g. by Backend::Synchronize.
  virtual absl::StatusOr<EncodeInfo> Encode(float* residual, size_t n,
                                            float threshold,
                                            std::vector<int32_t>* out) = 0;
};

}  // namespace shardps

#endif  // SHARDPS_COMPRESSION_CUDA_THRESHOLD_ENCODER_H_
