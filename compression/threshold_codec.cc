#include "compression/threshold_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace shardps {
namespace {

static_assert(sizeof(float) == sizeof(int32_t), "float must be 32 bits");

using codec::AbsBits;
using codec::AtLeast;
using codec::BitmapCode;
using codec::BitmapCodeValue;
using codec::BitmapHalf;
using codec::FloatBits;
using codec::NonFiniteAbsBits;
using codec::ThresholdEntry;
using codec::ThresholdEntryValue;

absl::Status CheckEncodeArgs(size_t n, float threshold) {
  if (!(threshold > 0.0f) || !std::isfinite(threshold)) {
    return absl::InvalidArgumentError(
        absl::StrCat("threshold must be finite and > 0, got ", threshold));
  }
  if (n > static_cast<uint64_t>(kCodecMaxElements)) {
    return absl::InvalidArgumentError(
        absl::StrCat("residual has ", n, " elements; the codec allows at most ",
                     kCodecMaxElements));
  }
  return absl::OkStatus();
}

struct Count {
  int64_t selected = 0;
  bool non_finite = false;
};

// Elements per block of the count pass; a block's count fits in a uint8_t.
constexpr size_t kCountBlock = 64;

// The count pass is compute-bound at SSE2 width; on x86-64 it is also built
// for AVX2 and picked at load time.
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define PS_CODEC_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef PS_CODEC_CLONES
#define PS_CODEC_CLONES
#endif

// One read of r: k = #{|r_i| >= t}, whether any r_i is NaN or Inf, and (if
// `block_counts` is not null) k per block of kCountBlock elements, so the
// threshold pass visits only blocks with something to send. The inner loop
// is branch-free and vectorises.
PS_CODEC_CLONES uint32_t CountBlocks(const float* r, size_t blocks,
                                     uint32_t t_bits, uint8_t* counts,
                                     int64_t* selected) {
  uint32_t bad = 0;
  int64_t total = 0;
  for (size_t blk = 0; blk < blocks; ++blk) {
    const float* v = r + blk * kCountBlock;
    uint32_t k = 0;
    for (size_t i = 0; i < kCountBlock; ++i) {
      const uint32_t a = AbsBits(v[i]);
      k += AtLeast(a, t_bits) ? 1u : 0u;
      bad |= NonFiniteAbsBits(a) ? 1u : 0u;
    }
    if (counts != nullptr) counts[blk] = static_cast<uint8_t>(k);
    total += k;
  }
  *selected += total;
  return bad;
}

Count CountSelected(const float* r, size_t n, uint32_t t_bits,
                    std::vector<uint8_t>* block_counts) {
  Count c;
  const size_t full = n / kCountBlock;
  const size_t blocks = (n + kCountBlock - 1) / kCountBlock;
  uint8_t* counts = nullptr;
  if (block_counts != nullptr) {
    block_counts->resize(blocks);
    counts = block_counts->data();
  }
  uint32_t bad = CountBlocks(r, full, t_bits, counts, &c.selected);
  if (blocks > full) {  // The partial last block.
    uint32_t k = 0;
    for (size_t i = full * kCountBlock; i < n; ++i) {
      const uint32_t a = AbsBits(r[i]);
      k += AtLeast(a, t_bits) ? 1u : 0u;
      bad |= NonFiniteAbsBits(a) ? 1u : 0u;
    }
    if (counts != nullptr) counts[full] = static_cast<uint8_t>(k);
    c.selected += k;
  }
  c.non_finite = bad != 0;
  return c;
}

// Bit i set when |v[i]| >= t, for a full block of 64.
uint64_t SelectedMask64(const float* v, uint32_t t_bits) {
#if defined(__SSE2__)
  const __m128i abs_mask = _mm_set1_epi32(0x7fffffff);
  const __m128i t_minus_1 = _mm_set1_epi32(static_cast<int32_t>(t_bits - 1));
  uint64_t mask = 0;
  for (int g = 0; g < 16; ++g) {
    const __m128i a =
        _mm_and_si128(_mm_castps_si128(_mm_loadu_ps(v + 4 * g)), abs_mask);
    mask |= static_cast<uint64_t>(_mm_movemask_ps(
                _mm_castsi128_ps(_mm_cmpgt_epi32(a, t_minus_1))))
            << (4 * g);
  }
  return mask;
#else
  uint64_t mask = 0;
  for (int i = 0; i < 64; ++i) {
    mask |= static_cast<uint64_t>(AtLeast(AbsBits(v[i]), t_bits)) << i;
  }
  return mask;
#endif
}

void WriteHeader(int32_t count_or_n, size_t n, float t, CodecFormat fmt,
                 int32_t* h) {
  h[0] = count_or_n;
  h[1] = static_cast<int32_t>(n);
  h[2] = static_cast<int32_t>(FloatBits(t));
  h[3] = static_cast<int32_t>(fmt);
}

// Appends a threshold message of the first k selected elements in index
// order and subtracts +-t from them. `block_counts` is CountSelected's.
// REQUIRES: at least k are selected.
void EncodeThresholdPass(float* r, size_t n, float t, int64_t k,
                         const std::vector<uint8_t>& block_counts,
                         std::vector<int32_t>* out) {
  const size_t old = out->size();
  out->resize(old + ThresholdMessageInts(static_cast<size_t>(k)));
  int32_t* msg = out->data() + old;
  WriteHeader(static_cast<int32_t>(k), n, t, CodecFormat::kThreshold, msg);
  int32_t* entries = msg + kCodecHeaderInts;
  const uint32_t t_bits = FloatBits(t);
  int64_t written = 0;
  const size_t blocks = block_counts.size();
  const uint8_t* counts = block_counts.data();
  for (size_t blk = 0; blk < blocks && written < k; ++blk) {
    // Skip 8 empty blocks at a time.
    if (blk % 8 == 0 && blk + 8 <= blocks) {
      uint64_t eight;
      std::memcpy(&eight, counts + blk, sizeof(eight));
      if (eight == 0) {
        blk += 7;
        continue;
      }
    }
    if (counts[blk] == 0) continue;
    const size_t base = blk * kCountBlock;
    if (base + kCountBlock <= n) {
      // Visit only the selected elements, in index order.
      uint64_t mask = SelectedMask64(r + base, t_bits);
      while (mask != 0 && written < k) {
        const size_t i = base + static_cast<size_t>(__builtin_ctzll(mask));
        mask &= mask - 1;
        const int32_t e = ThresholdEntry(r[i], t_bits, static_cast<int32_t>(i));
        entries[written++] = e;
        r[i] = r[i] - ThresholdEntryValue(e, t);
      }
      continue;
    }
    for (size_t i = base; i < n && written < k; ++i) {
      const int32_t e = ThresholdEntry(r[i], t_bits, static_cast<int32_t>(i));
      if (e != 0) {
        entries[written++] = e;
        r[i] = r[i] - ThresholdEntryValue(e, t);
      }
    }
  }
}

// Set bits of a 16-bit value, without a libgcc call on baseline x86-64.
inline uint32_t Popcount16(uint32_t x) {
  x = x - ((x >> 1) & 0x5555u);
  x = (x & 0x3333u) + ((x >> 2) & 0x3333u);
  x = (x + (x >> 4)) & 0x0f0fu;
  return (x + (x >> 8)) & 0x1fu;
}

// Bitmap word of r[0..len) (len <= 16), subtracting what it encodes: the
// scalar form of the per-element math, for tails and non-SSE2 builds.
uint32_t EncodeBitmapWordScalar(float* r, size_t len, float t, uint32_t t_bits,
                                float half, uint32_t half_bits) {
  uint32_t word = 0;
  for (uint32_t b = 0; b < len; ++b) {
    const uint32_t code = BitmapCode(r[b], t_bits, half_bits);
    word |= ((code & 1u) << b) | ((code >> 1) << (b + 16));
    r[b] = r[b] - BitmapCodeValue(code, t, half);
  }
  return word;
}

void DecodeBitmapWordScalar(uint32_t word, size_t len, float t, float half,
                            float* out) {
  for (size_t b = 0; b < len; ++b) {
    const uint32_t code = ((word >> b) & 1u) | (((word >> (b + 16)) & 1u) << 1);
    if (code != 0) out[b] += BitmapCodeValue(code, t, half);
  }
}

#if defined(__SSE2__)
// SSE2 forms of the same math (codec::BitmapCode and BitmapCodeValue), four
// elements at a time; the tests check them against the scalar definition.
uint32_t EncodeBitmapWord16(float* r, uint32_t t_bits, uint32_t half_bits) {
  const __m128i abs_mask = _mm_set1_epi32(0x7fffffff);
  const __m128i sign_mask = _mm_set1_epi32(static_cast<int32_t>(0x80000000u));
  const __m128i t_minus_1 = _mm_set1_epi32(static_cast<int32_t>(t_bits - 1));
  const __m128i t_vec = _mm_set1_epi32(static_cast<int32_t>(t_bits));
  const __m128i neg_half =
      _mm_set1_epi32(static_cast<int32_t>(half_bits | 0x80000000u));
  // Sign-only: negative x (int bits INT_MIN | a) with max(t/2, +0 excluded)
  // <= a < t, i.e. INT_MIN + max(half_bits, 1) <= bits < INT_MIN + t_bits.
  const uint32_t half_lo = half_bits > 0 ? half_bits : 1u;
  const __m128i neg_t =
      _mm_set1_epi32(static_cast<int32_t>(0x80000000u + t_bits));
  const __m128i neg_half_lo_minus_1 =
      _mm_set1_epi32(static_cast<int32_t>(0x80000000u + half_lo - 1u));
  uint32_t present_bits = 0, sign_bits = 0, half_bits_out = 0;
  for (int g = 0; g < 4; ++g) {
    const __m128 x = _mm_loadu_ps(r + 4 * g);
    const __m128i xi = _mm_castps_si128(x);
    // a >= t_bits as a signed compare (see AtLeast).
    const __m128i present =
        _mm_cmpgt_epi32(_mm_and_si128(xi, abs_mask), t_minus_1);
    const __m128i half = _mm_and_si128(
        _mm_cmpgt_epi32(neg_t, xi), _mm_cmpgt_epi32(xi, neg_half_lo_minus_1));
    const __m128i s = _mm_or_si128(
        _mm_and_si128(present,
                      _mm_or_si128(t_vec, _mm_and_si128(xi, sign_mask))),
        _mm_and_si128(half, neg_half));
    _mm_storeu_ps(r + 4 * g, _mm_sub_ps(x, _mm_castsi128_ps(s)));
    present_bits |=
        static_cast<uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(present)))
        << (4 * g);
    sign_bits |= static_cast<uint32_t>(_mm_movemask_ps(x)) << (4 * g);
    half_bits_out |=
        static_cast<uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(half)))
        << (4 * g);
  }
  const uint32_t negative_bits = (present_bits & sign_bits) | half_bits_out;
  return present_bits | (negative_bits << 16);
}

