#ifndef SHARDPS_KERNELS_CUDA_CUDA_BACKEND_H_
#define SHARDPS_KERNELS_CUDA_CUDA_BACKEND_H_

// The CUDA backend, behind an interface without CUDA headers so that any
// .cc file can ask for it. Built from kernels/cuda/cuda_backend.cu when CMake
// finds nvcc (SHARDPS_WITH_CUDA); otherwise from cuda_backend_none.cc,
// whose functions return Unimplemented.
//
// The CUDA backend keeps parameters and activations in device memory and
// queues everything on one stream of its own: cuBLAS for matrix products,
// cuDNN for convolution, pooling, activations and softmax, own kernels
// (over the functors of kernels/layer_functors.h and
// kernels/activation_functors.h) for bias, dropout and the losses. Host
// transfers go through pinned staging buffers. cuBLAS and cuDNN run in
// FP32 without TF32, so results differ from the CPU backend by float
// rounding only. Every CUDA, cuBLAS and cuDNN call is checked; a failure is
// returned as InternalError with the library's message.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace shardps {

// True when this build has the CUDA backend.
bool CudaBackendBuilt();

// The number of visible CUDA devices; cudaGetDeviceCount's error (e.g. "no
// CUDA-capable device is detected") as InternalError; Unimplemented in a
// build without CUDA.
absl::StatusOr<int> CudaDeviceCount();

// One line on `device` and the libraries this process loaded, e.g.
// "cuda:0 NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.2 GiB); driver for CUDA
// 13.0, runtime 13.0, cuBLAS 13.1.0, cuDNN 9.13.0 (built with CUDA 13.0,
// cuDNN 9.19.0)". Errors as CudaDeviceCount's; InvalidArgument for a
// device that does not exist.
absl::StatusOr<std::string> DescribeCudaDevice(int device);

// A CUDA backend on `device` (in [0, CudaDeviceCount())), with its own
// stream, cuBLAS and cuDNN handles.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_CUDA_CUDA_BACKEND_H_
