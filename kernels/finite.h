#ifndef SHARDPS_KERNELS_FINITE_H_
#define SHARDPS_KERNELS_FINITE_H_

#include <cstddef>

namespace shardps {

// True when no value is NaN or Inf. Branch-free over the exponent bits and
// compiled at -O3 with the other kernels (kernels/finite.cc), so it runs at
// memory speed; callers look for the culprit only on failure.
bool AllFinite(const float* x, size_t n);
// True when every |x[i]| <= bound (so none is NaN or infinite either).
// REQUIRES: bound >= 0 and finite.
bool AllWithin(const float* x, size_t n, float bound);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_FINITE_H_
