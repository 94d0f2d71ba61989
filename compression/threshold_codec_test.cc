#include "compression/threshold_codec.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using Kind = EncodeInfo::Kind;

constexpr float kT = 1e-3f;

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Decodes `msg` into zeros of length n; fails the test if it is refused.
std::vector<float> Decoded(const std::vector<int32_t>& msg, size_t n) {
  std::vector<float> s(n, 0.0f);
  absl::Status st = DecodeAdd(msg, absl::MakeSpan(s));
  EXPECT_TRUE(st.ok()) << st;
  return s;
}

int32_t Bits(float f) { return static_cast<int32_t>(codec::FloatBits(f)); }

// ---------------------------------------------------------------------------
// Upstream vectors (nd4j CompressionTests), docs/compression.md, "How
// Deeplearning4j does it".

TEST(ThresholdCodecUpstreamTest, ThresholdEncodeDecode) {
  std::vector<float> x = {1, 2, 0, 0, -1, -1};
  std::vector<int32_t> msg;
  absl::StatusOr<EncodeInfo> info =
      EncodeThreshold(absl::MakeSpan(x), kT, /*max_entries=*/6, &msg);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->kind, Kind::kThreshold);
  EXPECT_EQ(info->selected, 4);
  EXPECT_EQ(info->bytes, 32u);
  EXPECT_THAT(msg, ElementsAre(4, 6, Bits(kT), 0, 1, 2, -5, -6));
  EXPECT_THAT(x, ElementsAre(1 - kT, 2 - kT, 0, 0, -1 + kT, -1 + kT));
  EXPECT_THAT(Decoded(msg, 6), ElementsAre(kT, kT, 0, 0, -kT, -kT));
  // Decoding the same message twice gives 2t.
  std::vector<float> twice(6, 0.0f);
  ASSERT_TRUE(DecodeAdd(msg, absl::MakeSpan(twice)).ok());
  ASSERT_TRUE(DecodeAdd(msg, absl::MakeSpan(twice)).ok());
  EXPECT_THAT(twice, ElementsAre(2 * kT, 2 * kT, 0, 0, -2 * kT, -2 * kT));
}

TEST(ThresholdCodecUpstreamTest, AllBelowThresholdSendsNothing) {
  const std::vector<float> orig = {1e-4f, -1e-4f, 0, 0, 1e-4f, -1e-4f};
  for (int forced = 0; forced < 2; ++forced) {
    std::vector<float> x = orig;
    std::vector<int32_t> msg;
    absl::StatusOr<EncodeInfo> info =
        forced ? EncodeThreshold(absl::MakeSpan(x), kT, 6, &msg)
               : EncodeThresholdOrBitmap(absl::MakeSpan(x), kT, &msg);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->kind, Kind::kEmpty);
    EXPECT_EQ(info->bytes, 0u);
    EXPECT_TRUE(msg.empty());
    EXPECT_TRUE(SameBits(x, orig));
  }
}

TEST(ThresholdCodecUpstreamTest, BoundaryOfThree) {
  std::vector<float> x(10, 1.0f);
  std::vector<int32_t> msg;
  absl::StatusOr<EncodeInfo> info =
      EncodeThreshold(absl::MakeSpan(x), 1.0f, /*max_entries=*/3, &msg);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(msg.size(), 7u);
  EXPECT_EQ(info->selected, 10);
  EXPECT_EQ(info->encoded, 3);
  double sum = 0;
  for (float v : x) sum += v;
  EXPECT_EQ(sum, 7.0);
  // Deterministic: the first three in index order.
  EXPECT_THAT(msg, ElementsAre(3, 10, Bits(1.0f), 0, 1, 2, 3));
}

TEST(ThresholdCodecUpstreamTest, BoundaryOfHundred) {
  std::vector<float> x(1000, 1.0f);
  std::vector<int32_t> msg;
  ASSERT_TRUE(EncodeThreshold(absl::MakeSpan(x), 1.0f, 100, &msg).ok());
  EXPECT_EQ(msg.size(), 104u);
  double sum = 0;
  for (float v : x) sum += v;
  EXPECT_EQ(sum, 900.0);
}

TEST(ThresholdCodecUpstreamTest, SparseLargeVector) {
  const size_t n = 16384;
  const float t = 0.9f;
  std::vector<float> x(n, 0.0f);
  for (int i = 0; i < 96; ++i) x[20 * i] = 1.0f;
  std::vector<int32_t> msg;
  absl::StatusOr<EncodeInfo> info =
      EncodeThresholdOrBitmap(absl::MakeSpan(x), t, &msg);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, Kind::kThreshold);
  EXPECT_EQ(info->selected, 96);
  EXPECT_EQ(msg.size(), 100u);
  const std::vector<float> s = Decoded(msg, n);
  for (size_t i = 0; i < n; ++i) {
    if (i % 20 == 0 && i / 20 < 96) {
      EXPECT_EQ(x[i], 1.0f - t) << i;
      EXPECT_NEAR(x[i], 0.1f, 1e-6f) << i;
      EXPECT_EQ(s[i], t) << i;
    } else {
      EXPECT_EQ(x[i], 0.0f) << i;
      EXPECT_EQ(s[i], 0.0f) << i;
    }
  }
}

