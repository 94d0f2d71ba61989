#ifndef SHARDPS_KERNELS_BACKEND_H_
#define SHARDPS_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardps {

// Where a model's layers compute: the CPU (BLAS and threads, CpuBackend) or
// a CUDA device (cuBLAS, cuDNN and own kernels, kernels/cuda/cuda_backend.h).
//
// Buffers are `float*` in the backend's memory: ordinary host memory for the
// CPU backend, device memory for CUDA. Every math call is queued in order on
// the backend (a CUDA stream); Download and Synchronize wait for it. Tensors
// of images are NCHW (batch, channels, height, width), row-major, the layout
// cuDNN calls NCHW; a batch of vectors is (batch x dim) row-major.
//
// Requires external synchronization: one backend serves one model.

enum class Activation { kRelu, kSigmoid, kTanh };
enum class PoolMode { kMax, kAverage };

// Geometry of a 2-D convolution (cross-correlation, as in cuDNN's
// CUDNN_CROSS_CORRELATION) of NCHW input with filters of shape
// {out_channels, in_channels, kernel_h, kernel_w}.
struct ConvGeometry {
  int batch = 0;
  int in_channels = 0;
  int in_height = 0;
  int in_width = 0;
  int out_channels = 0;
  int kernel_h = 0;
  int kernel_w = 0;
  int stride = 1;
  int padding = 0;  // zeros on every side
  int out_height() const {
    return (in_height + 2 * padding - kernel_h) / stride + 1;
  }
  int out_width() const {
    return (in_width + 2 * padding - kernel_w) / stride + 1;
  }
};

// Geometry of 2-D pooling over square windows. Average pooling divides by
// the whole window, padding included (cuDNN's
// CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING); max pooling ignores padding.
struct PoolGeometry {
  int batch = 0;
  int channels = 0;
  int in_height = 0;
  int in_width = 0;
  int window = 2;
  int stride = 2;
  int padding = 0;
  PoolMode mode = PoolMode::kMax;
  int out_height() const {
    return (in_height + 2 * padding - window) / stride + 1;
  }
  int out_width() const {
    return (in_width + 2 * padding - window) / stride + 1;
  }
};

// What a loss computation adds up over a batch.
struct LossSums {
  double loss_sum = 0.0;  // over the examples with a valid label
  int64_t correct = 0;    // examples whose prediction equals the label
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "cuda:<device>".
  virtual std::string name() const = 0;
  // True when buffers are host memory (the model then computes on its host
  // vectors in place, without copies).
  virtual bool host_memory() const = 0;

  // Memory. Allocate returns n zeroed floats (n may be 0).
  virtual absl::StatusOr<float*> Allocate(size_t n) = 0;
  virtual void Free(float* p) = 0;
  // Queues a copy of n floats from `host` to `dst`; `host` may change as
  // soon as Upload returns.
  virtual absl::Status Upload(const float* host, size_t n, float* dst) = 0;
  // Waits for the queued work, then copies n floats to `host` (and delivers
  // every queued DownloadAsync).
  virtual absl::Status Download(const float* src, size_t n, float* host) = 0;
  // Queues a copy of n floats to `host`, which receives them when the next
  // Synchronize or Download returns (and must not be read or written
  // before). Many queued copies cost one wait instead of one each.
  virtual absl::Status DownloadAsync(const float* src, size_t n, float* host) {
    return Download(src, n, host);
  }
  virtual absl::Status Copy(const float* src, size_t n, float* dst) = 0;
  // Waits for the queued work and delivers the queued DownloadAsync copies.
  virtual absl::Status Synchronize() = 0;

