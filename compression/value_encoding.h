#ifndef SHARDPS_COMPRESSION_VALUE_ENCODING_H_
#define SHARDPS_COMPRESSION_VALUE_ENCODING_H_

#include <string>

#include "absl/status/status.h"
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