TEST(ThresholdCodecUpstreamTest, BitmapVector) {
  for (int forced = 0; forced < 2; ++forced) {
    std::vector<float> x = {0, -6e-4f, 1e-3f, -1e-3f, 0, 0};
    std::vector<int32_t> msg;
    absl::StatusOr<EncodeInfo> info =
        forced ? EncodeBitmap(absl::MakeSpan(x), kT, CodecFormat::kBitmap, &msg)
               : EncodeThresholdOrBitmap(absl::MakeSpan(x), kT, &msg);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->kind, Kind::kBitmap);
    EXPECT_THAT(msg, ElementsAre(6, 6, 981668463, 1, 655372));
    EXPECT_EQ(msg[4], 0xA000C);
    EXPECT_EQ(info->encoded, 3);
    EXPECT_EQ(info->selected, 2);
    EXPECT_EQ(info->bytes, 20u);
    EXPECT_EQ(x[0], 0.0f);
    EXPECT_NEAR(x[1], -1e-4f, 1e-9f);
    EXPECT_EQ(x[1], -6e-4f + 5e-4f);
    for (int i = 2; i < 6; ++i) EXPECT_EQ(x[i], 0.0f) << i;
    EXPECT_THAT(Decoded(msg, 6), ElementsAre(0, -5e-4f, 1e-3f, -1e-3f, 0, 0));
  }
}

TEST(ThresholdCodecUpstreamTest, BitmapSizes) {
  for (auto [n, ints] : {std::pair<size_t, size_t>{15, 5}, {31, 6}, {32, 7}}) {
    EXPECT_EQ(BitmapMessageInts(n), ints);
    std::vector<float> x(n, 0.0f);
    std::vector<int32_t> msg;
    absl::StatusOr<EncodeInfo> info =
        EncodeBitmap(absl::MakeSpan(x), kT, CodecFormat::kBitmap, &msg);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(msg.size(), ints) << n;
    EXPECT_EQ(info->bytes, 4 * ints);
  }
}

// ---------------------------------------------------------------------------
// Format choice and encoder details.

TEST(ThresholdCodecTest, FormatChoiceAtTheBoundary) {
  // N = 160: bitmap is 15 ints, so THRESHOLD while 4 + k < 15, i.e. k <= 10.
  for (int k : {1, 10, 11, 160}) {
    std::vector<float> x(160, 0.0f);
    for (int i = 0; i < k; ++i) x[i] = 1.0f;
    std::vector<int32_t> msg;
    absl::StatusOr<EncodeInfo> info =
        EncodeThresholdOrBitmap(absl::MakeSpan(x), 0.5f, &msg);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->kind, k <= 10 ? Kind::kThreshold : Kind::kBitmap) << k;
    EXPECT_EQ(msg.size(), k <= 10 ? 4u + k : 15u) << k;
    EXPECT_EQ(info->selected, k);
  }
}

TEST(ThresholdCodecTest, SingleElementIsSent) {
  // Unlike DL4J, k == 1 is sent.
  std::vector<float> x(1000, 0.0f);
  x[999] = -2.0f;
  std::vector<int32_t> msg;
  absl::StatusOr<EncodeInfo> info =
      EncodeThresholdOrBitmap(absl::MakeSpan(x), 1.0f, &msg);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, Kind::kThreshold);
  EXPECT_THAT(msg, ElementsAre(1, 1000, Bits(1.0f), 0, -1000));
  EXPECT_EQ(x[999], -1.0f);
}

TEST(ThresholdCodecTest, EmptyResidual) {
  std::vector<float> x;
  std::vector<int32_t> msg;
  absl::StatusOr<EncodeInfo> info =
      EncodeThresholdOrBitmap(absl::MakeSpan(x), kT, &msg);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, Kind::kEmpty);
  info = EncodeBitmap(absl::MakeSpan(x), kT, CodecFormat::kBitmap, &msg);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, Kind::kEmpty);
  EXPECT_TRUE(msg.empty());
  EXPECT_TRUE(DecodeAdd(msg, absl::MakeSpan(x)).ok());
}