void DecodeBitmapWord16(uint32_t word, uint32_t t_bits, uint32_t half_bits,
                        float* out) {
  const __m128i lane_bits = _mm_set_epi32(8, 4, 2, 1);
  const __m128i t_vec = _mm_set1_epi32(static_cast<int32_t>(t_bits));
  const __m128i sign_mask = _mm_set1_epi32(static_cast<int32_t>(0x80000000u));
  const __m128i neg_half =
      _mm_set1_epi32(static_cast<int32_t>(half_bits | 0x80000000u));
  for (int g = 0; g < 4; ++g) {
    const uint32_t p4 = (word >> (4 * g)) & 0xfu;
    const uint32_t n4 = (word >> (16 + 4 * g)) & 0xfu;
    const __m128i pm = _mm_cmpeq_epi32(
        _mm_and_si128(_mm_set1_epi32(static_cast<int32_t>(p4)), lane_bits),
        lane_bits);
    const __m128i nm = _mm_cmpeq_epi32(
        _mm_and_si128(_mm_set1_epi32(static_cast<int32_t>(n4)), lane_bits),
        lane_bits);
    // present: +-t; negative only: -t/2; nothing: unchanged (so -0.0 stays).
    const __m128i v = _mm_or_si128(
        _mm_and_si128(pm, _mm_or_si128(t_vec, _mm_and_si128(nm, sign_mask))),
        _mm_andnot_si128(pm, _mm_and_si128(nm, neg_half)));
    const __m128 any = _mm_castsi128_ps(_mm_or_si128(pm, nm));
    const __m128 old = _mm_loadu_ps(out + 4 * g);
    const __m128 sum = _mm_add_ps(old, _mm_castsi128_ps(v));
    _mm_storeu_ps(out + 4 * g,
                  _mm_or_ps(_mm_and_ps(any, sum), _mm_andnot_ps(any, old)));
  }
}
#endif  // __SSE2__

