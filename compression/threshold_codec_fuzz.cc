// libFuzzer target for the codec (common/threshold_codec.h).
//
// Byte 0 picks the mode and the target size:
//   bit 7 clear: DecodeAddBytes of bytes 1.. into a target of
//     kSizes[byte0 % 8] elements. It must never crash, and a refused message
//     must leave the target unchanged bit for bit.
//   bit 7 set: bytes 1.. are the residual's floats; encode them at
//     kThresholds[byte0 % 4], decode the message into zeros, and check
//     invariant I1 (r_after == fl(r_before - s) bit for bit), the selection
//     (I2), the size bound (I4) and that a non-finite residual is untouched.
// Built by common/CMakeLists.txt with clang, and by tests/fuzz_codec.sh.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "compression/threshold_codec.h"

namespace {

constexpr size_t kSizes[8] = {0, 1, 15, 16, 17, 31, 32, 1000};
constexpr float kThresholds[4] = {1e-6f, 1e-3f, 1.0f, 1e-40f};

void Check(bool ok) {
  if (!ok) std::abort();
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() ||
          std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void FuzzDecode(const uint8_t* data, size_t size, size_t n) {
  std::vector<float> target(n);
  for (size_t i = 0; i < n; ++i) target[i] = 0.25f * static_cast<float>(i);
  const std::vector<float> before = target;
  absl::Status s = shardps::DecodeAddBytes(
      absl::string_view(reinterpret_cast<const char*>(data), size),
      absl::MakeSpan(target));
  if (!s.ok()) {
    Check(s.code() == absl::StatusCode::kInvalidArgument);
    Check(SameBits(before, target));
  }
}

void FuzzEncode(const uint8_t* data, size_t size, float t, bool shake) {
  std::vector<float> r(size / sizeof(float));
  if (!r.empty()) std::memcpy(r.data(), data, r.size() * sizeof(float));
  const std::vector<float> before = r;
  std::vector<int32_t> msg;
  absl::StatusOr<shardps::EncodeInfo> info =
      shake ? shardps::EncodeBitmap(absl::MakeSpan(r), t,
                                    shardps::CodecFormat::kBitmapShakeup, &msg)
            : shardps::EncodeThresholdOrBitmap(absl::MakeSpan(r), t, &msg);
  Check(info.ok());
  Check(msg.size() * 4 == info->bytes);
  Check(msg.size() <= shardps::BitmapMessageInts(r.size()));  // I4.
  if (info->kind == shardps::EncodeInfo::Kind::kNonFinite ||
      info->kind == shardps::EncodeInfo::Kind::kEmpty) {
    Check(msg.empty());
    Check(SameBits(before, r));
    return;
  }
  std::vector<float> sent(r.size(), 0.0f);
  Check(shardps::DecodeAdd(msg, absl::MakeSpan(sent)).ok());
  for (size_t i = 0; i < r.size(); ++i) {
    Check(SameBits(r[i], before[i] - sent[i]));  // I1.
    if (info->kind == shardps::EncodeInfo::Kind::kThreshold) {
      Check((sent[i] != 0.0f) == (std::abs(before[i]) >= t));  // I2.
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  if ((mode & 0x80) == 0) {
    FuzzDecode(data + 1, size - 1, kSizes[mode % 8]);
  } else {
    FuzzEncode(data + 1, size - 1, kThresholds[mode % 4], (mode & 0x40) != 0);
  }
  return 0;
}