TEST(ThresholdCodecTest, AppendsToOutput) {
  std::vector<int32_t> msg = {42};
  std::vector<float> x = {0, 3, 0};
  ASSERT_TRUE(EncodeThresholdOrBitmap(absl::MakeSpan(x), 1.0f, &msg).ok());
  // N = 3, k = 1: 4 + 1 is not < 3/16 + 5, so a bitmap; element 1 present.
  EXPECT_THAT(msg, ElementsAre(42, 3, 3, Bits(1.0f), 1, 1 << 1));
  std::vector<float> y(100, 0.0f);
  y[7] = -3;
  ASSERT_TRUE(EncodeThresholdOrBitmap(absl::MakeSpan(y), 1.0f, &msg).ok());
  EXPECT_THAT(msg, ElementsAre(42, 3, 3, Bits(1.0f), 1, 1 << 1, 1, 100,
                               Bits(1.0f), 0, -8));
}

TEST(ThresholdCodecTest, BitmapStatesAndAsymmetry) {
  // t = 1: +1.5 -> +t; -1.5 -> -t; -0.6 -> -t/2 (sign only); +0.6 not sent;
  // -0.4 and +0.4 not sent; -0.0 not sent; 0.5 and -0.5 at exactly t/2.
  std::vector<float> x = {1.5f,  -1.5f, -0.6f, 0.6f, -0.4f, 0.4f,
                          -0.0f, 0.5f,  -0.5f, 1.0f, -1.0f};
  const std::vector<float> orig = x;
  std::vector<int32_t> msg;
  absl::StatusOr<EncodeInfo> info =
      EncodeBitmap(absl::MakeSpan(x), 1.0f, CodecFormat::kBitmap, &msg);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->selected, 4);
  EXPECT_EQ(info->encoded, 6);
  const uint32_t present = (1u << 0) | (1u << 1) | (1u << 9) | (1u << 10);
  const uint32_t negative = (1u << 1) | (1u << 2) | (1u << 8) | (1u << 10);
  EXPECT_EQ(static_cast<uint32_t>(msg[4]), present | (negative << 16));
  EXPECT_THAT(Decoded(msg, x.size()),
              ElementsAre(1, -1, -0.5f, 0, 0, 0, 0, 0, -0.5f, 1, -1));
  EXPECT_THAT(x, ElementsAre(0.5f, -0.5f, -0.6f + 0.5f, 0.6f, -0.4f, 0.4f,
                             -0.0f, 0.5f, 0.0f, 0, 0));
  EXPECT_TRUE(SameBits(x[6], -0.0f));
}

TEST(ThresholdCodecTest, ShakeupFormat) {
  // Shake-up sends a fmt 2 bitmap at t/3 with the same semantics.
  const float t = 3.0f, ts = t / 3.0f;
  std::vector<float> x = {2.0f, -1.2f, -0.7f, 0.7f, 0.2f};
  std::vector<float> y = x;
  std::vector<int32_t> msg, ref;
  ASSERT_TRUE(
      EncodeBitmap(absl::MakeSpan(x), ts, CodecFormat::kBitmapShakeup, &msg)
          .ok());
  ASSERT_TRUE(
      EncodeBitmap(absl::MakeSpan(y), ts, CodecFormat::kBitmap, &ref).ok());
  ASSERT_EQ(msg.size(), 5u);
  EXPECT_THAT(msg, ElementsAre(5, 5, Bits(1.0f), 2, ref[4]));
  EXPECT_TRUE(SameBits(x, y));
  EXPECT_THAT(Decoded(msg, 5), ElementsAre(1, -1, -0.5f, 0, 0));
  EXPECT_THAT(Decoded(msg, 5), ElementsAreArray(Decoded(ref, 5)));
}

TEST(ThresholdCodecTest, ForcedThresholdWithZeroEntriesIsEmpty) {
  std::vector<float> x = {5, 5};
  std::vector<int32_t> msg;
  absl::StatusOr<EncodeInfo> info =
      EncodeThreshold(absl::MakeSpan(x), 1.0f, 0, &msg);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, Kind::kEmpty);
  EXPECT_EQ(info->selected, 2);
  EXPECT_THAT(x, ElementsAre(5, 5));
}

TEST(ThresholdCodecTest, TinyThresholdsWork) {
  // The smallest denormal: t/2 rounds to 0, and the sign-only state never
  // fires on zeros.
  const float t = std::numeric_limits<float>::denorm_min();
  std::vector<float> x = {0.0f, -0.0f, t, -t, 2 * t};
  std::vector<int32_t> msg;
  ASSERT_TRUE(
      EncodeBitmap(absl::MakeSpan(x), t, CodecFormat::kBitmap, &msg).ok());
  EXPECT_EQ(static_cast<uint32_t>(msg[4]),
            (1u << 2) | (1u << 3) | (1u << 4) | (1u << (3 + 16)));
  EXPECT_THAT(x, ElementsAre(0, 0, 0, 0, t));
}

