#ifndef SHARDPS_COMPRESSION_THRESHOLD_CODEC_H_
#define SHARDPS_COMPRESSION_THRESHOLD_CODEC_H_

// Threshold and bitmap gradient codecs (Strom 2015, DL4J's wire layouts), as
// docs/compression.md ("Specification") specifies them.
//
// A message is a little-endian int32 array with a 16-byte header
//   {count_or_N, N, f32bits(t), fmt}
// followed by
//   fmt 0 (threshold): `count` entries, +(i+1) for a value >= t and -(i+1)
//       for a value <= -t, in ascending index order;
//   fmt 1 (bitmap) and fmt 2 (bitmap shake-up): N/16 + 1 words; word j covers
//       elements 16j..16j+15, bit b = "present", bit b+16 = "negative".
//       present+positive decodes to +t, present+negative to -t, negative only
//       to -t/2. Bits of elements >= N are zero.
// N = 0, or nothing at or above the threshold, is the EMPTY message: no ints.
//
// Encoding subtracts what it sends from the residual, element by element
// (r_after = fl(r_before - s)), so nothing is lost (invariant I1).
//
// The functions are pure: thread-safe on distinct residuals and targets.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/hostdevice.h"

namespace shardps {

enum class CodecFormat : int32_t {
  kThreshold = 0,
  kBitmap = 1,
  kBitmapShakeup = 2,
};

// Ints in a message header.
inline constexpr size_t kCodecHeaderInts = 4;
// Largest N the formats can address (indexes are signed 1-based int32s).
inline constexpr int64_t kCodecMaxElements = 2147483647;

// Ints in a bitmap message of n elements (DL4J's N/16 + 5).
inline constexpr size_t BitmapMessageInts(size_t n) { return n / 16 + 5; }
// Ints in a threshold message of k entries.
inline constexpr size_t ThresholdMessageInts(size_t k) { return k + 4; }

// What one encode did.
struct EncodeInfo {
  enum class Kind {
    kEmpty,      // Nothing sent; residual unchanged.
    kThreshold,  // fmt 0 appended.
    kBitmap,     // fmt 1 or 2 appended.
    kNonFinite,  // NaN or Inf in the residual: nothing sent, nothing changed.
  };
  Kind kind = Kind::kEmpty;
  // k: elements with |r| >= t before encoding.
  int64_t selected = 0;
  // Elements whose value the message changes: k, plus the sign-only (-t/2)
  // elements of a bitmap (DL4J's bitmap encoder returns this number).
  int64_t encoded = 0;
  // Bytes appended to the output (4 per int).
  size_t bytes = 0;
};

// Counts k = #{|r_i| >= t}, chooses the format (k == 0: EMPTY;
// 4 + k < N/16 + 5: THRESHOLD; else BITMAP), then encodes and subtracts what
// it sends from `residual` in one pass. Appends the message to `*out`
// (nothing for EMPTY or NONFINITE). With NaN or Inf anywhere in `residual`
// returns kind kNonFinite and changes nothing.
// Errors: InvalidArgument for `threshold` <= 0, NaN or Inf, or more than
// kCodecMaxElements elements.
absl::StatusOr<EncodeInfo> EncodeThresholdOrBitmap(absl::Span<float> residual,
                                                   float threshold,
                                                   std::vector<int32_t>* out);

// Always a threshold message (DL4J's encodeThreshold op) of at most
// `max_entries` entries, DL4J's "boundary": the first max_entries selected
// elements in index order are sent, the rest stay in the residual. Not size
// bounded like EncodeThresholdOrBitmap; for DL4J parity and tests. EMPTY
// when nothing is selected or max_entries == 0 (`selected` still reports k).
// Same residual semantics and errors as EncodeThresholdOrBitmap, plus
// InvalidArgument for max_entries < 0.
absl::StatusOr<EncodeInfo> EncodeThreshold(absl::Span<float> residual,
                                           float threshold, int64_t max_entries,
                                           std::vector<int32_t>* out);

// Always a bitmap of `fmt` (kBitmap, or kBitmapShakeup for the shake-up
// message at t/3), whatever k is; EMPTY only for an empty residual.
// Same residual semantics and errors as EncodeThresholdOrBitmap, plus
// InvalidArgument for fmt == kThreshold.
absl::StatusOr<EncodeInfo> EncodeBitmap(absl::Span<float> residual,
                                        float threshold, CodecFormat fmt,
                                        std::vector<int32_t>* out);

// Validates the whole message, then adds its decoded values to `target`:
// target[i] += s_i. A bad message is refused whole with InvalidArgument that
// names the problem, and `target` is left unchanged. Refused: a length of
// 1..3 ints; header N != target.size(); an unknown fmt; a threshold that is
// not finite and > 0; (threshold) count != length - 4, an entry of 0, an
// index > N, a repeated index; (bitmap) count_or_N != N, length !=
// N/16 + 5, a set bit for an element >= N. An empty message (EMPTY) is a
// valid no-op. Entries need not be sorted.
absl::Status DecodeAdd(absl::Span<const int32_t> message,
                       absl::Span<float> target);

// DecodeAdd of a message in raw little-endian bytes (a protobuf `bytes`
// field). Also refuses a length that is not a multiple of 4.
absl::Status DecodeAddBytes(absl::string_view bytes, absl::Span<float> target);

// Appends `message` to `*out` as little-endian bytes, for a `bytes` field.
void AppendMessageBytes(absl::Span<const int32_t> message, std::string* out);

// Per-element math, shared by the CPU loops here and a future CUDA encoder.
namespace codec {

PS_HOSTDEVICE inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

PS_HOSTDEVICE inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// |v| as bits. For positive finite t and non-NaN v,
// |v| >= t  <=>  AbsBits(v) >= FloatBits(t): the integer compare is the
// selection test (exact, and it vectorises).
PS_HOSTDEVICE inline uint32_t AbsBits(float v) {
  return FloatBits(v) & 0x7fffffffu;
}

// AbsBits(v) >= t_bits. Both are below 2^31, so the compare is done signed,
// which SIMD units have (SSE2 lacks an unsigned 32-bit compare).
PS_HOSTDEVICE inline bool AtLeast(uint32_t abs_bits, uint32_t t_bits) {
  return static_cast<int32_t>(abs_bits) >= static_cast<int32_t>(t_bits);
}

// NaN or +-Inf, from AbsBits.
PS_HOSTDEVICE inline bool NonFiniteAbsBits(uint32_t abs_bits) {
  return AtLeast(abs_bits, 0x7f800000u);
}

PS_HOSTDEVICE inline bool SignBit(float v) { return (FloatBits(v) >> 31) != 0; }

// Threshold entry of element i (0 if not selected); `t_bits` = FloatBits(t).
PS_HOSTDEVICE inline int32_t ThresholdEntry(float v, uint32_t t_bits,
                                            int32_t i) {
  if (!AtLeast(AbsBits(v), t_bits)) return 0;
  return SignBit(v) ? -(i + 1) : i + 1;
}

// The value a nonzero threshold entry decodes to.
PS_HOSTDEVICE inline float ThresholdEntryValue(int32_t entry, float t) {
  return entry > 0 ? t : -t;
}

// The bitmap's sign-only value magnitude, t/2.
PS_HOSTDEVICE inline float BitmapHalf(float t) { return 0.5f * t; }

// Bitmap code of one element: bit 0 = present, bit 1 = negative.
//   |v| >= t            -> present, negative if v < 0;
//   t/2 <= |v| < t, v<0 -> negative only;
//   otherwise 0 (positive values in [t/2, t) are not sent, as in DL4J).
PS_HOSTDEVICE inline uint32_t BitmapCode(float v, uint32_t t_bits,
                                         uint32_t half_bits) {
  const uint32_t a = AbsBits(v);
  const uint32_t neg = SignBit(v) ? 1u : 0u;
  const uint32_t present = AtLeast(a, t_bits) ? 1u : 0u;
  const uint32_t half = neg & (present ^ 1u) &
                        (AtLeast(a, half_bits) ? 1u : 0u) & (a != 0 ? 1u : 0u);
  return present | ((neg & present) << 1) | (half << 1);
}

// The value a bitmap code decodes to.
PS_HOSTDEVICE inline float BitmapCodeValue(uint32_t code, float t, float half) {
  return code == 1u ? t : code == 3u ? -t : code == 2u ? -half : 0.0f;
}

}  // namespace codec
}  // namespace shardps

#endif  // SHARDPS_COMPRESSION_THRESHOLD_CODEC_H_
