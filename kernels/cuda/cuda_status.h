#ifndef SHARDPS_KERNELS_CUDA_CUDA_STATUS_H_
#define SHARDPS_KERNELS_CUDA_CUDA_STATUS_H_

// Checks of CUDA runtime, cuBLAS and cuDNN calls, turned into absl::Status
// with the library's own message: "<call>: <message> (<file>:<line>)".
// Include only from CUDA code (kernels/cuda_*.cu); header-only.

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardps {
namespace cuda_internal {

inline absl::Status CudaError(cudaError_t e, const char* call, const char* file,
                              int line) {
  // Clear the sticky-free error state, as nccl's CUDACHECK does.
  (void)cudaGetLastError();
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorString(e),
                                          " (", file, ":", line, ")"));
}

inline absl::Status CublasError(cublasStatus_t s, const char* call,
                                const char* file, int line) {
  return absl::InternalError(absl::StrCat(call, ": ", cublasGetStatusString(s),
                                          " (", file, ":", line, ")"));
}

inline absl::Status CudnnError(cudnnStatus_t s, const char* call,
                               const char* file, int line) {
  return absl::InternalError(absl::StrCat(call, ": ", cudnnGetErrorString(s),
                                          " (", file, ":", line, ")"));
}

}  // namespace cuda_internal
}  // namespace shardps

// Returns an InternalError naming the call and cudaGetErrorString's message
// when `expr` (a cudaError_t) is not cudaSuccess.
#define CUDA_RETURN_IF_ERROR(expr)                                    \
  do {                                                                \
    const cudaError_t _ps_cuda_err = (expr);                          \
    if (_ps_cuda_err != cudaSuccess) {                                \
      return ::shardps::cuda_internal::CudaError(_ps_cuda_err, #expr, \
                                                 __FILE__, __LINE__); \
    }                                                                 \
  } while (0)

// The same for a cublasStatus_t, with cublasGetStatusString's message.
#define CUBLAS_RETURN_IF_ERROR(expr)                                     \
  do {                                                                   \
    const cublasStatus_t _ps_cublas_st = (expr);                         \
    if (_ps_cublas_st != CUBLAS_STATUS_SUCCESS) {                        \
      return ::shardps::cuda_internal::CublasError(_ps_cublas_st, #expr, \
                                                   __FILE__, __LINE__);  \
    }                                                                    \
  } while (0)

// The same for a cudnnStatus_t, with cudnnGetErrorString's message.
#define CUDNN_RETURN_IF_ERROR(expr)                                    \
  do {                                                                 \
    const cudnnStatus_t _ps_cudnn_st = (expr);                         \
    if (_ps_cudnn_st != CUDNN_STATUS_SUCCESS) {                        \
      return ::shardps::cuda_internal::CudnnError(_ps_cudnn_st, #expr, \
                                                  __FILE__, __LINE__); \
    }                                                                  \
  } while (0)

#endif  // SHARDPS_KERNELS_CUDA_CUDA_STATUS_H_