TEST(ThresholdCodecTest, BitmapMatchesPerElementMathOnEdgeValues) {
  // Full words take a SIMD path where available; it must agree bit for bit
  // with codec::BitmapCode / BitmapCodeValue, the per-element definition.
  for (float t :
       {1.0f, 3e-7f, std::numeric_limits<float>::denorm_min(), 1e38f}) {
    const float h = codec::BitmapHalf(t);
    const float max = std::numeric_limits<float>::max();
    std::vector<float> specials = {0.0f,
                                   -0.0f,
                                   t,
                                   -t,
                                   h,
                                   -h,
                                   std::nextafter(t, 0.0f),
                                   -std::nextafter(t, 0.0f),
                                   std::nextafter(h, 0.0f),
                                   -std::nextafter(h, 0.0f),
                                   std::nextafter(h, INFINITY),
                                   -std::nextafter(h, INFINITY),
                                   2 * t,
                                   -2 * t,
                                   max,
                                   -max,
                                   std::numeric_limits<float>::denorm_min(),
                                   -std::numeric_limits<float>::denorm_min(),
                                   1e-30f,
                                   -1e-30f};
    // Every value at every lane position: 16 * 20 elements plus a tail.
    std::vector<float> x;
    for (int rep = 0; rep < 17; ++rep) {
      for (size_t i = 0; i < specials.size(); ++i) {
        x.push_back(specials[(i + rep) % specials.size()]);
      }
    }
    const std::vector<float> orig = x;
    std::vector<int32_t> msg;
    absl::StatusOr<EncodeInfo> info =
        EncodeBitmap(absl::MakeSpan(x), t, CodecFormat::kBitmap, &msg);
    ASSERT_TRUE(info.ok());
    ASSERT_EQ(info->kind, Kind::kBitmap);
    ASSERT_EQ(msg.size(), BitmapMessageInts(x.size()));
    const uint32_t t_bits = codec::FloatBits(t);
    const uint32_t h_bits = codec::FloatBits(h);
    std::vector<float> target(x.size(), -0.0f);
    ASSERT_TRUE(DecodeAdd(msg, absl::MakeSpan(target)).ok());
    for (size_t i = 0; i < x.size(); ++i) {
      const uint32_t code = codec::BitmapCode(orig[i], t_bits, h_bits);
      const uint32_t word = static_cast<uint32_t>(msg[4 + i / 16]);
      const uint32_t b = i % 16;
      ASSERT_EQ(((word >> b) & 1u) | (((word >> (b + 16)) & 1u) << 1), code)
          << "t=" << t << " i=" << i << " v=" << orig[i];
      const float s = codec::BitmapCodeValue(code, t, h);
      ASSERT_TRUE(SameBits(x[i], orig[i] - s)) << i;
      ASSERT_TRUE(SameBits(target[i], code == 0 ? -0.0f : -0.0f + s)) << i;
    }
  }
}

// ---------------------------------------------------------------------------
// Argument errors and non-finite residuals.

TEST(ThresholdCodecTest, RejectsBadThresholds) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float t : {0.0f, -0.0f, -1e-3f, inf, -inf,
                  std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> x = {1, 2};
    std::vector<int32_t> msg;
    absl::StatusOr<EncodeInfo> a =
        EncodeThresholdOrBitmap(absl::MakeSpan(x), t, &msg);
    absl::StatusOr<EncodeInfo> b =
        EncodeBitmap(absl::MakeSpan(x), t, CodecFormat::kBitmap, &msg);
    absl::StatusOr<EncodeInfo> c =
        EncodeThreshold(absl::MakeSpan(x), t, 5, &msg);
    for (const auto* s : {&a, &b, &c}) {
      EXPECT_EQ(s->status().code(), absl::StatusCode::kInvalidArgument) << t;
      EXPECT_THAT(s->status().message(), HasSubstr("threshold"));
    }
    EXPECT_THAT(x, ElementsAre(1, 2));
    EXPECT_TRUE(msg.empty());
  }
}

TEST(ThresholdCodecTest, RejectsOtherBadArguments) {
  std::vector<float> x = {1, 2};
  std::vector<int32_t> msg;
  EXPECT_EQ(EncodeBitmap(absl::MakeSpan(x), kT, CodecFormat::kThreshold, &msg)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeThreshold(absl::MakeSpan(x), kT, -1, &msg).status().code(),
            absl::StatusCode::kInvalidArgument);
  // 2^31 elements: refused before any element is read.
  float dummy = 0;
  absl::Span<float> huge(&dummy, size_t{1} << 31);
  absl::StatusOr<EncodeInfo> s = EncodeThresholdOrBitmap(huge, kT, &msg);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("at most 2147483647"));
  EXPECT_EQ(EncodeBitmap(huge, kT, CodecFormat::kBitmap, &msg).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(msg.empty());
}