// Appends a bitmap message and subtracts what it encodes. Returns the number
// of elements encoded (present or sign-only).
int64_t EncodeBitmapPass(float* r, size_t n, float t, CodecFormat fmt,
                         std::vector<int32_t>* out) {
  const size_t old = out->size();
  const size_t ints = BitmapMessageInts(n);
  out->resize(old + ints);
  int32_t* msg = out->data() + old;
  WriteHeader(static_cast<int32_t>(n), n, t, fmt, msg);
  int32_t* words = msg + kCodecHeaderInts;
  const uint32_t t_bits = FloatBits(t);
  const float half = BitmapHalf(t);
  const uint32_t half_bits = FloatBits(half);
  int64_t encoded = 0;
  const size_t full_words = n / 16;
  for (size_t j = 0; j <= full_words; ++j) {
    const size_t len = j < full_words ? 16 : n % 16;
#if defined(__SSE2__)
    const uint32_t word =
        len == 16 ? EncodeBitmapWord16(r + 16 * j, t_bits, half_bits)
                  : EncodeBitmapWordScalar(r + 16 * j, len, t, t_bits, half,
                                           half_bits);
#else
    const uint32_t word =
        EncodeBitmapWordScalar(r + 16 * j, len, t, t_bits, half, half_bits);
#endif
    words[j] = static_cast<int32_t>(word);
    encoded += Popcount16((word | (word >> 16)) & 0xffffu);
  }
  return encoded;
}

