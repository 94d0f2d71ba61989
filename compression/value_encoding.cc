#include "compression/value_encoding.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "compression/threshold_codec.h"
#include "kernels/half.h"

namespace shardps {

void EncodeValues(absl::Span<const float> values, ValueEncoding encoding,
                  std::string* out) {
  if (encoding == FLOAT32) {
    out->assign(reinterpret_cast<const char*>(values.data()),
                values.size() * sizeof(float));
    return;
  }
  out->resize(values.size() * 2);
  unsigned char* p = reinterpret_cast<unsigned char*>(out->data());
  const float* v = values.data();
  if (encoding == FLOAT16) {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t h = FloatToHalf(v[i]);
      p[2 * i] = static_cast<unsigned char>(h & 0xff);
      p[2 * i + 1] = static_cast<unsigned char>(h >> 8);
    }
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t h = FloatToBfloat16(v[i]);
      p[2 * i] = static_cast<unsigned char>(h & 0xff);
      p[2 * i + 1] = static_cast<unsigned char>(h >> 8);
    }
  }
}

absl::Status DecodeValues(absl::string_view bytes, ValueEncoding encoding,
                          absl::Span<float> out) {
  const size_t width = BytesPerValue(encoding);
  if (width == 0) {
    return absl::InvalidArgumentError(absl::StrCat("values in encoding ",
                                                   ValueEncoding_Name(encoding),
                                                   " are not plain values"));
  }
  if (bytes.size() != out.size() * width) {
    return absl::InvalidArgumentError(absl::StrCat(
        "values have ", bytes.size(), " bytes; ", out.size(), " ",
        ValueEncoding_Name(encoding), " values take ", out.size() * width));
  }
  if (encoding == FLOAT32) {
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return absl::OkStatus();
  }
  const unsigned char* p = reinterpret_cast<const unsigned char*>(bytes.data());
  float* o = out.data();
  for (size_t i = 0; i < out.size(); ++i) {
    const uint16_t h = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
    o[i] = encoding == FLOAT16 ? HalfToFloat(h) : Bfloat16ToFloat(h);
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> ViewFloat32(
    const std::string& bytes, std::vector<float>* scratch) {
  if (bytes.size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("values have ", bytes.size(),
                     " bytes, not a whole number of float32 values"));
  }
  const size_t n = bytes.size() / sizeof(float);
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(float) == 0) {
    return absl::MakeConstSpan(reinterpret_cast<const float*>(bytes.data()), n);
  }
  scratch->resize(n);
  std::memcpy(scratch->data(), bytes.data(), bytes.size());
  return absl::MakeConstSpan(*scratch);
}

absl::StatusOr<absl::Span<const float>> DecodeBlockValues(
    ValueEncoding encoding, const std::string& bytes, int64_t block_size,
    std::vector<float>* scratch) {
  switch (encoding) {
    case FLOAT32:
      return ViewFloat32(bytes, scratch);
    case FLOAT16:
    case BFLOAT16: {
      if (bytes.size() % 2 != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("values have ", bytes.size(),
                         " bytes, not a whole number of 16-bit values"));
      }
      scratch->resize(bytes.size() / 2);
      absl::Status st = DecodeValues(bytes, encoding, absl::MakeSpan(*scratch));
      if (!st.ok()) return st;
      return absl::MakeConstSpan(*scratch);
    }
    case THRESHOLD: {
      // Empty bytes: nothing reached the threshold, a zero gradient.
      scratch->assign(block_size, 0.0f);
      if (!bytes.empty()) {
        absl::Status st = DecodeAddBytes(bytes, absl::MakeSpan(*scratch));
        if (!st.ok()) return st;
      }
      return absl::MakeConstSpan(*scratch);
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("values in unknown encoding ", encoding));
  }
}

}  // namespace shardps
