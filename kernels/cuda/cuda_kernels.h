// Launchers of the CUDA backend's own kernels (cuda_kernels.cu), over the
// per-element functors that the CPU backend shares. Each queues its kernel
// on `stream` and returns the launch error (cudaGetLastError). Include only
// from CUDA code (kernels/cuda_*.cu).
#ifndef SHARDPS_KERNELS_CUDA_CUDA_KERNELS_H_
#define SHARDPS_KERNELS_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace shardps {
namespace cuda_kernels {

// y[o][c][i] = x[o][c][i] + b[c] over `total` = outer * channels * inner.
cudaError_t BiasForward(cudaStream_t stream, const float* b, int channels,
                        int inner, size_t total, const float* x, float* y);
// db[c] = sum over o and i of dy[o][c][i], in a fixed order (deterministic).
cudaError_t BiasBackward(cudaStream_t stream, const float* dy, int outer,
                         int channels, int inner, float* db);
// mask[i] = DropoutMask(seed, i, rate); y[i] = x[i] * mask[i].
cudaError_t DropoutForward(cudaStream_t stream, float rate, uint64_t seed,
                           const float* x, size_t n, float* mask, float* y);
// out[i] = a[i] * b[i].
cudaError_t Multiply(cudaStream_t stream, const float* a, const float* b,
                     size_t n, float* out);
// From log-softmax rows `logp` (batch x c): per-example loss and
// correctness, d loss / d logits scaled by `scale` (if dlogits) and the
// probabilities (if probs).
cudaError_t SoftmaxXent(cudaStream_t stream, const float* logp,
                        const int32_t* labels, int batch, int c, float scale,
                        float* dlogits, float* probs, float* loss,
                        int32_t* correct);
// The same for a logistic output z (batch values).
cudaError_t Logistic(cudaStream_t stream, const float* z, const int32_t* labels,
                     int batch, float scale, float* dlogits, float* probs,
                     float* loss, int32_t* correct);

}  // namespace cuda_kernels
}  // namespace shardps

#endif  // SHARDPS_KERNELS_CUDA_CUDA_KERNELS_H_