EncodeInfo FinishInfo(EncodeInfo::Kind kind, int64_t k, int64_t encoded,
                      size_t ints) {
  EncodeInfo info;
  info.kind = kind;
  info.selected = k;
  info.encoded = encoded;
  info.bytes = ints * sizeof(int32_t);
  return info;
}

// Reads int i of a message held as int32s.
class IntReader {
 public:
  explicit IntReader(absl::Span<const int32_t> m) : m_(m) {}
  size_t size() const { return m_.size(); }
  int32_t operator[](size_t i) const { return m_[i]; }

 private:
  absl::Span<const int32_t> m_;
};

// Reads int i of a message held as little-endian bytes (any alignment).
class LittleEndianReader {
 public:
  explicit LittleEndianReader(absl::string_view b) : b_(b) {}
  size_t size() const { return b_.size() / 4; }
  int32_t operator[](size_t i) const {
    uint32_t u;
    std::memcpy(&u, b_.data() + 4 * i, sizeof(u));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    u = __builtin_bswap32(u);
#endif
    return static_cast<int32_t>(u);
  }

 private:
  absl::string_view b_;
};

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("codec message: ", what));
}

template <typename Reader>
absl::Status ValidateThreshold(const Reader& m, size_t n) {
  const int64_t count = m[0];
  const size_t entries = m.size() - kCodecHeaderInts;
  if (count < 0 || static_cast<uint64_t>(count) != entries) {
    return Bad(absl::StrCat("count ", count, " != length - 4 = ", entries));
  }
  int64_t prev = 0;
  bool sorted = true;
  for (size_t e = 0; e < entries; ++e) {
    const int64_t v = m[kCodecHeaderInts + e];
    if (v == 0) return Bad(absl::StrCat("entry ", e, " is 0"));
    const int64_t index = v > 0 ? v : -v;  // 1-based; no overflow in int64.
    if (static_cast<uint64_t>(index) > n) {
      return Bad(absl::StrCat("entry ", e, " addresses element ", index - 1,
                              " of ", n));
    }
    if (index <= prev) sorted = false;
    prev = index;
  }
  if (sorted) return absl::OkStatus();
  // Unsorted input (which our encoder never sends): sort a copy to find
  // repeats.
  std::vector<int32_t> idx(entries);
  for (size_t e = 0; e < entries; ++e) {
    const int64_t v = m[kCodecHeaderInts + e];
    idx[e] = static_cast<int32_t>(v > 0 ? v : -v);
  }
  std::sort(idx.begin(), idx.end());
  const auto dup = std::adjacent_find(idx.begin(), idx.end());
  if (dup != idx.end()) {
    return Bad(absl::StrCat("element ", *dup - 1, " is repeated"));
  }
  return absl::OkStatus();
}

