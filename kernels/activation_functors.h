#ifndef SHARDPS_KERNELS_ACTIVATION_FUNCTORS_H_
#define SHARDPS_KERNELS_ACTIVATION_FUNCTORS_H_

#include <cmath>

#include "kernels/hostdevice.h"

// Per-element activation and loss math, written once for host and device.
// Thread-safe: pure functions.
//
// The backward forms take the forward OUTPUT y (not the input), so a layer
// keeps only its output buffer: dx = dy * f'(x) expressed through y.

namespace shardps {

PS_HOSTDEVICE inline float ReluForward(float x) { return x > 0.0f ? x : 0.0f; }

// y is the forward output; y > 0 exactly where x > 0.
PS_HOSTDEVICE inline float ReluBackward(float y, float dy) {
  return y > 0.0f ? dy : 0.0f;
}

// 1 / (1 + exp(-x)), evaluated without overflow for large |x|.
PS_HOSTDEVICE inline float SigmoidForward(float x) {
  if (x >= 0.0f) {
    return 1.0f / (1.0f + expf(-x));
  }
  const float e = expf(x);
  return e / (1.0f + e);
}

// dx = dy * y * (1 - y), y = sigmoid(x).
PS_HOSTDEVICE inline float SigmoidBackward(float y, float dy) {
  return dy * y * (1.0f - y);
}

PS_HOSTDEVICE inline float TanhForward(float x) { return tanhf(x); }

// dx = dy * (1 - y^2), y = tanh(x).
PS_HOSTDEVICE inline float TanhBackward(float y, float dy) {
  return dy * (1.0f - y * y);
}

// log(sigmoid(x)) = -log(1 + exp(-x)), stable for any x.
PS_HOSTDEVICE inline float LogSigmoid(float x) {
  return fminf(x, 0.0f) - log1pf(expf(-fabsf(x)));
}

// Logistic (binary cross-entropy) loss of logit z against label t in {0, 1}:
// -t*log(sigmoid(z)) - (1-t)*log(1-sigmoid(z)) = max(z,0) - z*t +
// log(1+exp(-|z|)). Stable for any z.
PS_HOSTDEVICE inline float LogisticLoss(float z, float t) {
  return fmaxf(z, 0.0f) - z * t + log1pf(expf(-fabsf(z)));
}

// d LogisticLoss / dz = sigmoid(z) - t.
PS_HOSTDEVICE inline float LogisticLossGrad(float z, float t) {
  return SigmoidForward(z) - t;
}

}  // namespace shardps

#endif  // SHARDPS_KERNELS_ACTIVATION_FUNCTORS_H_
