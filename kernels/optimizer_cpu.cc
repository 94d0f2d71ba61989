#include "kernels/optimizer_cpu.h"

#include <cassert>
#include <cstddef>

#include "kernels/optimizer_functors.h"

namespace shardps {

void ApplySgd<CpuDevice>::operator()(float lr, float grad_scale,
                                     absl::Span<const float> g,
                                     absl::Span<float> p) const {
  assert(g.size() == p.size());
  const float* gp = g.data();
  float* pp = p.data();
  for (size_t i = 0; i < p.size(); ++i) SgdStep(lr, gp[i] * grad_scale, &pp[i]);
}

void ApplyMomentum<CpuDevice>::operator()(float lr, float mu, bool nesterov,
                                          float grad_scale,
                                          absl::Span<const float> g,
                                          absl::Span<float> p,
                                          absl::Span<float> v) const {
  assert(g.size() == p.size() && v.size() == p.size());
  const float* gp = g.data();
  float* pp = p.data();
  float* vp = v.data();
  if (nesterov) {
    for (size_t i = 0; i < p.size(); ++i) {
      MomentumStep(lr, mu, true, gp[i] * grad_scale, &pp[i], &vp[i]);
    }
  } else {
    for (size_t i = 0; i < p.size(); ++i) {
      MomentumStep(lr, mu, false, gp[i] * grad_scale, &pp[i], &vp[i]);
    }
  }
}

void ApplyAdagrad<CpuDevice>::operator()(float lr, float eps, float grad_scale,
                                         absl::Span<const float> g,
                                         absl::Span<float> p,
                                         absl::Span<float> acc) const {
  assert(g.size() == p.size() && acc.size() == p.size());
  // Raw pointers: Debian's abseil hardens Span::operator[] with a bounds
  // check, which keeps the loop from being vectorised.
  const float* gp = g.data();
  float* pp = p.data();
  float* ap = acc.data();
  for (size_t i = 0; i < p.size(); ++i) {
    AdagradStep(lr, eps, gp[i] * grad_scale, &pp[i], &ap[i]);
  }
}

void ApplyAdam<CpuDevice>::operator()(float lr_t, float beta1, float beta2,
                                      float eps, float grad_scale,
                                      absl::Span<const float> g,
                                      absl::Span<float> p, absl::Span<float> m,
                                      absl::Span<float> v) const {
  assert(g.size() == p.size() && m.size() == p.size() && v.size() == p.size());
  const float* gp = g.data();
  float* pp = p.data();
  float* mp = m.data();
  float* vp = v.data();
  for (size_t i = 0; i < p.size(); ++i) {
    AdamStep(lr_t, beta1, beta2, eps, gp[i] * grad_scale, &pp[i], &mp[i],
             &vp[i]);
  }
}

void ApplyFtrl<CpuDevice>::operator()(float alpha, float beta, float l1,
                                      float l2, float grad_scale,
                                      absl::Span<const float> g,
                                      absl::Span<float> p, absl::Span<float> z,
                                      absl::Span<float> n) const {
  assert(g.size() == p.size() && z.size() == p.size() && n.size() == p.size());
  const float* gp = g.data();
  float* pp = p.data();
  float* zp = z.data();
  float* np = n.data();
  for (size_t i = 0; i < p.size(); ++i) {
    FtrlStep(alpha, beta, l1, l2, gp[i] * grad_scale, &pp[i], &zp[i], &np[i]);
  }
}

void ApplyLars<CpuDevice>::operator()(float scaled_lr, float mu,
                                      float weight_decay, float grad_scale,
                                      absl::Span<const float> g,
                                      absl::Span<float> p,
                                      absl::Span<float> v) const {
  assert(g.size() == p.size() && v.size() == p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const float u = g[i] * grad_scale + weight_decay * p[i];
    v[i] = mu * v[i] + scaled_lr * u;
    p[i] -= v[i];
  }
}

}  // namespace shardps
