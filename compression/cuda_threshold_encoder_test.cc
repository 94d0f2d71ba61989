// The GPU threshold encoder against the CPU codec, byte for byte. Skipped
// without a CUDA device.
#include "compression/cuda_threshold_encoder.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "compression/threshold_codec.h"
#include "gtest/gtest.h"
#include "kernels/testing/cuda_test.h"

namespace shardps {
namespace {

using testing_cuda::CudaTest;
using testing_cuda::Random;

using CudaThresholdEncoderTest = CudaTest;

// The GPU encoder's message and residual equal the CPU codec's, bit for bit.
TEST_F(CudaThresholdEncoderTest, ThresholdEncoderMatchesCpuBytes) {
  auto enc = CudaThresholdEncoder::Create(0);
  ASSERT_TRUE(enc.ok()) << enc.status();
  struct Case {
    size_t n;
    float scale, threshold;
  };
  // Sparse (threshold format), dense (bitmap), ragged tails, nothing sent.
  for (const Case& c : {Case{100003, 1e-3f, 9.9e-4f}, Case{4099, 1.0f, 0.5f},
                        Case{17, 1.0f, 0.3f}, Case{1000, 1e-3f, 1.0f},
                        Case{1 << 20, 1.0f, 0.9999f}}) {
    std::vector<float> r = Random(c.n, static_cast<uint32_t>(c.n), c.scale);
    r[0] = -0.0f;
    BackendBuffer dr = Dev(r);
    std::vector<int32_t> want, got = {7};  // appended after what is there
    auto ci = EncodeThresholdOrBitmap(absl::MakeSpan(r), c.threshold, &want);
    auto gi = (*enc)->Encode(dr.data(), c.n, c.threshold, &got);
    ASSERT_TRUE(ci.ok() && gi.ok()) << gi.status();
    EXPECT_EQ(static_cast<int>(ci->kind), static_cast<int>(gi->kind));
    EXPECT_EQ(ci->selected, gi->selected);
    EXPECT_EQ(ci->encoded, gi->encoded);
    EXPECT_EQ(ci->bytes, gi->bytes);
    want.insert(want.begin(), 7);
    EXPECT_EQ(want, got) << "n " << c.n;
    const std::vector<float> gr = Host(dr);
    ASSERT_EQ(0, std::memcmp(r.data(), gr.data(), r.size() * sizeof(float)))
        << "residuals differ, n " << c.n;
  }
  std::vector<float> bad = {1.0f, NAN, 2.0f};
  BackendBuffer db = Dev(bad);
  std::vector<int32_t> out;
  auto info = (*enc)->Encode(db.data(), 3, 0.5f, &out);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(static_cast<int>(info->kind),
            static_cast<int>(EncodeInfo::Kind::kNonFinite));
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE((*enc)->Encode(db.data(), 3, 0.0f, &out).ok());
}

}  // namespace
}  // namespace shardps
