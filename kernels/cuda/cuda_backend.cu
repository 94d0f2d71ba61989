// The CUDA backend (see kernels/cuda/cuda_backend.h). Stream contract: every
// call of a CudaBackend is queued on its stream, in call order; Upload returns
// once the host data is in the pinned staging arena (the copy to the device
// runs on the stream); DownloadAsync queues a copy that reaches the host at
// the next Synchronize or Download, which wait for the stream.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/cuda_status.h"

namespace shardps {
namespace {

using cuda_resources::ActivationDesc;
using cuda_resources::ConvDesc;
using cuda_resources::DeviceScratch;
using cuda_resources::FilterDesc;
using cuda_resources::PinnedScratch;
using cuda_resources::PoolDesc;
using cuda_resources::TensorDesc;

// A convolution's geometry, as ConvGeometry's fields in order.
using ConvKey = std::array<int, 9>;

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  ~CudaBackend() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
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

  absl::Status DownloadAsync(const float* src, size_t n, float* host) override {
    return QueueDownload(src, n * sizeof(float), host);
  }

  absl::Status Copy(const float* src, size_t n, float* dst) override {
    if (n == 0 || src == dst) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, n * sizeof(float),
                                         cudaMemcpyDeviceToDevice, stream_));
    return absl::OkStatus();
  }

  absl::Status Synchronize() override { return SyncAndDeliver(); }

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
    CUDA_RETURN_IF_ERROR(
        cuda_kernels::BiasForward(stream_, b, channels, inner, total, x, y));
    return absl::OkStatus();
  }

  absl::Status BiasBackward(const float* dy, int outer, int channels, int inner,
                            float* db) override {
    if (channels <= 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(
        cuda_kernels::BiasBackward(stream_, dy, outer, channels, inner, db));
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
    ASSIGN_OR_RETURN(
        const auto best,
        ChooseAlgo<cudnnConvolutionFwdAlgoPerf_t>(
            g, &forward_algos_, "forward", [&](int n, int* found, auto* perf) {
              return cudnnGetConvolutionForwardAlgorithm_v7(
                  cudnn_, x_.d, w_.d, conv_.d, y_.d, n, found, perf);
            }));
    const float one = 1.0f, zero = 0.0f;
    CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(
        cudnn_, &one, x_.d, x, w_.d, w, conv_.d, best.algo, workspace_.get(),
        best.memory, &zero, y_.d, y));
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
    ASSIGN_OR_RETURN(const auto fbest,
                     ChooseAlgo<cudnnConvolutionBwdFilterAlgoPerf_t>(
                         g, &filter_algos_, "backward filter",
                         [&](int n, int* found, auto* perf) {
                           return cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                               cudnn_, x_.d, y_.d, conv_.d, w_.d, n, found,
                               perf);
                         }));
    CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
        cudnn_, &one, x_.d, x, y_.d, dy, conv_.d, fbest.algo, workspace_.get(),
        fbest.memory, &zero, w_.d, dw));
    if (dx == nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(const auto dbest,
                     ChooseAlgo<cudnnConvolutionBwdDataAlgoPerf_t>(
                         g, &data_algos_, "backward data",
                         [&](int n, int* found, auto* perf) {
                           return cudnnGetConvolutionBackwardDataAlgorithm_v7(
                               cudnn_, w_.d, y_.d, conv_.d, x_.d, n, found,
                               perf);
                         }));
    CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
        cudnn_, &one, w_.d, w, y_.d, dy, conv_.d, dbest.algo, workspace_.get(),
        dbest.memory, &zero, x_.d, dx));
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
    CUDA_RETURN_IF_ERROR(
        cuda_kernels::DropoutForward(stream_, rate, seed, x, n, mask, y));
    return absl::OkStatus();
  }

  absl::Status DropoutBackward(const float* mask, const float* dy, size_t n,
                               float* dx) override {
    if (n == 0) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(cuda_kernels::Multiply(stream_, dy, mask, n, dx));
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
    CUDA_RETURN_IF_ERROR(cuda_kernels::SoftmaxXent(
        stream_, logp, LossLabels(), batch, classes, grad_scale, dlogits, probs,
        LossFloats(2 * n), LossCorrect()));
    return FinishLoss(batch, probs, n, probabilities, sums);
  }

  absl::Status LogisticLoss(const float* logits, const int32_t* labels,
                            int batch, float grad_scale, float* dlogits,
                            float* probabilities, LossSums* sums) override {
    if (batch <= 0) return absl::OkStatus();
    const size_t n = static_cast<size_t>(batch);
    RETURN_IF_ERROR(PrepareLoss(labels, batch, n));
    float* probs = probabilities != nullptr ? LossFloats(n) : nullptr;
    CUDA_RETURN_IF_ERROR(cuda_kernels::Logistic(
        stream_, logits, LossLabels(), batch, grad_scale, dlogits, probs,
        LossFloats(2 * n), LossCorrect()));
    return FinishLoss(batch, probs, n, probabilities, sums);
  }

 private:
  // Transfers go through one pinned staging arena: each upload and queued
  // download takes the next area of it, and the arena is used from its
  // start again once the stream has been synchronized (no queued copy
  // touches it then). So an upload never waits for an earlier one, and a
  // step's downloads cost one wait. The arena grows (at a synchronization)
  // while a step's transfers overflow it, up to kMaxStagingBytes; beyond,
  // an overflow synchronizes and starts over.
  static constexpr size_t kMinStagingBytes = size_t{1} << 20;
  static constexpr size_t kMaxStagingBytes = size_t{256} << 20;

  absl::StatusOr<char*> StageArea(size_t bytes) {
    const size_t need = (bytes + 255) & ~size_t{255};
    if (staged_bytes_ + need > staging_.size()) {
      const size_t wanted = std::min(
          kMaxStagingBytes, std::max({kMinStagingBytes, 2 * staging_.size(),
                                      staged_bytes_ + need}));
      RETURN_IF_ERROR(SyncAndDeliver());
      RETURN_IF_ERROR(staging_.Reserve(std::max(wanted, need)));
    }
    char* area = static_cast<char*>(staging_.get()) + staged_bytes_;
    staged_bytes_ += need;
    return area;
  }

  // Waits for the stream, hands the queued downloads to their host
  // buffers, and frees the staging arena for reuse.
  absl::Status SyncAndDeliver() {
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    for (const QueuedDownload& d : queued_) {
      std::memcpy(d.host, d.staged, d.bytes);
    }
    queued_.clear();
    staged_bytes_ = 0;
    return absl::OkStatus();
  }

  // Host -> pinned staging -> device, on the stream.
  absl::Status UploadBytes(const void* host, size_t bytes, void* dst) {
    if (bytes == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(char* area, StageArea(bytes));
    std::memcpy(area, host, bytes);
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, area, bytes, cudaMemcpyHostToDevice, stream_));
    return absl::OkStatus();
  }

  // Device -> pinned staging on the stream; -> host at the next
  // SyncAndDeliver.
  absl::Status QueueDownload(const void* src, size_t bytes, void* host) {
    if (bytes == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(char* area, StageArea(bytes));
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(area, src, bytes, cudaMemcpyDeviceToHost, stream_));
    queued_.push_back(QueuedDownload{area, host, bytes});
    return absl::OkStatus();
  }

  // Device -> host, after everything queued before.
  absl::Status DownloadBytes(const void* src, size_t bytes, void* host) {
    RETURN_IF_ERROR(QueueDownload(src, bytes, host));
    return SyncAndDeliver();
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

  // Asks cuDNN's heuristics for the convolution's `what` algorithms (`find`
  // is one of the cudnnGetConvolution*Algorithm_v7 calls, given room for
  // `n` answers), takes the first that works and is deterministic, else the
  // first that works, and makes room for its workspace. The choice is kept
  // in `cache` per geometry: cuDNN 9 answers such a query in about as long
  // as a small step's whole compute.
  template <typename Perf, typename Find>
  absl::StatusOr<Perf> ChooseAlgo(const ConvGeometry& g,
                                  std::map<ConvKey, Perf>* cache,
                                  const char* what, Find find) {
    const ConvKey key = {g.batch,    g.in_channels,  g.in_height,
                         g.in_width, g.out_channels, g.kernel_h,
                         g.kernel_w, g.stride,       g.padding};
    auto it = cache->find(key);
    if (it == cache->end()) {
      constexpr int kMaxAlgos = 8;
      Perf perf[kMaxAlgos];
      int found = 0;
      CUDNN_RETURN_IF_ERROR(find(kMaxAlgos, &found, perf));
      const Perf* best = nullptr;
      for (int i = 0; i < found && i < kMaxAlgos; ++i) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
        if (perf[i].determinism == CUDNN_DETERMINISTIC) {
          best = &perf[i];
          break;
        }
        if (best == nullptr) best = &perf[i];
      }
      if (best == nullptr) {
        return absl::InternalError(
            absl::StrCat("cuDNN offers no convolution ", what, " algorithm"));
      }
      it = cache->emplace(key, *best).first;
    }
    RETURN_IF_ERROR(workspace_.Reserve(it->second.memory));
    return it->second;
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
    RETURN_IF_ERROR(QueueDownload(LossFloats(2 * loss_n_),
                                  batch * sizeof(float), loss.data()));
    RETURN_IF_ERROR(
        QueueDownload(LossCorrect(), batch * sizeof(int32_t), correct.data()));
    if (probs != nullptr) {
      RETURN_IF_ERROR(QueueDownload(probs, n * sizeof(float), probabilities));
    }
    RETURN_IF_ERROR(SyncAndDeliver());
    for (int i = 0; i < batch; ++i) {
      sums->loss_sum += loss[i];
      sums->correct += correct[i];
    }
    return absl::OkStatus();
  }

  const int device_;
  // A queued download: `bytes` at `staged` go to `host` at SyncAndDeliver.
  struct QueuedDownload {
    const char* staged;
    void* host;
    size_t bytes;
  };

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  PinnedScratch staging_;    // the arena of StageArea
  size_t staged_bytes_ = 0;  // taken since the last SyncAndDeliver
  std::vector<QueuedDownload> queued_;
  DeviceScratch workspace_;
  // The algorithms chosen per convolution geometry (ChooseAlgo).
  std::map<ConvKey, cudnnConvolutionFwdAlgoPerf_t> forward_algos_;
  std::map<ConvKey, cudnnConvolutionBwdFilterAlgoPerf_t> filter_algos_;
  std::map<ConvKey, cudnnConvolutionBwdDataAlgoPerf_t> data_algos_;
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