TEST(ThresholdCodecTest, NonFiniteResidualIsReportedAndUntouched) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {nan, -nan, inf, -inf}) {
    for (size_t where : {size_t{0}, size_t{17}, size_t{999}}) {
      std::vector<float> x(1000, 0.0f);
      for (size_t i = 0; i < x.size(); i += 3) x[i] = 2.0f;  // Selected too.
      x[where] = bad;
      const std::vector<float> orig = x;
      std::vector<int32_t> msg = {7};
      for (int mode = 0; mode < 3; ++mode) {
        absl::StatusOr<EncodeInfo> info =
            mode == 0   ? EncodeThresholdOrBitmap(absl::MakeSpan(x), 1.0f, &msg)
            : mode == 1 ? EncodeBitmap(absl::MakeSpan(x), 1.0f,
                                       CodecFormat::kBitmapShakeup, &msg)
                        : EncodeThreshold(absl::MakeSpan(x), 1.0f, 10, &msg);
        ASSERT_TRUE(info.ok());
        EXPECT_EQ(info->kind, Kind::kNonFinite);
        EXPECT_EQ(info->bytes, 0u);
        EXPECT_TRUE(SameBits(x, orig));
        EXPECT_THAT(msg, ElementsAre(7));
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Decoder rejections: InvalidArgument naming the problem, target unchanged.

class DecodeRejectTest : public ::testing::Test {
 protected:
  // Expects `msg` to be refused for a target of n, through both entry
  // points, naming `what`, with the target unchanged.
  void ExpectRejected(const std::vector<int32_t>& msg, size_t n,
                      absl::string_view what) {
    std::vector<float> target(n);
    for (size_t i = 0; i < n; ++i) target[i] = 0.5f + static_cast<float>(i);
    const std::vector<float> orig = target;
    absl::Status s = DecodeAdd(msg, absl::MakeSpan(target));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(what));
    EXPECT_TRUE(SameBits(target, orig));
    std::string bytes;
    AppendMessageBytes(msg, &bytes);
    s = DecodeAddBytes(bytes, absl::MakeSpan(target));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(what));
    EXPECT_TRUE(SameBits(target, orig));
  }
};

TEST_F(DecodeRejectTest, ShortHeader) {
  ExpectRejected({1}, 4, "shorter than the 4-int header");
  ExpectRejected({1, 4}, 4, "shorter than the 4-int header");
  ExpectRejected({1, 4, Bits(1.0f)}, 4, "shorter than the 4-int header");
}

TEST_F(DecodeRejectTest, WrongN) {
  ExpectRejected({1, 5, Bits(1.0f), 0, 1}, 4, "header N 5 != target size 4");
  ExpectRejected({1, -4, Bits(1.0f), 0, 1}, 4, "header N -4");
  ExpectRejected({4, 4, Bits(1.0f), 1, 0}, 5, "header N 4 != target size 5");
}

TEST_F(DecodeRejectTest, UnknownFormat) {
  ExpectRejected({1, 4, Bits(1.0f), 3, 1}, 4, "unknown format 3");
  ExpectRejected({1, 4, Bits(1.0f), -1, 1}, 4, "unknown format -1");
}

TEST_F(DecodeRejectTest, BadThreshold) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float t : {0.0f, -0.0f, -1.0f, inf, -inf,
                  std::numeric_limits<float>::quiet_NaN()}) {
    ExpectRejected({1, 4, Bits(t), 0, 1}, 4, "not finite and > 0");
    ExpectRejected({4, 4, Bits(t), 1, 1}, 4, "not finite and > 0");
  }
}

TEST_F(DecodeRejectTest, CountMismatch) {
  ExpectRejected({2, 4, Bits(1.0f), 0, 1}, 4, "count 2 != length - 4 = 1");
  ExpectRejected({0, 4, Bits(1.0f), 0, 1}, 4, "count 0 != length - 4 = 1");
  ExpectRejected({-1, 4, Bits(1.0f), 0}, 4, "count -1");
}

TEST_F(DecodeRejectTest, ZeroEntry) {
  ExpectRejected({3, 4, Bits(1.0f), 0, 1, 0, 2}, 4, "entry 1 is 0");
}

TEST_F(DecodeRejectTest, OutOfRangeEntry) {
  ExpectRejected({2, 4, Bits(1.0f), 0, 1, 5}, 4, "addresses element 4 of 4");
  ExpectRejected({2, 4, Bits(1.0f), 0, 1, -5}, 4, "addresses element 4 of 4");
  ExpectRejected({1, 4, Bits(1.0f), 0, std::numeric_limits<int32_t>::min()}, 4,
                 "addresses element 2147483647 of 4");
  ExpectRejected({1, 4, Bits(1.0f), 0, std::numeric_limits<int32_t>::max()}, 4,
                 "addresses element 2147483646 of 4");
  // The bad entry comes last: nothing before it was applied.
  ExpectRejected({3, 4, Bits(1.0f), 0, 1, 2, 9}, 4, "entry 2");
}