template <typename Reader>
absl::Status ValidateBitmap(const Reader& m, size_t n) {
  if (static_cast<int64_t>(m[0]) != static_cast<int64_t>(n)) {
    return Bad(absl::StrCat("bitmap count_or_N ", m[0], " != N ", n));
  }
  if (m.size() != BitmapMessageInts(n)) {
    return Bad(absl::StrCat("bitmap of N ", n, " has ", m.size(),
                            " ints; expected ", BitmapMessageInts(n)));
  }
  // Only the last word can cover elements >= N; their bits must be 0.
  const size_t last = n / 16;
  const uint32_t valid = static_cast<uint32_t>(n % 16);
  const uint32_t low = (1u << valid) - 1u;
  const uint32_t mask = low | (low << 16);
  const uint32_t word = static_cast<uint32_t>(m[kCodecHeaderInts + last]);
  if ((word & ~mask) != 0) {
    return Bad(absl::StrCat("bitmap bits set beyond element ", n - 1,
                            " (last word 0x", absl::Hex(word), ")"));
  }
  return absl::OkStatus();
}

template <typename Reader>
absl::Status DecodeAddImpl(const Reader& m, absl::Span<float> target) {
  if (m.size() == 0) return absl::OkStatus();  // EMPTY.
  if (m.size() < kCodecHeaderInts) {
    return Bad(absl::StrCat("length ", m.size(), " is shorter than the ",
                            kCodecHeaderInts, "-int header"));
  }
  const size_t n = target.size();
  if (n > static_cast<uint64_t>(kCodecMaxElements)) {
    return Bad(absl::StrCat("target of ", n, " elements is too large"));
  }
  if (static_cast<int64_t>(m[1]) != static_cast<int64_t>(n)) {
    return Bad(absl::StrCat("header N ", m[1], " != target size ", n));
  }
  const float t = codec::BitsToFloat(static_cast<uint32_t>(m[2]));
  if (!(t > 0.0f) || !std::isfinite(t)) {
    return Bad(absl::StrCat("threshold ", t, " is not finite and > 0"));
  }
  const int32_t fmt = m[3];
  float* out = target.data();
  if (fmt == static_cast<int32_t>(CodecFormat::kThreshold)) {
    absl::Status s = ValidateThreshold(m, n);
    if (!s.ok()) return s;
    for (size_t e = kCodecHeaderInts; e < m.size(); ++e) {
      const int32_t v = m[e];
      const size_t i =
          static_cast<size_t>(v > 0 ? v : -static_cast<int64_t>(v)) - 1;
      out[i] += ThresholdEntryValue(v, t);
    }
    return absl::OkStatus();
  }
  if (fmt == static_cast<int32_t>(CodecFormat::kBitmap) ||
      fmt == static_cast<int32_t>(CodecFormat::kBitmapShakeup)) {
    absl::Status s = ValidateBitmap(m, n);
    if (!s.ok()) return s;
    const float half = BitmapHalf(t);
    const size_t full_words = n / 16;
    for (size_t j = 0; j <= full_words; ++j) {
      const uint32_t word = static_cast<uint32_t>(m[kCodecHeaderInts + j]);
      if (word == 0) continue;
      const size_t len = j < full_words ? 16 : n % 16;
#if defined(__SSE2__)
      if (len == 16) {
        DecodeBitmapWord16(word, FloatBits(t), FloatBits(half), out + 16 * j);
        continue;
      }
#endif
      DecodeBitmapWordScalar(word, len, t, half, out + 16 * j);
    }
    return absl::OkStatus();
  }
  return Bad(absl::StrCat("unknown format ", fmt));
}

// Checks the arguments of an encode, then counts the elements at or above
// `threshold` (per kCountBlock block into `block_counts` when it is not null).
absl::StatusOr<Count> CheckAndCount(absl::Span<const float> residual,
                                    float threshold,
                                    std::vector<uint8_t>* block_counts) {
  RETURN_IF_ERROR(CheckEncodeArgs(residual.size(), threshold));
  return CountSelected(residual.data(), residual.size(), FloatBits(threshold),
                       block_counts);
}

}  // namespace

