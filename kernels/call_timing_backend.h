#ifndef SHARDPS_KERNELS_CALL_TIMING_BACKEND_H_
#define SHARDPS_KERNELS_CALL_TIMING_BACKEND_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "kernels/backend.h"

namespace shardps {

// A Backend that forwards every call to another one and waits for it
// (Synchronize) before it returns, adding up the wall time per kind of
// call: where a step's time goes, host overhead and device work together.
// The waits make the whole slower than the inner backend's, so it is for
// breakdowns (tools/step_timer --per_call), not for timing steps.
// Thread-compatible, as every Backend.
class CallTimingBackend : public Backend {
 public:
  explicit CallTimingBackend(std::unique_ptr<Backend> inner)
      : inner_(std::move(inner)) {}

  struct Calls {
    std::string name;  // "Gemm", "Conv2dBackward", ...
    int64_t count = 0;
    absl::Duration total;
  };
  // Every kind of call made so far, the longest total first.
  std::vector<Calls> Report() const;
  void Reset() { calls_.clear(); }
  // Disabled, calls go through untimed and without waiting (the default:
  // enabled).
  void set_enabled(bool enabled) { enabled_ = enabled; }

  std::string name() const override { return inner_->name(); }
  bool host_memory() const override { return inner_->host_memory(); }
  absl::StatusOr<float*> Allocate(size_t n) override;
  void Free(float* p) override { inner_->Free(p); }
  absl::Status Upload(const float* host, size_t n, float* dst) override;
  absl::Status Download(const float* src, size_t n, float* host) override;
  absl::Status DownloadAsync(const float* src, size_t n, float* host) override;
  absl::Status Copy(const float* src, size_t n, float* dst) override;
  absl::Status Synchronize() override;
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
  // Runs `call`, then waits for the inner backend; adds the time to `name`.
  template <typename Call>
  absl::Status Timed(const char* name, Call call);

  std::unique_ptr<Backend> inner_;
  bool enabled_ = true;
  std::map<std::string, Calls> calls_;
};

}  // namespace shardps

#endif  // SHARDPS_KERNELS_CALL_TIMING_BACKEND_H_
