#include "kernels/vector_ops.h"

namespace shardps {

void AddInto(float* __restrict acc, const float* __restrict x, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += x[i];
}

}  // namespace shardps
