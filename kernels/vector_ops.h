#ifndef SHARDPS_KERNELS_VECTOR_OPS_H_
#define SHARDPS_KERNELS_VECTOR_OPS_H_

#include <cstddef>

namespace shardps {

// acc[i] += x[i] for i < n. Compiled at -O3 with the other kernels
// (kernels/vector_ops.cc): at -O2 GCC leaves such a loop scalar. The sync
// barrier sums the trainers' gradients with it.
void AddInto(float* acc, const float* x, size_t n);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_VECTOR_OPS_H_
