#ifndef SHARDPS_COMPRESSION_VALUE_ENCODING_H_
#define SHARDPS_COMPRESSION_VALUE_ENCODING_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// Dense values on the wire as FLOAT32, FLOAT16 or BFLOAT16 little-endian
// bytes (ps_service.proto's ValueEncoding). Thread-safe (no state).

// Writes `values` to `out` in `encoding`.
// REQUIRES: encoding is FLOAT32, FLOAT16 or BFLOAT16.
void EncodeValues(absl::Span<const float> values, ValueEncoding encoding,
                  std::string* out);

// Reads exactly out.size() values from `bytes` in `encoding` into `out`;
// INVALID_ARGUMENT when the byte count does not match or the encoding is
// none of the three.
absl::Status DecodeValues(absl::string_view bytes, ValueEncoding encoding,
                          absl::Span<float> out);

// Views the float32 little-endian `bytes` as floats. Protobuf keeps `bytes`
// fields in heap strings, which are aligned for float; a misaligned buffer
// (never seen) is copied into *scratch. INVALID_ARGUMENT when the byte count
// is not a whole number of floats.
absl::StatusOr<absl::Span<const float>> ViewFloat32(
    const std::string& bytes, std::vector<float>* scratch);

// The values of a pushed dense block of `block_size` values that travelled
// in `encoding`: FLOAT32 viewed in place; FLOAT16 and BFLOAT16 decoded, and
// THRESHOLD (a threshold or bitmap message of compression/threshold_codec.h;
// empty bytes are a zero gradient) decoded, into *scratch. INVALID_ARGUMENT
// naming what is wrong (byte counts, a malformed message, an unknown
// encoding). `block_size` is read for THRESHOLD only.
absl::StatusOr<absl::Span<const float>> DecodeBlockValues(
    ValueEncoding encoding, const std::string& bytes, int64_t block_size,
    std::vector<float>* scratch);

// Bytes per value of a plain encoding; 0 for others.
inline size_t BytesPerValue(ValueEncoding encoding) {
  switch (encoding) {
    case FLOAT32:
      return 4;
    case FLOAT16:
    case BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

}  // namespace shardps

#endif  // SHARDPS_COMPRESSION_VALUE_ENCODING_H_
