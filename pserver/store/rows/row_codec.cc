#include "pserver/store/rows/row_codec.h"

#include <cmath>
#include <cstring>

#include "common/placement/shard_map.h"

namespace shardps {
namespace {

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float FromBits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

// 16 random bits for element i of a row encoded with `seed`: one hash
// gives four elements' bits.
inline uint32_t RandomBits(uint64_t seed, int i) {
  const uint64_t h =
      Mix64(seed + (static_cast<uint64_t>(i / 4) + 1) * 0x9E3779B97F4A7C15ULL);
  return static_cast<uint32_t>(h >> (16 * (i % 4))) & 0xFFFF;
}

constexpr uint16_t kBf16Max = 0x7F7F;
constexpr uint16_t kFp16Max = 0x7BFF;

}  // namespace

RowCodec::RowCodec(SparseTableOptions::RowStorage type) : type_(type) {}

uint16_t RowCodec::ToBf16(float x, uint32_t random16) {
  const uint32_t b = Bits(x);
  if (std::isnan(x)) return static_cast<uint16_t>((b >> 16) | 0x40);
  const uint32_t sign = b & 0x80000000u;
  const uint32_t mag = b & 0x7FFFFFFFu;
  // Adding r in [0, 2^16) to the magnitude carries into the kept bits
  // with probability (dropped bits) / 2^16: rounds the magnitude up so.
  uint32_t rounded = (mag + (random16 & 0xFFFF)) >> 16;
  if (rounded >= 0x7F80 && mag < 0x7F800000u) rounded = kBf16Max;
  return static_cast<uint16_t>((sign >> 16) | rounded);
}

uint16_t RowCodec::ToBf16Nearest(float x) {
  const uint32_t b = Bits(x);
  if (std::isnan(x)) return static_cast<uint16_t>((b >> 16) | 0x40);
  const uint32_t sign = b & 0x80000000u;
  const uint32_t mag = b & 0x7FFFFFFFu;
  uint32_t rounded = (mag + 0x7FFF + ((mag >> 16) & 1)) >> 16;
  if (rounded >= 0x7F80 && mag < 0x7F800000u) rounded = kBf16Max;
  return static_cast<uint16_t>((sign >> 16) | rounded);
}

float RowCodec::FromBf16(uint16_t h) {
  return FromBits(static_cast<uint32_t>(h) << 16);
}

uint16_t RowCodec::ToFp16(float x, uint32_t random16, bool nearest) {
  const uint32_t b = Bits(x);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  if (std::isnan(x)) return sign | 0x7E00;
  const float a = std::fabs(x);
  if (std::isinf(x)) return sign | 0x7C00;
  if (a >= 65504.0f) return sign | kFp16Max;  // saturated
  uint32_t h;
  if (a < 6.103515625e-05f) {         // 2^-14: a subnormal half, units of 2^-24
    const float q = a * 16777216.0f;  // exact: a scaling by 2^24
    const float whole = std::floor(q);
    const float frac = q - whole;
    h = static_cast<uint32_t>(whole);
    if (nearest) {
      h = static_cast<uint32_t>(std::nearbyint(q));  // ties to even
    } else if (frac * 65536.0f > static_cast<float>(random16 & 0xFFFF)) {
      ++h;
    }
  } else {
    const uint32_t mag = b & 0x7FFFFFFFu;
    const int32_t e = static_cast<int32_t>(mag >> 23) - 127 + 15;
    const uint32_t mant = mag & 0x7FFFFF;
    const uint32_t rest = mant & 0x1FFF;  // the 13 bits dropped
    h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
    if (nearest) {
      h += (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ? 1 : 0;
    } else {
      h += (rest + ((random16 & 0xFFFF) >> 3)) >> 13;
    }
  }
  if (h > kFp16Max) h = kFp16Max;
  return static_cast<uint16_t>(sign | h);
}

float RowCodec::FromFp16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1F;
  const uint32_t m = h & 0x3FF;
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-08f;  // 2^-24
    return sign != 0 ? -v : v;
  }
  if (e == 31) return FromBits(sign | 0x7F800000u | (m << 13));
  return FromBits(sign | ((e - 15 + 127) << 23) | (m << 13));
}

void RowCodec::Decode(const void* src, int n, float* dst) const {
  if (is_float32()) {
    std::memcpy(dst, src, sizeof(float) * n);
    return;
  }
  const uint16_t* h = static_cast<const uint16_t*>(src);
  if (type_ == SparseTableOptions::BF16) {
    for (int i = 0; i < n; ++i) dst[i] = FromBf16(h[i]);
  } else {
    for (int i = 0; i < n; ++i) dst[i] = FromFp16(h[i]);
  }
}

void RowCodec::EncodeNearest(const float* src, int n, void* dst) const {
  if (is_float32()) {
    std::memcpy(dst, src, sizeof(float) * n);
    return;
  }
  uint16_t* h = static_cast<uint16_t*>(dst);
  if (type_ == SparseTableOptions::BF16) {
    for (int i = 0; i < n; ++i) h[i] = ToBf16Nearest(src[i]);
  } else {
    for (int i = 0; i < n; ++i) h[i] = ToFp16(src[i], 0, /*nearest=*/true);
  }
}

void RowCodec::EncodeStochastic(const float* src, int n, uint64_t seed,
                                void* dst) const {
  if (is_float32()) {
    std::memcpy(dst, src, sizeof(float) * n);
    return;
  }
  uint16_t* h = static_cast<uint16_t*>(dst);
  if (type_ == SparseTableOptions::BF16) {
    for (int i = 0; i < n; ++i) h[i] = ToBf16(src[i], RandomBits(seed, i));
  } else {
    for (int i = 0; i < n; ++i) {
      h[i] = ToFp16(src[i], RandomBits(seed, i), /*nearest=*/false);
    }
  }
}

}  // namespace shardps
