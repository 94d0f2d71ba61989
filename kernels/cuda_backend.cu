// The CUDA backend (see kernels/cuda_backend.h). Stream contract: every call
// of a CudaBackend is queued on its stream, in call order; Download and
// Synchronize wait for the stream; Upload returns once the host data is in
// a pinned staging buffer (the copy to the device runs on the stream).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "kernels/activation_functors.h"
#include "kernels/cuda_backend.h"
#include "kernels/layer_functors.h"

namespace shardps {
namespace {

constexpr int kThreads = 256;

// Blocks of a grid-stride loop over n elements.
int Blocks(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(b, 4096)));
}

// ---- Kernels over the shared functors ----

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

 private:
  void* p_ = nullptr;
  size_t size_ = 0;
};

cudaError_t DeviceAlloc(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t DeviceFree(void* p) { return cudaFree(p); }
cudaError_t PinnedAlloc(void** p, size_t bytes) {
  return cudaMallocHost(p, bytes);
}
cudaError_t PinnedFree(void* p) { return cudaFreeHost(p); }

using DeviceScratch = GrowingBuffer<DeviceAlloc, DeviceFree>;
using PinnedScratch = GrowingBuffer<PinnedAlloc, PinnedFree>;

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  ~CudaBackend() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (staged_ != nullptr) cudaEventDestroy(staged_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming));
    CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
    CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
    // FP32 products without TF32, comparable with the CPU backend.
    CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    CUDNN_RETURN_IF_ERROR(cudnnCreate(&cudnn_));
    CUDNN_RETURN_IF_ERROR(cudnnSetStream(cudnn_, stream_));
    return absl::OkStatus();
  }

  std::string name() const override { return absl::StrCat("cuda:", device_); }
  bool host_memory() const override { return false; }

  absl::StatusOr<float*> Allocate(size_t n) override {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    float* p = nullptr;
    if (n == 0) return p;
    CUDA_RETURN_IF_ERROR(cudaMalloc(&p, n * sizeof(float)));
    const cudaError_t e = cudaMemsetAsync(p, 0, n * sizeof(float), stream_);
    if (e != cudaSuccess) {
      cudaFree(p);
      CUDA_RETURN_IF_ERROR(e);
    }
    return p;
  }

  void Free(float* p) override {
    if (p == nullptr) return;
    // cudaFree waits for the device; nothing queued may use p afterwards.
    const cudaError_t e = cudaFree(p);
    if (e != cudaSuccess) (void)cudaGetLastError();
  }

  absl::Status Upload(const float* host, size_t n, float* dst) override {
    return UploadBytes(host, n * sizeof(float), dst);
  }

  absl::Status Download(const float* src, size_t n, float* host) override {
    return DownloadBytes(src, n * sizeof(float), host);
  }

  absl::Status Copy(const float* src, size_t n, float* dst) override {
    if (n == 0 || src == dst) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, n * sizeof(float),
                                         cudaMemcpyDeviceToDevice, stream_));
    return absl::OkStatus();
  }

  absl::Status Synchronize() override {
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const float* a, int lda, const float* b,
                    int ldb, float beta, float* c, int ldc) override {
    if (m <= 0 || n <= 0) return absl::OkStatus();
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
    CUBLAS_RETURN_IF_ERROR(
        cublasSgemm(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                    ldb, a, lda, &beta, c, ldc));
    return absl::OkStatus();
  }

  absl::Status BiasForward(const float* b, int outer, int channels, int inner,
                           const float* x, float* y) override {
    const size_t total = static_cast<size_t>(outer) * channels * inner;
    if (total == 0) return absl::OkStatus();
    BiasForwardKernel<<<Blocks(total), kThreads, 0, stream_>>>(
        b, channels, inner, total, x, y);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }

  absl::Status BiasBackward(const float* dy, int outer, int channels, int inner,
                            float* db) override {
    if (channels <= 0) return absl::OkStatus();
    BiasBackwardKernel<<<channels, kThreads, 0, stream_>>>(dy, outer, channels,
                                                           inner, db);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }

  absl::Status ActivationForward(Activation f, const float* x, size_t n,
                                 float* y) override {
    if (n == 0) return absl::OkStatus();
    RETURN_IF_ERROR(act_.Set(f));
    RETURN_IF_ERROR(FlatDesc(n, &flat_));
    const float one = 1.0f, zero = 0.0f;
    CUDNN_RETURN_IF_ERROR(cudnnActivationForward(cudnn_, act_.d, &one, flat_.d,
                                                 x, &zero, flat_.d, y));
    return absl::OkStatus();
  }

  absl::Status ActivationBackward(Activation f, const float* x, const float* y,
                                  const float* dy, size_t n,
                                  float* dx) override {
    if (n == 0) return absl::OkStatus();
    RETURN_IF_ERROR(act_.Set(f));
    RETURN_IF_ERROR(FlatDesc(n, &flat_));
    const float one = 1.0f, zero = 0.0f;
    CUDNN_RETURN_IF_ERROR(cudnnActivationBackward(cudnn_, act_.d, &one, flat_.d,
                                                  y, flat_.d, dy, flat_.d, x,
                                                  &zero, flat_.d, dx));
    return absl::OkStatus();
  }

  absl::Status Conv2dForward(const ConvGeometry& g, const float* x,
                             const float* w, const float* b,
                             float* y) override {
    RETURN_IF_ERROR(SetConv(g));
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    int found = 0;
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(
        cudnn_, x_.d, w_.d, conv_.d, y_.d, 8, &found, perf));
    const cudnnConvolutionFwdAlgoPerf_t* best = nullptr;
    RETURN_IF_ERROR(Pick(perf, found, "forward", &best));
    RETURN_IF_ERROR(workspace_.Reserve(best->memory));
    const float one = 1.0f, zero = 0.0f;
    CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(
        cudnn_, &one, x_.d, x, w_.d, w, conv_.d, best->algo, workspace_.get(),
        best->memory, &zero, y_.d, y));
    CUDNN_RETURN_IF_ERROR(cudnnAddTensor(cudnn_, &one, b_.d, b, &one, y_.d, y));
    return absl::OkStatus();
  }

  absl::Status Conv2dBackward(const ConvGeometry& g, const float* x,
                              const float* w, const float* dy, float* dw,
                              float* db, float* dx) override {
    RETURN_IF_ERROR(SetConv(g));
    const float one = 1.0f, zero = 0.0f;
    CUDNN_RETURN_IF_ERROR(
        cudnnConvolutionBackwardBias(cudnn_, &one, y_.d, dy, &zero, b_.d, db));
    cudnnConvolutionBwdFilterAlgoPerf_t fperf[8];
    int found = 0;
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        cudnn_, x_.d, y_.d, conv_.d, w_.d, 8, &found, fperf));
    const cudnnConvolutionBwdFilterAlgoPerf_t* fbest = nullptr;
    RETURN_IF_ERROR(Pick(fperf, found, "backward filter", &fbest));
    RETURN_IF_ERROR(workspace_.Reserve(fbest->memory));
    CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
        cudnn_, &one, x_.d, x, y_.d, dy, conv_.d, fbest->algo, workspace_.get(),
        fbest->memory, &zero, w_.d, dw));
    if (dx == nullptr) return absl::OkStatus();
    cudnnConvolutionBwdDataAlgoPerf_t dperf[8];
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        cudnn_, w_.d, y_.d, conv_.d, x_.d, 8, &found, dperf));
    const cudnnConvolutionBwdDataAlgoPerf_t* dbest = nullptr;
    RETURN_IF_ERROR(Pick(dperf, found, "backward data", &dbest));
    RETURN_IF_ERROR(workspace_.Reserve(dbest->memory));
    CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
        cudnn_, &one, w_.d, w, y_.d, dy, conv_.d, dbest->algo, workspace_.get(),
        dbest->memory, &zero, x_.d, dx));
    return absl::OkStatus();
  }

  absl::Status Pool2dForward(const PoolGeometry& g, const float* x,
                             float* y) override {
    RETURN_IF_ERROR(SetPool(g));
    const float one = 1.0f, zero = 0.0f;
    CUDNN_RETURN_IF_ERROR(
        cudnnPoolingForward(cudnn_, pool_.d, &one, x_.d, x, &zero, y_.d, y));
    return absl::OkStatus();
  }

  absl::Status Pool2dBackward(const PoolGeometry& g, const float* x,
                              const float* y, const float* dy,
                              float* dx) override {
    RETURN_IF_ERROR(SetPool(g));
    const float one = 1.0f, zero = 0.0f;
    CUDNN_RETURN_IF_ERROR(cudnnPoolingBackward(
        cudnn_, pool_.d, &one, y_.d, y, y_.d, dy, x_.d, x, &zero, x_.d, dx));
    return absl::OkStatus();
  }

  absl::Status DropoutForward(float rate, uint64_t seed, const float* x,
                              size_t n, float* mask, float* y) override {
    if (n == 0) return absl::OkStatus();
    DropoutForwardKernel<<<Blocks(n), kThreads, 0, stream_>>>(rate, seed, x, n,
                                                              mask, y);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }

  absl::Status DropoutBackward(const float* mask, const float* dy, size_t n,
                               float* dx) override {
    if (n == 0) return absl::OkStatus();
    MultiplyKernel<<<Blocks(n), kThreads, 0, stream_>>>(dy, mask, n, dx);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }

  absl::Status SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                   int batch, int classes, float grad_scale,
                                   float* dlogits, float* probabilities,
                                   LossSums* sums) override {
    if (batch <= 0) return absl::OkStatus();
    const size_t n = static_cast<size_t>(batch) * classes;
    RETURN_IF_ERROR(PrepareLoss(labels, batch, n));
    float* logp = LossFloats(0);
    float* probs = probabilities != nullptr ? LossFloats(n) : nullptr;
    RETURN_IF_ERROR(x_.Set(batch, classes, 1, 1));
    const float one = 1.0f, zero = 0.0f;
    CUDNN_RETURN_IF_ERROR(cudnnSoftmaxForward(cudnn_, CUDNN_SOFTMAX_LOG,
                                              CUDNN_SOFTMAX_MODE_INSTANCE, &one,
                                              x_.d, logits, &zero, x_.d, logp));
    SoftmaxXentKernel<<<Blocks(batch), kThreads, 0, stream_>>>(
        logp, LossLabels(), batch, classes, grad_scale, dlogits, probs,
        LossFloats(2 * n), LossCorrect());
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return FinishLoss(batch, probs, n, probabilities, sums);
  }

  absl::Status LogisticLoss(const float* logits, const int32_t* labels,
                            int batch, float grad_scale, float* dlogits,
                            float* probabilities, LossSums* sums) override {
    if (batch <= 0) return absl::OkStatus();
    const size_t n = static_cast<size_t>(batch);
    RETURN_IF_ERROR(PrepareLoss(labels, batch, n));
    float* probs = probabilities != nullptr ? LossFloats(n) : nullptr;
    LogisticKernel<<<Blocks(batch), kThreads, 0, stream_>>>(
        logits, LossLabels(), batch, grad_scale, dlogits, probs,
        LossFloats(2 * n), LossCorrect());
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return FinishLoss(batch, probs, n, probabilities, sums);
  }

 private:
  // Host -> pinned staging -> device, on the stream. The staging buffer is
  // reused only after the previous copy out of it has finished.
  absl::Status UploadBytes(const void* host, size_t bytes, void* dst) {
    if (bytes == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staged_));
    RETURN_IF_ERROR(staging_.Reserve(bytes));
    std::memcpy(staging_.get(), host, bytes);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, staging_.get(), bytes,
                                         cudaMemcpyHostToDevice, stream_));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(staged_, stream_));
    return absl::OkStatus();
  }

  // Device -> pinned staging -> host, after everything queued before.
  absl::Status DownloadBytes(const void* src, size_t bytes, void* host) {
    if (bytes == 0) return Synchronize();
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staged_));
    RETURN_IF_ERROR(staging_.Reserve(bytes));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging_.get(), src, bytes,
                                         cudaMemcpyDeviceToHost, stream_));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    std::memcpy(host, staging_.get(), bytes);
    return absl::OkStatus();
  }

  // A (1, 1, 1, n) descriptor for elementwise cuDNN calls.
  absl::Status FlatDesc(size_t n, TensorDesc* d) {
    if (n > static_cast<size_t>(INT32_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrCat("elementwise call over ", n, " values; at most 2^31-1"));
    }
    return d->Set(1, 1, 1, static_cast<int>(n));
  }

  absl::Status SetConv(const ConvGeometry& g) {
    RETURN_IF_ERROR(x_.Set(g.batch, g.in_channels, g.in_height, g.in_width));
    RETURN_IF_ERROR(
        w_.Set(g.out_channels, g.in_channels, g.kernel_h, g.kernel_w));
    RETURN_IF_ERROR(conv_.Set(g.padding, g.stride));
    int n = 0, c = 0, h = 0, w = 0;
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(
        conv_.d, x_.d, w_.d, &n, &c, &h, &w));
    if (h != g.out_height() || w != g.out_width()) {
      return absl::InternalError(absl::StrCat(
          "cuDNN convolution output ", h, "x", w, " differs from the layer's ",
          g.out_height(), "x", g.out_width()));
    }
    RETURN_IF_ERROR(y_.Set(n, c, h, w));
    return b_.Set(1, g.out_channels, 1, 1);
  }

  absl::Status SetPool(const PoolGeometry& g) {
    RETURN_IF_ERROR(x_.Set(g.batch, g.channels, g.in_height, g.in_width));
    RETURN_IF_ERROR(y_.Set(g.batch, g.channels, g.out_height(), g.out_width()));
    return pool_.Set(g);
  }

  // The first algorithm that cuDNN's heuristics rank as working and
  // deterministic, else the first working one.
  template <typename Perf>
  absl::Status Pick(const Perf* perf, int found, const char* what,
                    const Perf** best) {
    *best = nullptr;
    for (int i = 0; i < found; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
      if (perf[i].determinism == CUDNN_DETERMINISTIC) {
        *best = &perf[i];
        return absl::OkStatus();
      }
      if (*best == nullptr) *best = &perf[i];
    }
    if (*best == nullptr) {
      return absl::InternalError(
          absl::StrCat("cuDNN offers no convolution ", what, " algorithm"));
    }
    return absl::OkStatus();
  }

  // Loss scratch, in one device buffer: 3 float areas of n (log-softmax,
  // probabilities, per-example losses), then batch labels and batch
  // correctness flags.
  absl::Status PrepareLoss(const int32_t* labels, int batch, size_t n) {
    loss_n_ = n;
    loss_batch_ = batch;
    RETURN_IF_ERROR(loss_scratch_.Reserve(3 * n * sizeof(float) +
                                          2 * batch * sizeof(int32_t)));
    return UploadBytes(labels, batch * sizeof(int32_t), LossLabels());
  }
  float* LossFloats(size_t offset) {
    return static_cast<float*>(loss_scratch_.get()) + offset;
  }
  int32_t* LossLabels() {
    return reinterpret_cast<int32_t*>(LossFloats(3 * loss_n_));
  }
  int32_t* LossCorrect() { return LossLabels() + loss_batch_; }

  absl::Status FinishLoss(int batch, const float* probs, size_t n,
                          float* probabilities, LossSums* sums) {
    std::vector<float> loss(batch);
    std::vector<int32_t> correct(batch);
    RETURN_IF_ERROR(DownloadBytes(LossFloats(2 * loss_n_),
                                  batch * sizeof(float), loss.data()));
    RETURN_IF_ERROR(
        DownloadBytes(LossCorrect(), batch * sizeof(int32_t), correct.data()));
    if (probs != nullptr) {
      RETURN_IF_ERROR(DownloadBytes(probs, n * sizeof(float), probabilities));
    }
    for (int i = 0; i < batch; ++i) {
      sums->loss_sum += loss[i];
      sums->correct += correct[i];
    }
    return absl::OkStatus();
  }

  const int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t staged_ = nullptr;  // the last upload left the staging buffer
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  PinnedScratch staging_;
  DeviceScratch workspace_;
  DeviceScratch loss_scratch_;
  size_t loss_n_ = 0;
  int loss_batch_ = 0;
  TensorDesc x_, y_, b_, flat_;
  FilterDesc w_;
  ConvDesc conv_;
  PoolDesc pool_;
  ActivationDesc act_;
};

}  // namespace

bool CudaBackendBuilt() { return true; }

absl::StatusOr<int> CudaDeviceCount() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::InternalError(
        absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(e)));
  }
  return n;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  ASSIGN_OR_RETURN(const int count, CudaDeviceCount());
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", device, " does not exist; ", count, " visible"));
  }
  auto backend = std::make_unique<CudaBackend>(device);
  RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace shardps
