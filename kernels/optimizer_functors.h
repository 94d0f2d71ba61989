#ifndef SHARDPS_KERNELS_OPTIMIZER_FUNCTORS_H_
#define SHARDPS_KERNELS_OPTIMIZER_FUNCTORS_H_

#include <cmath>

#include "kernels/hostdevice.h"

namespace shardps {

// Per-element optimizer math, written once for host and device (see
// kernels/hostdevice.h). `g` is the gradient already multiplied by its scale
// (1/N for the mean of N trainers' gradients).

PS_HOSTDEVICE inline void SgdStep(float lr, float g, float* p) { *p -= lr * g; }

// Heavy-ball momentum as in PyTorch: v = mu*v + g; p -= lr*v. Nesterov:
// p -= lr*(g + mu*v), with v already updated.
PS_HOSTDEVICE inline void MomentumStep(float lr, float mu, bool nesterov,
                                       float g, float* p, float* v) {
  const float nv = mu * *v + g;
  *v = nv;
  *p -= lr * (nesterov ? g + mu * nv : nv);
}

// Adagrad (Duchi et al. 2011): acc += g^2; p -= lr*g/(sqrt(acc)+eps).
PS_HOSTDEVICE inline void AdagradStep(float lr, float eps, float g, float* p,
                                      float* acc) {
  const float a = *acc + g * g;
  *acc = a;
  *p -= lr * g / (sqrtf(a) + eps);
}

// Adam (Kingma & Ba 2015) in the form of their section 2's last paragraph:
// `lr_t` already carries the bias corrections,
// lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t).
PS_HOSTDEVICE inline void AdamStep(float lr_t, float beta1, float beta2,
                                   float eps, float g, float* p, float* m,
                                   float* v) {
  const float nm = beta1 * *m + (1.0f - beta1) * g;
  const float nv = beta2 * *v + (1.0f - beta2) * g * g;
  *m = nm;
  *v = nv;
  *p -= lr_t * nm / (sqrtf(nv) + eps);
}

// FTRL-Proximal (McMahan et al. 2013, Algorithm 1), per coordinate. State:
// z and n; the weight is a closed form of them:
//   sigma = (sqrt(n + g^2) - sqrt(n)) / alpha;  z += g - sigma * w;
//   n += g^2;
//   w = 0 if |z| <= l1, else -(z - sign(z) * l1) / ((beta + sqrt(n)) / alpha
//                                                    + l2).
PS_HOSTDEVICE inline void FtrlStep(float alpha, float beta, float l1, float l2,
                                   float g, float* w, float* z, float* n) {
  const float n_old = *n;
  const float n_new = n_old + g * g;
  const float sigma = (sqrtf(n_new) - sqrtf(n_old)) / alpha;
  const float z_new = *z + g - sigma * *w;
  *z = z_new;
  *n = n_new;
  const float az = z_new < 0 ? -z_new : z_new;
  if (az <= l1) {
    *w = 0.0f;
  } else {
    const float sign = z_new < 0 ? -1.0f : 1.0f;
    *w = -(z_new - sign * l1) / ((beta + sqrtf(n_new)) / alpha + l2);
  }
}

}  // namespace shardps

#endif  // SHARDPS_KERNELS_OPTIMIZER_FUNCTORS_H_
