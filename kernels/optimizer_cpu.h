#ifndef SHARDPS_KERNELS_OPTIMIZER_CPU_H_
#define SHARDPS_KERNELS_OPTIMIZER_CPU_H_

#include "absl/types/span.h"

namespace shardps {

// Loops that apply the functors of kernels/optimizer_functors.h to whole
// spans on the CPU. Every gradient element is multiplied by `grad_scale`
// first. All spans of one call have the same length (REQUIRES).
// Thread-compatible: callers synchronise access to the spans.

struct CpuDevice {};

template <typename Device>
struct ApplySgd;
template <typename Device>
struct ApplyMomentum;
template <typename Device>
struct ApplyAdagrad;
template <typename Device>
struct ApplyAdam;
template <typename Device>
struct ApplyFtrl;
template <typename Device>
struct ApplyLars;

template <>
struct ApplySgd<CpuDevice> {
  void operator()(float lr, float grad_scale, absl::Span<const float> g,
                  absl::Span<float> p) const;
};

template <>
struct ApplyMomentum<CpuDevice> {
  void operator()(float lr, float mu, bool nesterov, float grad_scale,
                  absl::Span<const float> g, absl::Span<float> p,
                  absl::Span<float> v) const;
};

template <>
struct ApplyAdagrad<CpuDevice> {
  void operator()(float lr, float eps, float grad_scale,
                  absl::Span<const float> g, absl::Span<float> p,
                  absl::Span<float> acc) const;
};

template <>
struct ApplyAdam<CpuDevice> {
  // `lr_t` carries the bias corrections (see AdamStep).
  void operator()(float lr_t, float beta1, float beta2, float eps,
                  float grad_scale, absl::Span<const float> g,
                  absl::Span<float> p, absl::Span<float> m,
                  absl::Span<float> v) const;
};

template <>
struct ApplyFtrl<CpuDevice> {
  // `p` holds the weights, recomputed from z and n (see FtrlStep).
  void operator()(float alpha, float beta, float l1, float l2, float grad_scale,
                  absl::Span<const float> g, absl::Span<float> p,
                  absl::Span<float> z, absl::Span<float> n) const;
};

template <>
struct ApplyLars<CpuDevice> {
  // LARS's momentum step (You et al. 2017, Algorithm 1), the learning rate
  // inside the velocity: v = mu * v + scaled_lr * (grad_scale * g +
  // weight_decay * p); p -= v. `scaled_lr` is the rate times the table's
  // trust ratio.
  void operator()(float scaled_lr, float mu, float weight_decay,
                  float grad_scale, absl::Span<const float> g,
                  absl::Span<float> p, absl::Span<float> v) const;
};

}  // namespace shardps

#endif  // SHARDPS_KERNELS_OPTIMIZER_CPU_H_