absl::StatusOr<EncodeInfo> EncodeThresholdOrBitmap(absl::Span<float> residual,
                                                   float threshold,
                                                   std::vector<int32_t>* out) {
  const size_t n = residual.size();
  std::vector<uint8_t> block_counts;
  ASSIGN_OR_RETURN(const Count c,
                   CheckAndCount(residual, threshold, &block_counts));
  if (c.non_finite) return FinishInfo(EncodeInfo::Kind::kNonFinite, 0, 0, 0);
  if (c.selected == 0) return FinishInfo(EncodeInfo::Kind::kEmpty, 0, 0, 0);
  if (ThresholdMessageInts(static_cast<size_t>(c.selected)) <
      BitmapMessageInts(n)) {
    EncodeThresholdPass(residual.data(), n, threshold, c.selected, block_counts,
                        out);
    return FinishInfo(EncodeInfo::Kind::kThreshold, c.selected, c.selected,
                      ThresholdMessageInts(static_cast<size_t>(c.selected)));
  }
  const int64_t encoded = EncodeBitmapPass(residual.data(), n, threshold,
                                           CodecFormat::kBitmap, out);
  return FinishInfo(EncodeInfo::Kind::kBitmap, c.selected, encoded,
                    BitmapMessageInts(n));
}

absl::StatusOr<EncodeInfo> EncodeThreshold(absl::Span<float> residual,
                                           float threshold, int64_t max_entries,
                                           std::vector<int32_t>* out) {
  if (max_entries < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_entries must be >= 0, got ", max_entries));
  }
  const size_t n = residual.size();
  std::vector<uint8_t> block_counts;
  ASSIGN_OR_RETURN(const Count c,
                   CheckAndCount(residual, threshold, &block_counts));
  if (c.non_finite) return FinishInfo(EncodeInfo::Kind::kNonFinite, 0, 0, 0);
  const int64_t entries = std::min(c.selected, max_entries);
  if (entries == 0) {
    return FinishInfo(EncodeInfo::Kind::kEmpty, c.selected, 0, 0);
  }
  EncodeThresholdPass(residual.data(), n, threshold, entries, block_counts,
                      out);
  return FinishInfo(EncodeInfo::Kind::kThreshold, c.selected, entries,
                    ThresholdMessageInts(static_cast<size_t>(entries)));
}

absl::StatusOr<EncodeInfo> EncodeBitmap(absl::Span<float> residual,
                                        float threshold, CodecFormat fmt,
                                        std::vector<int32_t>* out) {
  if (fmt != CodecFormat::kBitmap && fmt != CodecFormat::kBitmapShakeup) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EncodeBitmap needs a bitmap format, got ", static_cast<int>(fmt)));
  }
  const size_t n = residual.size();
  ASSIGN_OR_RETURN(const Count c, CheckAndCount(residual, threshold,
                                                /*block_counts=*/nullptr));
  if (n == 0) return FinishInfo(EncodeInfo::Kind::kEmpty, 0, 0, 0);
  if (c.non_finite) return FinishInfo(EncodeInfo::Kind::kNonFinite, 0, 0, 0);
  const int64_t encoded =
      EncodeBitmapPass(residual.data(), n, threshold, fmt, out);
  return FinishInfo(EncodeInfo::Kind::kBitmap, c.selected, encoded,
                    BitmapMessageInts(n));
}

absl::Status DecodeAdd(absl::Span<const int32_t> message,
                       absl::Span<float> target) {
  return DecodeAddImpl(IntReader(message), target);
}

absl::Status DecodeAddBytes(absl::string_view bytes, absl::Span<float> target) {
  if (bytes.size() % 4 != 0) {
    return Bad(
        absl::StrCat("length ", bytes.size(), " bytes is not a multiple of 4"));
  }
  return DecodeAddImpl(LittleEndianReader(bytes), target);
}

void AppendMessageBytes(absl::Span<const int32_t> message, std::string* out) {
  const size_t old = out->size();
  out->resize(old + 4 * message.size());
  char* p = &(*out)[old];
  for (size_t i = 0; i < message.size(); ++i) {
    uint32_t u = static_cast<uint32_t>(message[i]);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    u = __builtin_bswap32(u);
#endif
    std::memcpy(p + 4 * i, &u, sizeof(u));
  }
}

}  // namespace shardps
