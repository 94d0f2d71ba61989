// RAII owners of cuDNN descriptors and of growing device and pinned host
// buffers, for the CUDA code (kernels/cuda_*.cu, compression/cuda_*.cu).
// Header-only; include only from CUDA code.
#ifndef SHARDPS_KERNELS_CUDA_CUDA_RESOURCES_H_
#define SHARDPS_KERNELS_CUDA_CUDA_RESOURCES_H_

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_status.h"

namespace shardps {
namespace cuda_resources {

// ---- cuDNN descriptors, destroyed with their owner ----

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  ~TensorDesc() {
    if (d != nullptr) cudnnDestroyTensorDescriptor(d);
  }
  absl::Status Set(int n, int c, int h, int w) {
    if (d == nullptr) CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d));
    CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(
        d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
    return absl::OkStatus();
  }
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  ~FilterDesc() {
    if (d != nullptr) cudnnDestroyFilterDescriptor(d);
  }
  absl::Status Set(int k, int c, int h, int w) {
    if (d == nullptr) CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&d));
    CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
        d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, h, w));
    return absl::OkStatus();
  }
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ~ConvDesc() {
    if (d != nullptr) cudnnDestroyConvolutionDescriptor(d);
  }
  absl::Status Set(int pad, int stride) {
    if (d == nullptr) {
      CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&d));
    }
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
        d, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
        CUDNN_DATA_FLOAT));
    // Plain FP32 arithmetic: no TF32 tensor cores.
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(d, CUDNN_FMA_MATH));
    return absl::OkStatus();
  }
};

struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  ~PoolDesc() {
    if (d != nullptr) cudnnDestroyPoolingDescriptor(d);
  }
  absl::Status Set(const PoolGeometry& g) {
    if (d == nullptr) CUDNN_RETURN_IF_ERROR(cudnnCreatePoolingDescriptor(&d));
    CUDNN_RETURN_IF_ERROR(cudnnSetPooling2dDescriptor(
        d,
        g.mode == PoolMode::kMax ? CUDNN_POOLING_MAX_DETERMINISTIC
                                 : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
        CUDNN_NOT_PROPAGATE_NAN, g.window, g.window, g.padding, g.padding,
        g.stride, g.stride));
    return absl::OkStatus();
  }
};

struct ActivationDesc {
  cudnnActivationDescriptor_t d = nullptr;
  ~ActivationDesc() {
    if (d != nullptr) cudnnDestroyActivationDescriptor(d);
  }
  absl::Status Set(Activation f) {
    if (d == nullptr) {
      CUDNN_RETURN_IF_ERROR(cudnnCreateActivationDescriptor(&d));
    }
    const cudnnActivationMode_t mode =
        f == Activation::kRelu      ? CUDNN_ACTIVATION_RELU
        : f == Activation::kSigmoid ? CUDNN_ACTIVATION_SIGMOID
                                    : CUDNN_ACTIVATION_TANH;
    CUDNN_RETURN_IF_ERROR(
        cudnnSetActivationDescriptor(d, mode, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    return absl::OkStatus();
  }
};

// Memory that grows on demand: device scratch (cudaMalloc/cudaFree) or
// page-locked host staging for transfers (cudaMallocHost/cudaFreeHost).
template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Release)(void*)>
class GrowingBuffer {
 public:
  ~GrowingBuffer() {
    if (p_ != nullptr) Release(p_);
  }
  absl::Status Reserve(size_t bytes) {
    if (bytes <= size_) return absl::OkStatus();
    if (p_ != nullptr) CUDA_RETURN_IF_ERROR(Release(p_));
    p_ = nullptr;
    size_ = 0;
    CUDA_RETURN_IF_ERROR(Alloc(&p_, bytes));
    size_ = bytes;
    return absl::OkStatus();
  }
  void* get() const { return p_; }
  size_t size() const { return size_; }

 private:
  void* p_ = nullptr;
  size_t size_ = 0;
};

inline cudaError_t DeviceAlloc(void** p, size_t bytes) {
  return cudaMalloc(p, bytes);
}
inline cudaError_t DeviceFree(void* p) { return cudaFree(p); }
inline cudaError_t PinnedAlloc(void** p, size_t bytes) {
  return cudaMallocHost(p, bytes);
}
inline cudaError_t PinnedFree(void* p) { return cudaFreeHost(p); }

using DeviceScratch = GrowingBuffer<DeviceAlloc, DeviceFree>;
using PinnedScratch = GrowingBuffer<PinnedAlloc, PinnedFree>;

}  // namespace cuda_resources
}  // namespace shardps

#endif  // SHARDPS_KERNELS_CUDA_CUDA_RESOURCES_H_
