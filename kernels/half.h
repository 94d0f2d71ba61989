#ifndef SHARDPS_KERNELS_HALF_H_
#define SHARDPS_KERNELS_HALF_H_

#include <cstdint>
#include <cstring>

#include "kernels/hostdevice.h"

namespace shardps {

// float32 <-> IEEE float16 and bfloat16, round to nearest even, NaN kept a
// NaN, overflow to Inf; written once for host and device.

PS_HOSTDEVICE inline uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

PS_HOSTDEVICE inline float BitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

PS_HOSTDEVICE inline uint16_t FloatToBfloat16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  }
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

PS_HOSTDEVICE inline float Bfloat16ToFloat(uint16_t h) {
  return BitsToFloat(static_cast<uint32_t>(h) << 16);
}

PS_HOSTDEVICE inline uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) {
    // >= 65520 rounds to Inf (65504 is the largest half).
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (abs < 0x38800000u) {
    // Subnormal half (|f| < 2^-14), or zero: round abs * 2^24 to an integer.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14 .. 24
    const uint32_t halfway = 1u << (shift - 1);
    const uint32_t rest = mant & ((1u << shift) - 1);
    uint32_t h = mant >> shift;
    if (rest > halfway || (rest == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Normal: rebias the exponent (127 -> 15) and round 23 -> 10 mantissa bits.
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

PS_HOSTDEVICE inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24.
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000u | (mant << 13));
  return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace shardps

#endif  // SHARDPS_KERNELS_HALF_H_