TEST_F(DecodeRejectTest, RepeatedIndex) {
  ExpectRejected({2, 4, Bits(1.0f), 0, 3, 3}, 4, "element 2 is repeated");
  ExpectRejected({2, 4, Bits(1.0f), 0, 3, -3}, 4, "element 2 is repeated");
  ExpectRejected({3, 8, Bits(1.0f), 0, 5, 2, -5}, 8, "element 4 is repeated");
}

TEST_F(DecodeRejectTest, BitmapCountOrN) {
  ExpectRejected({5, 6, Bits(1.0f), 1, 1}, 6, "bitmap count_or_N 5 != N 6");
  ExpectRejected({0, 6, Bits(1.0f), 2, 1}, 6, "bitmap count_or_N 0 != N 6");
}

TEST_F(DecodeRejectTest, BitmapLength) {
  ExpectRejected({6, 6, Bits(1.0f), 1}, 6, "expected 5");
  ExpectRejected({6, 6, Bits(1.0f), 1, 1, 0}, 6, "has 6 ints; expected 5");
  ExpectRejected({32, 32, Bits(1.0f), 1, 1, 1}, 32, "expected 7");
}

TEST_F(DecodeRejectTest, BitmapPaddingBits) {
  // N = 15: bit 15 (present) and bit 31 (negative) belong to element 15.
  ExpectRejected({15, 15, Bits(1.0f), 1, 1 << 15}, 15, "bits set beyond");
  ExpectRejected({15, 15, Bits(1.0f), 1, static_cast<int32_t>(1u << 31)}, 15,
                 "bits set beyond");
  ExpectRejected({6, 6, Bits(1.0f), 2, 1 << 22}, 6, "bits set beyond");
  // N = 17: the second word may use bit 0 and bit 16 only.
  ExpectRejected({17, 17, Bits(1.0f), 1, 0, 1 << 1}, 17, "bits set beyond");
  ExpectRejected({17, 17, Bits(1.0f), 1, 0, 1 << 17}, 17, "bits set beyond");
  // N = 32: the third word covers nothing.
  ExpectRejected({32, 32, Bits(1.0f), 1, 0, 0, 1}, 32, "bits set beyond");
  ExpectRejected({32, 32, Bits(1.0f), 1, 0, 0, 1 << 16}, 32, "bits set beyond");
}

TEST(DecodeAddBytesTest, RejectsPartialInts) {
  std::vector<float> target(4, 1.0f);
  for (size_t len : {1, 2, 3, 7, 17}) {
    const std::string bytes(len, '\0');
    absl::Status s = DecodeAddBytes(bytes, absl::MakeSpan(target));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("not a multiple of 4"));
  }
  EXPECT_THAT(target, ElementsAre(1, 1, 1, 1));
}

TEST(DecodeAddTest, AcceptsValidEdgeMessages) {
  std::vector<float> target(8, 0.0f);
  // Empty message: no-op.
  EXPECT_TRUE(DecodeAdd({}, absl::MakeSpan(target)).ok());
  // Threshold with no entries.
  EXPECT_TRUE(DecodeAdd({0, 8, Bits(1.0f), 0}, absl::MakeSpan(target)).ok());
  EXPECT_THAT(target, ElementsAre(0, 0, 0, 0, 0, 0, 0, 0));
  // Unsorted distinct entries.
  EXPECT_TRUE(
      DecodeAdd({3, 8, Bits(2.0f), 0, 8, -1, 4}, absl::MakeSpan(target)).ok());
  EXPECT_THAT(target, ElementsAre(-2, 0, 0, 2, 0, 0, 0, 2));
  // Elements N-1 through a bitmap with N % 16 != 0.
  std::vector<float> t17(17, 0.0f);
  EXPECT_TRUE(
      DecodeAdd({17, 17, Bits(1.0f), 2, 0, 1 | (1 << 16)}, absl::MakeSpan(t17))
          .ok());
  EXPECT_EQ(t17[16], -1.0f);
}

