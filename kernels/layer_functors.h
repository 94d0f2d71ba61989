#ifndef SHARDPS_KERNELS_LAYER_FUNCTORS_H_
#define SHARDPS_KERNELS_LAYER_FUNCTORS_H_

#include <cstdint>

#include "kernels/hostdevice.h"

// Per-element math of the layers and losses that both backends compute with
// their own loops or kernels: written once for host and device (see
// kernels/hostdevice.h). Thread-safe: pure functions.

namespace shardps {

// SplitMix64 of (seed, index): 64 well-mixed bits, the same on every machine.
PS_HOSTDEVICE inline uint64_t MixBits(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Inverted dropout's multiplier of element i: 0 with probability `rate`,
// else 1 / (1 - rate). Uniform with 24 random bits, exact in float.
// REQUIRES: 0 <= rate < 1.
PS_HOSTDEVICE inline float DropoutMask(uint64_t seed, uint64_t i, float rate) {
  const float u =
      static_cast<float>(MixBits(seed, i) >> 40) * (1.0f / 16777216.0f);
  return u >= rate ? 1.0f / (1.0f - rate) : 0.0f;
}

// d(softmax cross-entropy)/dz_j for probability p_j: (p_j - [j == label]),
// times `scale` (1/batch for the mean loss).
PS_HOSTDEVICE inline float SoftmaxXentGrad(float p, bool is_label,
                                           float scale) {
  return (p - (is_label ? 1.0f : 0.0f)) * scale;
}

// Value of one 2-D average pool window (the sum of its inputs) over the
// whole window, padding included.
PS_HOSTDEVICE inline float AveragePoolScale(int window) {
  return 1.0f / static_cast<float>(window * window);
}

}  // namespace shardps

#endif  // SHARDPS_KERNELS_LAYER_FUNCTORS_H_
