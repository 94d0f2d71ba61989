#ifndef SHARDPS_KERNELS_CPU_BACKEND_H_
#define SHARDPS_KERNELS_CPU_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kernels/backend.h"

namespace shardps {

// The CPU backend: GEMM on OpenBLAS (kernels/blas.h), convolution as im2col
// and GEMM, everything else as loops over the functors of
// kernels/activation_functors.h and kernels/layer_functors.h. Per-example
// work (im2col, col2im, pooling) is split over `num_threads` threads.
// Buffers are host memory; no call fails. Requires external
// synchronization.
class CpuBackend : public Backend {
 public:
  // num_threads <= 0 is treated as 1. Default: 1. Starts num_threads - 1
  // worker threads, which live as long as the backend.
  explicit CpuBackend(int num_threads = 1);
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  bool host_memory() const override { return true; }

  absl::StatusOr<float*> Allocate(size_t n) override;
  void Free(float* p) override;
  absl::Status Upload(const float* host, size_t n, float* dst) override;
  absl::Status Download(const float* src, size_t n, float* host) override;
  absl::Status Copy(const float* src, size_t n, float* dst) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const float* a, int lda, const float* b,
                    int ldb, float beta, float* c, int ldc) override;
  absl::Status BiasForward(const float* b, int outer, int channels, int inner,
                           const float* x, float* y) override;
  absl::Status BiasBackward(const float* dy, int outer, int channels, int inner,
                            float* db) override;
  absl::Status ActivationForward(Activation f, const float* x, size_t n,
                                 float* y) override;
  absl::Status ActivationBackward(Activation f, const float* x, const float* y,
                                  const float* dy, size_t n,
                                  float* dx) override;
  absl::Status Conv2dForward(const ConvGeometry& g, const float* x,
                             const float* w, const float* b, float* y) override;
  absl::Status Conv2dBackward(const ConvGeometry& g, const float* x,
                              const float* w, const float* dy, float* dw,
                              float* db, float* dx) override;
  absl::Status Pool2dForward(const PoolGeometry& g, const float* x,
                             float* y) override;
  absl::Status Pool2dBackward(const PoolGeometry& g, const float* x,
                              const float* y, const float* dy,
                              float* dx) override;
  absl::Status DropoutForward(float rate, uint64_t seed, const float* x,
                              size_t n, float* mask, float* y) override;
  absl::Status DropoutBackward(const float* mask, const float* dy, size_t n,
                               float* dx) override;
  absl::Status SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                                   int batch, int classes, float grad_scale,
                                   float* dlogits, float* probabilities,
                                   LossSums* sums) override;
  absl::Status LogisticLoss(const float* logits, const int32_t* labels,
                            int batch, float grad_scale, float* dlogits,
                            float* probabilities, LossSums* sums) override;

 private:
  // Calls fn(thread, begin, end) on contiguous slices of [0, n), one per
  // thread, and returns when all are done. Returns the threads used.
  int ParallelFor(int n, const std::function<void(int, int, int)>& fn);
  // Worker `t` (1 .. num_threads - 1) of ParallelFor.
  void WorkerLoop(int t);

  const int num_threads_;
  // ParallelFor's job, handed to the workers by bumping job_id_.
  absl::Mutex pool_mu_;
  uint64_t job_id_ ABSL_GUARDED_BY(pool_mu_) = 0;
  int job_pending_ ABSL_GUARDED_BY(pool_mu_) = 0;  // workers not done yet
  bool stop_ ABSL_GUARDED_BY(pool_mu_) = false;
  const std::function<void(int, int, int)>* job_fn_ ABSL_GUARDED_BY(pool_mu_) =
      nullptr;
  int job_n_ ABSL_GUARDED_BY(pool_mu_) = 0;
  int job_per_ ABSL_GUARDED_BY(pool_mu_) = 0;
  std::vector<std::thread> workers_;
  // Per-thread scratch: im2col columns and partial filter gradients.
  std::vector<std::vector<float>> cols_;
  std::vector<std::vector<float>> partial_dw_;
};

// im2col of one NCHW image x {in_channels, in_height, in_width}:
// col is (in_channels * kernel_h * kernel_w) x (out_height * out_width),
// zero where a window reaches into the padding. Exposed for tests.
void Im2Col(const ConvGeometry& g, const float* x, float* col);
// The adjoint of Im2Col: adds each column entry into dx (same shapes).
void Col2ImAdd(const ConvGeometry& g, const float* col, float* dx);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_CPU_BACKEND_H_
