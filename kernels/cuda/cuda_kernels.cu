// The CUDA backend's own kernels; see kernels/cuda/cuda_kernels.h.
#include <algorithm>

#include "kernels/activation_functors.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/layer_functors.h"

namespace shardps {
namespace cuda_kernels {
namespace {

constexpr int kThreads = 256;

// Blocks of a grid-stride loop over n elements.
int Blocks(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(b, 4096)));
}

__global__ void BiasForwardKernel(const float* b, int channels, int inner,
                                  size_t total, const float* x, float* y) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>((i / inner) % channels);
    y[i] = x[i] + b[c];
  }
}

// One block per channel; a fixed-order tree sum, so the result is
// deterministic.
__global__ void BiasBackwardKernel(const float* dy, int outer, int channels,
                                   int inner, float* db) {
  __shared__ float part[kThreads];
  const int c = blockIdx.x;
  const size_t count = static_cast<size_t>(outer) * inner;
  float s = 0.0f;
  for (size_t j = threadIdx.x; j < count; j += blockDim.x) {
    const size_t o = j / inner, i = j % inner;
    s += dy[(o * channels + c) * inner + i];
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = part[0];
}

__global__ void DropoutForwardKernel(float rate, uint64_t seed, const float* x,
                                     size_t n, float* mask, float* y) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float m = DropoutMask(seed, i, rate);
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

__global__ void MultiplyKernel(const float* a, const float* b, size_t n,
                               float* out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = a[i] * b[i];
  }
}

// From cuDNN's log-softmax rows: per-example loss and correctness, the
// gradient (SoftmaxXentGrad) and the probabilities.
__global__ void SoftmaxXentKernel(const float* logp, const int32_t* labels,
                                  int batch, int c, float scale, float* dlogits,
                                  float* probs, float* loss, int32_t* correct) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < batch;
       r += gridDim.x * blockDim.x) {
    const float* lp = logp + static_cast<size_t>(r) * c;
    const int32_t label = labels[r];
    const bool valid = label >= 0 && label < c;
    int argmax = 0;
    for (int j = 1; j < c; ++j) {
      if (lp[j] > lp[argmax]) argmax = j;
    }
    loss[r] = valid ? -lp[label] : 0.0f;
    correct[r] = valid && argmax == label ? 1 : 0;
    for (int j = 0; j < c; ++j) {
      const float p = expf(lp[j]);
      const size_t k = static_cast<size_t>(r) * c + j;
      if (probs != nullptr) probs[k] = p;
      if (dlogits != nullptr) {
        dlogits[k] = valid ? SoftmaxXentGrad(p, j == label, scale) : 0.0f;
      }
    }
  }
}

__global__ void LogisticKernel(const float* z, const int32_t* labels, int batch,
                               float scale, float* dlogits, float* probs,
                               float* loss, int32_t* correct) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < batch;
       r += gridDim.x * blockDim.x) {
    const float p = SigmoidForward(z[r]);
    if (probs != nullptr) probs[r] = p;
    const int32_t label = labels[r];
    const bool valid = label == 0 || label == 1;
    const float t = static_cast<float>(label);
    loss[r] = valid ? LogisticLoss(z[r], t) : 0.0f;
    correct[r] = valid && (p >= 0.5f ? 1 : 0) == label ? 1 : 0;
    if (dlogits != nullptr) dlogits[r] = valid ? (p - t) * scale : 0.0f;
  }
}

}  // namespace

cudaError_t BiasForward(cudaStream_t stream, const float* b, int channels,
                        int inner, size_t total, const float* x, float* y) {
  BiasForwardKernel<<<Blocks(total), kThreads, 0, stream>>>(b, channels, inner,
                                                            total, x, y);
  return cudaGetLastError();
}

cudaError_t BiasBackward(cudaStream_t stream, const float* dy, int outer,
                         int channels, int inner, float* db) {
  BiasBackwardKernel<<<channels, kThreads, 0, stream>>>(dy, outer, channels,
                                                        inner, db);
  return cudaGetLastError();
}

cudaError_t DropoutForward(cudaStream_t stream, float rate, uint64_t seed,
                           const float* x, size_t n, float* mask, float* y) {
  DropoutForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(rate, seed, x, n,
                                                           mask, y);
  return cudaGetLastError();
}

cudaError_t Multiply(cudaStream_t stream, const float* a, const float* b,
                     size_t n, float* out) {
  MultiplyKernel<<<Blocks(n), kThreads, 0, stream>>>(a, b, n, out);
  return cudaGetLastError();
}

cudaError_t SoftmaxXent(cudaStream_t stream, const float* logp,
                        const int32_t* labels, int batch, int c, float scale,
                        float* dlogits, float* probs, float* loss,
                        int32_t* correct) {
  SoftmaxXentKernel<<<Blocks(batch), kThreads, 0, stream>>>(
      logp, labels, batch, c, scale, dlogits, probs, loss, correct);
  return cudaGetLastError();
}

cudaError_t Logistic(cudaStream_t stream, const float* z, const int32_t* labels,
                     int batch, float scale, float* dlogits, float* probs,
                     float* loss, int32_t* correct) {
  LogisticKernel<<<Blocks(batch), kThreads, 0, stream>>>(
      z, labels, batch, scale, dlogits, probs, loss, correct);
  return cudaGetLastError();
}

}  // namespace cuda_kernels
}  // namespace shardps
