#include "kernels/call_timing_backend.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace shardps {

template <typename Call>
absl::Status CallTimingBackend::Timed(const char* name, Call call) {
  if (!enabled_) return call();
  const absl::Time start = absl::Now();
  absl::Status s = call();
  if (s.ok()) s = inner_->Synchronize();
  Calls& c = calls_[name];
  c.name = name;
  ++c.count;
  c.total += absl::Now() - start;
  return s;
}

std::vector<CallTimingBackend::Calls> CallTimingBackend::Report() const {
  std::vector<Calls> out;
  for (const auto& [name, c] : calls_) out.push_back(c);
  std::sort(out.begin(), out.end(),
            [](const Calls& a, const Calls& b) { return a.total > b.total; });
  return out;
}

absl::StatusOr<float*> CallTimingBackend::Allocate(size_t n) {
  absl::StatusOr<float*> p;
  absl::Status s = Timed("Allocate", [&] {
    p = inner_->Allocate(n);
    return p.status();
  });
  if (!s.ok()) return s;
  return p;
}

absl::Status CallTimingBackend::Upload(const float* host, size_t n,
                                       float* dst) {
  return Timed("Upload", [&] { return inner_->Upload(host, n, dst); });
}

absl::Status CallTimingBackend::Download(const float* src, size_t n,
                                         float* host) {
  return Timed("Download", [&] { return inner_->Download(src, n, host); });
}

absl::Status CallTimingBackend::DownloadAsync(const float* src, size_t n,
                                              float* host) {
  return Timed("DownloadAsync",
               [&] { return inner_->DownloadAsync(src, n, host); });
}

absl::Status CallTimingBackend::Copy(const float* src, size_t n, float* dst) {
  return Timed("Copy", [&] { return inner_->Copy(src, n, dst); });
}

absl::Status CallTimingBackend::Synchronize() {
  if (!enabled_) return inner_->Synchronize();
  return Timed("Synchronize", [] { return absl::OkStatus(); });
}

absl::Status CallTimingBackend::Gemm(bool trans_a, bool trans_b, int m, int n,
                                     int k, float alpha, const float* a,
                                     int lda, const float* b, int ldb,
                                     float beta, float* c, int ldc) {
  return Timed("Gemm", [&] {
    return inner_->Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta,
                        c, ldc);
  });
}

absl::Status CallTimingBackend::BiasForward(const float* b, int outer,
                                            int channels, int inner,
                                            const float* x, float* y) {
  return Timed("BiasForward", [&] {
    return inner_->BiasForward(b, outer, channels, inner, x, y);
  });
}

absl::Status CallTimingBackend::BiasBackward(const float* dy, int outer,
                                             int channels, int inner,
                                             float* db) {
  return Timed("BiasBackward", [&] {
    return inner_->BiasBackward(dy, outer, channels, inner, db);
  });
}

absl::Status CallTimingBackend::ActivationForward(Activation f, const float* x,
                                                  size_t n, float* y) {
  return Timed("ActivationForward",
               [&] { return inner_->ActivationForward(f, x, n, y); });
}

absl::Status CallTimingBackend::ActivationBackward(Activation f, const float* x,
                                                   const float* y,
                                                   const float* dy, size_t n,
                                                   float* dx) {
  return Timed("ActivationBackward",
               [&] { return inner_->ActivationBackward(f, x, y, dy, n, dx); });
}

absl::Status CallTimingBackend::Conv2dForward(const ConvGeometry& g,
                                              const float* x, const float* w,
                                              const float* b, float* y) {
  return Timed("Conv2dForward",
               [&] { return inner_->Conv2dForward(g, x, w, b, y); });
}

absl::Status CallTimingBackend::Conv2dBackward(const ConvGeometry& g,
                                               const float* x, const float* w,
                                               const float* dy, float* dw,
                                               float* db, float* dx) {
  return Timed("Conv2dBackward",
               [&] { return inner_->Conv2dBackward(g, x, w, dy, dw, db, dx); });
}

absl::Status CallTimingBackend::Pool2dForward(const PoolGeometry& g,
                                              const float* x, float* y) {
  return Timed("Pool2dForward", [&] { return inner_->Pool2dForward(g, x, y); });
}

absl::Status CallTimingBackend::Pool2dBackward(const PoolGeometry& g,
                                               const float* x, const float* y,
                                               const float* dy, float* dx) {
  return Timed("Pool2dBackward",
               [&] { return inner_->Pool2dBackward(g, x, y, dy, dx); });
}

absl::Status CallTimingBackend::DropoutForward(float rate, uint64_t seed,
                                               const float* x, size_t n,
                                               float* mask, float* y) {
  return Timed("DropoutForward", [&] {
    return inner_->DropoutForward(rate, seed, x, n, mask, y);
  });
}

absl::Status CallTimingBackend::DropoutBackward(const float* mask,
                                                const float* dy, size_t n,
                                                float* dx) {
  return Timed("DropoutBackward",
               [&] { return inner_->DropoutBackward(mask, dy, n, dx); });
}

absl::Status CallTimingBackend::SoftmaxCrossEntropy(
    const float* logits, const int32_t* labels, int batch, int classes,
    float grad_scale, float* dlogits, float* probabilities, LossSums* sums) {
  return Timed("SoftmaxCrossEntropy", [&] {
    return inner_->SoftmaxCrossEntropy(logits, labels, batch, classes,
                                       grad_scale, dlogits, probabilities,
                                       sums);
  });
}

absl::Status CallTimingBackend::LogisticLoss(const float* logits,
                                             const int32_t* labels, int batch,
                                             float grad_scale, float* dlogits,
                                             float* probabilities,
                                             LossSums* sums) {
  return Timed("LogisticLoss", [&] {
    return inner_->LogisticLoss(logits, labels, batch, grad_scale, dlogits,
                                probabilities, sums);
  });
}

}  // namespace shardps