  // C = alpha * op(A) * op(B) + beta * C, row-major, as kernels/blas.h Gemm.
  virtual absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                            float alpha, const float* a, int lda,
                            const float* b, int ldb, float beta, float* c,
                            int ldc) = 0;

  // x and y are viewed as [outer][channels][inner]:
  // y[o][c][i] = x[o][c][i] + b[c]. x may equal y.
  virtual absl::Status BiasForward(const float* b, int outer, int channels,
                                   int inner, const float* x, float* y) = 0;
  // db[c] = sum over o and i of dy[o][c][i].
  virtual absl::Status BiasBackward(const float* dy, int outer, int channels,
                                    int inner, float* db) = 0;

  // y = f(x) elementwise over n values.
  virtual absl::Status ActivationForward(Activation f, const float* x, size_t n,
                                         float* y) = 0;
  // dx = dy * f'(x), given x, y = f(x) and dy.
  virtual absl::Status ActivationBackward(Activation f, const float* x,
                                          const float* y, const float* dy,
                                          size_t n, float* dx) = 0;

  // y = conv(x, w) + b: x is NCHW {batch, in_channels, in_height, in_width},
  // w is {out_channels, in_channels, kernel_h, kernel_w}, b {out_channels},
  // y {batch, out_channels, out_height, out_width}.
  virtual absl::Status Conv2dForward(const ConvGeometry& g, const float* x,
                                     const float* w, const float* b,
                                     float* y) = 0;
  // Overwrites dw and db with the gradients of the batch, and writes dx if
  // it is not null.
  virtual absl::Status Conv2dBackward(const ConvGeometry& g, const float* x,
                                      const float* w, const float* dy,
                                      float* dw, float* db, float* dx) = 0;

  virtual absl::Status Pool2dForward(const PoolGeometry& g, const float* x,
                                     float* y) = 0;
  // dx from x, y = pool(x) and dy. Max pooling sends each output's gradient
  // to the first maximum of its window (row-major order).
  virtual absl::Status Pool2dBackward(const PoolGeometry& g, const float* x,
                                      const float* y, const float* dy,
                                      float* dx) = 0;

  // Inverted dropout: mask[i] = DropoutMask(seed, i, rate)
  // (kernels/layer_functors.h), y = x * mask. The same seed gives the same
  // mask on every backend.
  virtual absl::Status DropoutForward(float rate, uint64_t seed, const float* x,
                                      size_t n, float* mask, float* y) = 0;
  // dx = dy * mask.
  virtual absl::Status DropoutBackward(const float* mask, const float* dy,
                                       size_t n, float* dx) = 0;

  // Softmax cross-entropy of `logits` (batch x classes) against host
  // `labels`. Adds the summed loss and the correct predictions of the
  // examples with a label in [0, classes) to `sums`; other examples add
  // nothing and get a zero gradient. If `dlogits` (backend memory) is not
  // null it receives the gradient of the loss summed over the batch times
  // `grad_scale` (1/batch for the mean). If `probabilities` (host memory) is
  // not null it receives the softmax rows.
  virtual absl::Status SoftmaxCrossEntropy(const float* logits,
                                           const int32_t* labels, int batch,
                                           int classes, float grad_scale,
                                           float* dlogits, float* probabilities,
                                           LossSums* sums) = 0;
  // The logistic loss of `logits` (batch x 1) against labels 0/1, in the
  // same terms; probabilities are P(label = 1); prediction: p >= 0.5.
  virtual absl::Status LogisticLoss(const float* logits, const int32_t* labels,
                                    int batch, float grad_scale, float* dlogits,
                                    float* probabilities, LossSums* sums) = 0;
};

// A buffer of backend memory, freed with the backend. Move-only.
class BackendBuffer {
 public:
  BackendBuffer() = default;
  ~BackendBuffer() { Reset(); }
  BackendBuffer(BackendBuffer&& o) noexcept { *this = std::move(o); }
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      backend_ = o.backend_;
      data_ = o.data_;
      size_ = o.size_;
      o.backend_ = nullptr;
      o.data_ = nullptr;
      o.size_ = 0;
    }
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;

  // Replaces the buffer with n zeroed floats of `backend` (which must
  // outlive this buffer).
  absl::Status Allocate(Backend* backend, size_t n) {
    Reset();
    absl::StatusOr<float*> p = backend->Allocate(n);
    if (!p.ok()) return p.status();
    backend_ = backend;
    data_ = *p;
    size_ = n;
    return absl::OkStatus();
  }
  void Reset() {
    if (backend_ != nullptr && data_ != nullptr) backend_->Free(data_);
    backend_ = nullptr;
    data_ = nullptr;
    size_ = 0;
  }
  float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Backend* backend_ = nullptr;
  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_KERNELS_BACKEND_H_