TEST(DecodeAddBytesTest, MatchesIntsAtAnyAlignment) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto [n, fmt] : {std::pair<size_t, int32_t>{40, 0}, {1000, 1}}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    std::vector<int32_t> msg;
    ASSERT_TRUE(
        EncodeThresholdOrBitmap(absl::MakeSpan(x), fmt == 0 ? 2.5f : 0.1f, &msg)
            .ok());
    ASSERT_EQ(msg[3], fmt);
    std::string bytes;
    AppendMessageBytes(msg, &bytes);
    ASSERT_EQ(bytes.size(), 4 * msg.size());
    // Little-endian on the wire.
    EXPECT_EQ(static_cast<uint8_t>(bytes[4]), static_cast<uint32_t>(n) & 0xff);
    for (size_t offset = 0; offset < 4; ++offset) {
      std::string shifted(offset, 'x');
      shifted += bytes;
      std::vector<float> a(n, 1.0f), b(n, 1.0f);
      ASSERT_TRUE(DecodeAdd(msg, absl::MakeSpan(a)).ok());
      ASSERT_TRUE(DecodeAddBytes(absl::string_view(shifted).substr(offset),
                                 absl::MakeSpan(b))
                      .ok());
      EXPECT_TRUE(SameBits(a, b));
    }
  }
}

// ---------------------------------------------------------------------------
// Invariants I1-I5 over N x t, with random residuals (fixed seeds).

class InvariantTest
    : public ::testing::TestWithParam<std::tuple<size_t, float>> {};

// Residuals whose elements are "hot" (scale 3t, mostly selected) with
// probability `density`, else "cold" (scale t/3, a few selected); so the
// densities below give EMPTY-or-threshold, threshold and bitmap messages.
std::vector<float> RandomResidual(size_t n, float t, double density,
                                  uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::bernoulli_distribution hot(density);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng) * (hot(rng) ? 3.0f * t : t / 3.0f);
  return x;
}

// I5: re-encoding the decoded message `s` of `msg` at the same t gives
// the same bytes, and leaves nothing behind.
void CheckReencodesTheSame(const std::vector<float>& s,
                           const std::vector<int32_t>& msg, float t) {
  std::vector<float> again = s;
  std::vector<int32_t> msg2;
  absl::StatusOr<EncodeInfo> info2 =
      EncodeThresholdOrBitmap(absl::MakeSpan(again), t, &msg2);
  ASSERT_TRUE(info2.ok());
  EXPECT_EQ(msg2, msg);
  for (float v : again) ASSERT_EQ(v, 0.0f);
}

void CheckInvariants(const std::vector<float>& before,
                     const std::vector<float>& after,
                     const std::vector<int32_t>& msg, const EncodeInfo& info,
                     float t) {
  const size_t n = before.size();
  // I4: size bound; bytes reported.
  EXPECT_LE(info.bytes, 4 * BitmapMessageInts(n));
  EXPECT_EQ(info.bytes, 4 * msg.size());
  const std::vector<float> s = Decoded(msg, n);
  int64_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const float b = before[i], a = after[i];
    k += std::abs(b) >= t;
    // I1: r_after == fl(r_before - s), so |r_before - (r_after + s)| <=
    // ulp(r_before)/2, and exact (Sterbenz) when t <= |r_before| <= 2t.
    ASSERT_TRUE(SameBits(a, b - s[i])) << "i=" << i << " b=" << b;
    const double err =
        std::abs(static_cast<double>(b) - (static_cast<double>(a) + s[i]));
    const double half_ulp =
        0.5 * (std::nextafter(std::abs(b), INFINITY) - std::abs(b));
    ASSERT_LE(err, half_ulp) << i;
    if (std::abs(b) >= t && std::abs(b) <= 2 * t) {
      ASSERT_TRUE(SameBits(a + s[i], b)) << i;
    }
    if (s[i] == 0.0f) {
      ASSERT_TRUE(SameBits(a, b)) << i;  // Unsent: unchanged.
    }
    if (info.kind == Kind::kThreshold) {
      // I2: exactly the elements at or above t are sent.
      ASSERT_EQ(s[i] != 0.0f, std::abs(b) >= t) << i;
      // I3: the sent ones move toward 0 by t; below t when they were < 2t.
      if (s[i] != 0.0f) {
        ASSERT_LT(std::abs(a), std::abs(b));
        if (std::abs(b) < 2 * t) {
          ASSERT_LT(std::abs(a), t) << i;
        }
      }
    }
    if (info.kind == Kind::kBitmap) {
      const float expected = std::abs(b) >= t         ? (b > 0 ? t : -t)
                             : (b < 0 && -b >= t / 2) ? -t / 2
                                                      : 0.0f;
      ASSERT_EQ(s[i], expected) << i;
    }
  }
  EXPECT_EQ(info.selected, k);
  const Kind expected_kind = k == 0 ? Kind::kEmpty
                             : 4 + static_cast<size_t>(k) < BitmapMessageInts(n)
                                 ? Kind::kThreshold
                                 : Kind::kBitmap;
  EXPECT_EQ(info.kind, expected_kind);
  CheckReencodesTheSame(s, msg, t);
}

