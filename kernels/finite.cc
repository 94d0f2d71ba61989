#include "kernels/finite.h"

#include <cstdint>
#include <cstring>

namespace shardps {

bool AllFinite(const float* x, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

bool AllWithin(const float* x, size_t n, float bound) {
  // For floats without their sign, the bits order as the magnitudes do,
  // with infinity and then NaN above every finite value.
  uint32_t limit;
  std::memcpy(&limit, &bound, sizeof(limit));
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7fffffffu) > limit);
  }
  return bad == 0;
}

}  // namespace shardps