namespace {

absl::Status CheckDevice(int device) {
  ASSIGN_OR_RETURN(const int count, CudaDeviceCount());
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", device, " does not exist; ", count, " visible"));
  }
  return absl::OkStatus();
}

// "13.0" of CUDA's 13000.
std::string CudaVersion(int v) {
  return absl::StrCat(v / 1000, ".", (v % 1000) / 10);
}

// "9.13.0" of cuDNN 9's 91300.
std::string CudnnVersion(size_t v) {
  return absl::StrCat(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}

}  // namespace

absl::StatusOr<std::string> DescribeCudaDevice(int device) {
  RETURN_IF_ERROR(CheckDevice(device));
  cudaDeviceProp p;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&p, device));
  int driver = 0, runtime = 0;
  CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&driver));
  CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&runtime));
  int blas[3] = {0, 0, 0};
  CUBLAS_RETURN_IF_ERROR(cublasGetProperty(MAJOR_VERSION, &blas[0]));
  CUBLAS_RETURN_IF_ERROR(cublasGetProperty(MINOR_VERSION, &blas[1]));
  CUBLAS_RETURN_IF_ERROR(cublasGetProperty(PATCH_LEVEL, &blas[2]));
  return absl::StrCat(
      "cuda:", device, " ", p.name, " (sm_", p.major, p.minor, ", ",
      p.multiProcessorCount, " SMs, ",
      absl::SixDigits(std::round(p.totalGlobalMem / 107374182.4) / 10),
      " GiB); driver for CUDA ", CudaVersion(driver), ", runtime ",
      CudaVersion(runtime), ", cuBLAS ", blas[0], ".", blas[1], ".", blas[2],
      ", cuDNN ", CudnnVersion(cudnnGetVersion()), " (built with CUDA ",
      CudaVersion(CUDART_VERSION), ", cuDNN ", CudnnVersion(CUDNN_VERSION),
      ")");
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  RETURN_IF_ERROR(CheckDevice(device));
  auto backend = std::make_unique<CudaBackend>(device);
  RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace shardps