TEST_P(InvariantTest, HoldForRandomResiduals) {
  const auto [n, t] = GetParam();
  int kinds_seen[4] = {0, 0, 0, 0};
  uint32_t seed = 1;
  for (double density : {0.0, 0.001, 0.01, 0.05, 0.3, 1.0}) {
    const std::vector<float> before = RandomResidual(n, t, density, seed++);
    std::vector<float> r = before;
    std::vector<int32_t> msg;
    absl::StatusOr<EncodeInfo> info =
        EncodeThresholdOrBitmap(absl::MakeSpan(r), t, &msg);
    ASSERT_TRUE(info.ok());
    ++kinds_seen[static_cast<int>(info->kind)];
    CheckInvariants(before, r, msg, *info, t);
    if (HasFailure()) return;
  }
  EXPECT_EQ(kinds_seen[static_cast<int>(Kind::kNonFinite)], 0);
  EXPECT_GT(kinds_seen[static_cast<int>(Kind::kBitmap)], 0);
  if (n >= 1000) {
    EXPECT_GT(kinds_seen[static_cast<int>(Kind::kThreshold)], 0);
  }
}

TEST_P(InvariantTest, ForcedBitmapsConserve) {
  const auto [n, t] = GetParam();
  for (CodecFormat fmt : {CodecFormat::kBitmap, CodecFormat::kBitmapShakeup}) {
    const std::vector<float> before = RandomResidual(n, t, 0.01, 99);
    std::vector<float> r = before;
    std::vector<int32_t> msg;
    absl::StatusOr<EncodeInfo> info =
        EncodeBitmap(absl::MakeSpan(r), t, fmt, &msg);
    ASSERT_TRUE(info.ok());
    ASSERT_EQ(msg.size(), BitmapMessageInts(n));
    EXPECT_EQ(msg[3], static_cast<int32_t>(fmt));
    const std::vector<float> s = Decoded(msg, n);
    int64_t encoded = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(SameBits(r[i], before[i] - s[i])) << i;  // I1.
      encoded += s[i] != 0.0f;
    }
    EXPECT_EQ(info->encoded, encoded);
    // I5 for a forced bitmap.
    std::vector<float> again = s;
    std::vector<int32_t> msg2;
    ASSERT_TRUE(EncodeBitmap(absl::MakeSpan(again), t, fmt, &msg2).ok());
    EXPECT_EQ(msg2, msg);
  }
}

INSTANTIATE_TEST_SUITE_P(
    SizesAndThresholds, InvariantTest,
    ::testing::Combine(::testing::Values(size_t{1}, size_t{15}, size_t{16},
                                         size_t{17}, size_t{1000},
                                         size_t{1} << 20),
                       ::testing::Values(1e-6f, 1e-3f, 1.0f)));

// Cumulative conservation in float64: sum of everything sent plus the final
// residual equals the sum of all updates, to rounding (no clipping).
TEST(ThresholdCodecTest, CumulativeConservation) {
  const size_t n = 4096;
  const int steps = 400;
  const float t = 1e-2f;
  std::mt19937 rng(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> r(n, 0.0f), u(n);
  std::vector<double> total_u(n, 0.0), total_sent(n, 0.0);
  std::vector<double> max_abs(n, 0.0);
  int kinds[4] = {0, 0, 0, 0};
  for (int step = 0; step < steps; ++step) {
    // Alternate quiet and busy phases so all formats occur.
    const float scale = (step / 50) % 2 == 0 ? 2e-3f : 1e-2f;
    for (size_t i = 0; i < n; ++i) {
      u[i] = normal(rng) * scale;
      r[i] += u[i];
      total_u[i] += u[i];
      max_abs[i] = std::max(max_abs[i], static_cast<double>(std::abs(r[i])));
    }
    std::vector<int32_t> msg;
    absl::StatusOr<EncodeInfo> info =
        step % 7 == 3 ? EncodeBitmap(absl::MakeSpan(r), t / 3,
                                     CodecFormat::kBitmapShakeup, &msg)
                      : EncodeThresholdOrBitmap(absl::MakeSpan(r), t, &msg);
    ASSERT_TRUE(info.ok());
    ++kinds[static_cast<int>(info->kind)];
    const std::vector<float> s = Decoded(msg, n);
    for (size_t i = 0; i < n; ++i) total_sent[i] += s[i];
  }
  EXPECT_GT(kinds[static_cast<int>(Kind::kThreshold)], 0);
  EXPECT_GT(kinds[static_cast<int>(Kind::kBitmap)], 0);
  for (size_t i = 0; i < n; ++i) {
    // Each step rounds twice (r += u, r -= s), by at most ulp(max|r|)/2.
    const double ulp = max_abs[i] * std::ldexp(1.0, -23);
    EXPECT_NEAR(total_sent[i] + r[i], total_u[i], steps * ulp + 1e-30) << i;
  }
}

}  // namespace
}  // namespace shardps
