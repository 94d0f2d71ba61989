#include "compression/threshold_control.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = EncodeInfo::Kind;

constexpr double kDecay = AdaptiveThreshold::kDefaultDecayRate;

std::unique_ptr<ThresholdAlgorithm> Fixed(double t) {
  absl::StatusOr<std::unique_ptr<FixedThreshold>> f = FixedThreshold::Create(t);
  EXPECT_TRUE(f.ok()) << f.status();
  return *std::move(f);
}

std::unique_ptr<ThresholdAlgorithm> Adaptive(
    const AdaptiveThreshold::Options& o = {}) {
  absl::StatusOr<std::unique_ptr<AdaptiveThreshold>> a =
      AdaptiveThreshold::Create(o);
  EXPECT_TRUE(a.ok()) << a.status();
  return *std::move(a);
}

std::unique_ptr<GradientCompressor> Compressor(
    size_t n, std::unique_ptr<ThresholdAlgorithm> algo,
    const GradientCompressor::Options& o = {}) {
  absl::StatusOr<std::unique_ptr<GradientCompressor>> c =
      GradientCompressor::Create(n, std::move(algo), o);
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

std::vector<float> Decoded(const std::vector<int32_t>& msg, size_t n) {
  std::vector<float> s(n, 0.0f);
  absl::Status st = DecodeAdd(msg, absl::MakeSpan(s));
  EXPECT_TRUE(st.ok()) << st;
  return s;
}

// ---------------------------------------------------------------------------
// FixedThreshold

TEST(FixedThresholdTest, IsConstant) {
  std::unique_ptr<ThresholdAlgorithm> f = Fixed(0.25);
  EXPECT_EQ(f->threshold(), 0.25);
  for (double s : {0.0, 1e-6, 0.5, 1.0 / 16}) {
    f->Update(s);
    EXPECT_EQ(f->threshold(), 0.25);
  }
}

TEST(FixedThresholdTest, RejectsBadValues) {
  for (double t : {0.0, -1.0, 1e-50 /* 0 as a float */, 1e50 /* inf */,
                   std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_EQ(FixedThreshold::Create(t).status().code(),
              absl::StatusCode::kInvalidArgument)
        << t;
  }
}

// ---------------------------------------------------------------------------
// AdaptiveThreshold

TEST(AdaptiveThresholdTest, Defaults) {
  AdaptiveThreshold::Options o;
  EXPECT_EQ(o.initial_threshold, 1e-3);
  EXPECT_EQ(o.min_sparsity_target, 1e-4);
  EXPECT_EQ(o.max_sparsity_target, 1e-2);
  EXPECT_DOUBLE_EQ(o.decay_rate, std::pow(0.5, 1.0 / 20));
  EXPECT_NEAR(o.decay_rate, 0.965936, 1e-6);
  EXPECT_EQ(o.min_threshold, 1e-8);
  EXPECT_EQ(o.max_threshold, 1e2);
  EXPECT_EQ(Adaptive()->threshold(), 1e-3);  // Step 1: the initial value.
}

TEST(AdaptiveThresholdTest, LowersWhenTooSparse) {
  std::unique_ptr<ThresholdAlgorithm> a = Adaptive();
  a->Update(0.0);  // Nothing sent.
  EXPECT_DOUBLE_EQ(a->threshold(), 1e-3 * kDecay);
  a->Update(0.5e-4);  // Below the 1e-4 target.
  EXPECT_DOUBLE_EQ(a->threshold(), 1e-3 * kDecay * kDecay);
  for (int i = 2; i < 20; ++i) a->Update(0.0);
  EXPECT_NEAR(a->threshold(), 0.5e-3, 1e-15);  // Halves in 20 steps.
}

TEST(AdaptiveThresholdTest, RaisesWhenTooDense) {
  std::unique_ptr<ThresholdAlgorithm> a = Adaptive();
  a->Update(1.0 / 16);  // What a bitmap step reports.
  EXPECT_DOUBLE_EQ(a->threshold(), 1e-3 / kDecay);
  for (int i = 1; i < 20; ++i) a->Update(0.02);
  EXPECT_NEAR(a->threshold(), 2e-3, 1e-15);  // Doubles in 20 steps.
}

TEST(AdaptiveThresholdTest, KeepsThresholdInsideTheBand) {
  std::unique_ptr<ThresholdAlgorithm> a = Adaptive();
  for (double s : {1e-4, 1e-3, 5e-3, 1e-2}) {  // Band ends included.
    a->Update(s);
    EXPECT_EQ(a->threshold(), 1e-3) << s;
  }
}

TEST(AdaptiveThresholdTest, ClampsToBounds) {
  std::unique_ptr<ThresholdAlgorithm> a = Adaptive();
  for (int i = 0; i < 2000; ++i) a->Update(0.0);
  EXPECT_EQ(a->threshold(), 1e-8);
  for (int i = 0; i < 2000; ++i) a->Update(1.0);
  EXPECT_EQ(a->threshold(), 1e2);
  AdaptiveThreshold::Options o;
  o.min_threshold = 5e-4;
  o.max_threshold = 2e-3;
  a = Adaptive(o);
  for (int i = 0; i < 100; ++i) a->Update(0.0);
  EXPECT_EQ(a->threshold(), 5e-4);
  for (int i = 0; i < 100; ++i) a->Update(1.0);
  EXPECT_EQ(a->threshold(), 2e-3);
}

TEST(AdaptiveThresholdTest, Validation) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    AdaptiveThreshold::Options o;
    const char* what;
  };
  std::vector<Case> cases;
  auto add = [&](auto mutate, const char* what) {
    AdaptiveThreshold::Options o;
    mutate(o);
    cases.push_back({o, what});
  };
  for (double v : {0.0, -1e-3, nan, inf}) {
    add([v](auto& o) { o.initial_threshold = v; }, "initial_threshold");
  }
  for (double v : {0.0, -1e-4, nan}) {
    add([v](auto& o) { o.min_sparsity_target = v; }, "sparsity targets");
  }
  add([](auto& o) { o.max_sparsity_target = 0.5e-4; }, "sparsity targets");
  add([nan](auto& o) { o.max_sparsity_target = nan; }, "sparsity targets");
  for (double v : {0.49, 1.0, 1.5, 0.0, nan}) {
    add([v](auto& o) { o.decay_rate = v; }, "decay_rate");
  }
  add([](auto& o) { o.min_threshold = 0; }, "min_threshold");
  add([](auto& o) { o.min_threshold = 1e-2; }, "min_threshold");
  add([](auto& o) { o.max_threshold = 1e-4; }, "max_threshold");
  add([](auto& o) { o.max_threshold = 1e300; }, "max_threshold");
  for (const Case& c : cases) {
    absl::Status s = AdaptiveThreshold::Create(c.o).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(s.message(), HasSubstr(c.what));
  }
  // Edges that are allowed: decay 0.5, min == max target.
  AdaptiveThreshold::Options o;
  o.decay_rate = 0.5;
  o.min_sparsity_target = o.max_sparsity_target = 1e-3;
  EXPECT_TRUE(AdaptiveThreshold::Create(o).ok());
}

// ---------------------------------------------------------------------------
// ResidualClipper

TEST(ResidualClipperTest, ClipsOnlyOnItsIterations) {
  absl::StatusOr<ResidualClipper> c = ResidualClipper::Create({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->options().factor, 5.0);
  EXPECT_EQ(c->options().frequency, 5);
  const std::vector<float> orig = {10, -7, 3, -5, 5};
  for (int64_t iter : {0, 1, 4, 6, 9}) {
    std::vector<float> r = orig;
    EXPECT_EQ(c->MaybeClip(iter, 1.0f, absl::MakeSpan(r)), 0.0);
    EXPECT_EQ(r, orig) << iter;
  }
  for (int64_t iter : {5, 10}) {
    std::vector<float> r = orig;
    EXPECT_EQ(c->MaybeClip(iter, 1.0f, absl::MakeSpan(r)), 7.0);
    EXPECT_THAT(r, ElementsAre(5, -5, 3, -5, 5));
  }
  std::vector<float> r = orig;
  EXPECT_DOUBLE_EQ(c->MaybeClip(5, 0.5f, absl::MakeSpan(r)),
                   7.5 + 4.5 + 0.5 + 2.5 + 2.5);
  EXPECT_THAT(r, ElementsAre(2.5f, -2.5f, 2.5f, -2.5f, 2.5f));
}

TEST(ResidualClipperTest, Validation) {
  for (double f : {0.99, 0.0, -5.0, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_EQ(ResidualClipper::Create({f, 5}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  for (int64_t freq : {0, -1}) {
    EXPECT_EQ(ResidualClipper::Create({5.0, freq}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(ResidualClipper::Create({1.0, 1}).ok());
}

// ---------------------------------------------------------------------------
// GradientCompressor

TEST(GradientCompressorTest, CreateValidation) {
  EXPECT_EQ(GradientCompressor::Create(4, nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  GradientCompressor::Options o;
  o.shake_frequency = -1;
  EXPECT_EQ(GradientCompressor::Create(4, Fixed(1), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = {};
  o.clipper.factor = 0.5;
  EXPECT_EQ(GradientCompressor::Create(4, Fixed(1), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      GradientCompressor::Create(size_t{1} << 31, Fixed(1), {}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(GradientCompressorTest, StepAccumulatesEncodesAndReports) {
  auto c = Compressor(100, Fixed(1.0));
  EXPECT_EQ(c->threshold(), 1.0f);
  std::vector<float> u(100, 0.0f);
  u[3] = 0.6f;
  u[50] = -1.5f;
  std::vector<int32_t> out;
  absl::StatusOr<EncodeInfo> info = c->Step(u, &out);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, Kind::kThreshold);
  EXPECT_EQ(out,
            (std::vector<int32_t>{
                1, 100, static_cast<int32_t>(codec::FloatBits(1.0f)), 0, -51}));
  EXPECT_EQ(c->residual()[3], 0.6f);
  EXPECT_EQ(c->residual()[50], -0.5f);
  EXPECT_EQ(c->last_sparsity(), 0.01);
  EXPECT_EQ(c->last_threshold(), 1.0f);
  EXPECT_EQ(c->iteration(), 1);
  // Second step: 0.6 + 0.6 crosses t.
  out.clear();
  info = c->Step(u, &out);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->selected, 2);
  EXPECT_EQ(Decoded(out, 100)[3], 1.0f);
  EXPECT_EQ(c->residual()[3], 0.6f + 0.6f - 1.0f);
  EXPECT_EQ(c->residual()[50], -1.0f);
  EXPECT_EQ(c->iteration(), 2);
}

TEST(GradientCompressorTest, RejectsWrongUpdateSize) {
  auto c = Compressor(10, Fixed(1.0));
  std::vector<float> u(9, 0.0f);
  std::vector<int32_t> out;
  absl::StatusOr<EncodeInfo> info = c->Step(u, &out);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(info.status().message(), HasSubstr("expected 10"));
  EXPECT_EQ(c->iteration(), 0);
}

TEST(GradientCompressorTest, NonFiniteStepChangesNothing) {
  auto c = Compressor(1, Fixed(1.0));
  std::vector<int32_t> out;
  std::vector<float> big = {3e38f};
  ASSERT_TRUE(c->Step(big, &out).ok());  // N = 1: always a bitmap.
  EXPECT_EQ(out.size(), 5u);
  const float r = c->residual()[0];
  const float t = c->threshold();
  out.clear();
  for (float bad :
       {3e38f /* overflows r */, std::numeric_limits<float>::quiet_NaN(),
        -std::numeric_limits<float>::infinity()}) {
    std::vector<float> u = {bad};
    absl::StatusOr<EncodeInfo> info = c->Step(u, &out);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->kind, Kind::kNonFinite);
    EXPECT_TRUE(out.empty());
    EXPECT_EQ(c->residual()[0], r);
    EXPECT_EQ(c->threshold(), t);
    EXPECT_EQ(c->iteration(), 1);
  }
  GradientCompressor::Options o;
  o.use_residual = false;
  c = Compressor(2, Fixed(1.0), o);
  std::vector<float> u = {1.0f, std::numeric_limits<float>::infinity()};
  absl::StatusOr<EncodeInfo> info = c->Step(u, &out);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, Kind::kNonFinite);
  EXPECT_THAT(c->residual(), ElementsAre(0.0f, 0.0f));
}

TEST(GradientCompressorTest, AdaptiveThresholdFollowsSparsity) {
  const size_t n = 16000;  // Bitmap is 1005 ints.
  auto c = Compressor(n, Adaptive());
  std::vector<int32_t> out;
  // Nothing crosses t: the threshold falls by the decay rate each step.
  std::vector<float> quiet(n, 0.0f);
  double expected = 1e-3;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<EncodeInfo> info = c->Step(quiet, &out);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->kind, Kind::kEmpty);
    EXPECT_EQ(c->last_sparsity(), 0.0);
    expected *= kDecay;
    EXPECT_EQ(c->threshold(), static_cast<float>(expected));
  }
  // Everything crosses t: bitmap, sparsity 1/16, the threshold rises.
  std::vector<float> loud(n, 1.0f);
  absl::StatusOr<EncodeInfo> info = c->Step(loud, &out);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, Kind::kBitmap);
  EXPECT_EQ(c->last_sparsity(), 1.0 / 16);
  expected /= kDecay;
  EXPECT_EQ(c->threshold(), static_cast<float>(expected));
  // 0.5% of the elements cross t: in the band, t stays.
  c = Compressor(n, Adaptive());
  std::vector<float> some(n, 0.0f);
  for (size_t i = 0; i < 80; ++i) some[i * 200] = 1.0f;
  info = c->Step(some, &out);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, Kind::kThreshold);
  EXPECT_EQ(c->last_sparsity(), 80.0 / n);
  EXPECT_EQ(c->threshold(), 1e-3f);
}

TEST(GradientCompressorTest, AdaptiveThresholdSettlesInTheBand) {
  // Gaussian updates far below the initial threshold, as late in training:
  // the threshold falls until the residual's tail crosses it, then the
  // sparsity stays in [1e-4, 1e-2] (the pass criterion of E2,
  // docs/compression.md).
  const size_t n = 50000;
  auto c = Compressor(n, Adaptive());
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1e-5f);
  std::vector<float> u(n);
  std::vector<int32_t> out;
  int in_band = 0, late = 0;
  for (int step = 0; step < 400; ++step) {
    for (float& v : u) v = normal(rng);
    out.clear();
    ASSERT_TRUE(c->Step(u, &out).ok());
    if (step >= 250) {
      ++late;
      in_band += c->last_sparsity() >= 1e-4 && c->last_sparsity() <= 1e-2;
    }
  }
  EXPECT_LT(c->threshold(), 1e-3f);
  EXPECT_GE(in_band, late * 9 / 10) << in_band << " of " << late;
}

TEST(GradientCompressorTest, ClippingReportsMass) {
  // N = 32: threshold while k < 3. One element of 100 sends 1 a step.
  GradientCompressor::Options o;
  o.clip = true;
  auto c = Compressor(32, Fixed(1.0), o);
  std::vector<float> u(32, 0.0f), zero(32, 0.0f);
  u[0] = 100.0f;
  std::vector<int32_t> out;
  ASSERT_TRUE(c->Step(u, &out).ok());
  for (int i = 1; i < 5; ++i) {
    ASSERT_TRUE(c->Step(zero, &out).ok());
    EXPECT_EQ(c->last_clipped_mass(), 0.0);
  }
  EXPECT_EQ(c->residual()[0], 95.0f);
  ASSERT_TRUE(c->Step(zero, &out).ok());  // Iteration 5: clip to 5t.
  EXPECT_EQ(c->residual()[0], 5.0f);
  EXPECT_EQ(c->last_clipped_mass(), 89.0);
  EXPECT_EQ(c->total_clipped_mass(), 89.0);
  ASSERT_TRUE(c->Step(zero, &out).ok());
  EXPECT_EQ(c->last_clipped_mass(), 0.0);
  EXPECT_EQ(c->total_clipped_mass(), 89.0);
  // Off by default: nothing is clipped.
  c = Compressor(32, Fixed(1.0));
  ASSERT_TRUE(c->Step(u, &out).ok());
  for (int i = 1; i < 6; ++i) ASSERT_TRUE(c->Step(zero, &out).ok());
  EXPECT_EQ(c->residual()[0], 94.0f);
  EXPECT_EQ(c->total_clipped_mass(), 0.0);
}

TEST(GradientCompressorTest, ShakeupSendsFormat2AtAThirdOfT) {
  GradientCompressor::Options o;
  o.shake_frequency = 3;
  auto c = Compressor(64, Adaptive(), o);
  std::vector<float> u(64, 0.0f);
  for (int step = 0; step < 7; ++step) {
    const float t = c->threshold();
    std::vector<int32_t> out;
    absl::StatusOr<EncodeInfo> info = c->Step(u, &out);
    ASSERT_TRUE(info.ok());
    if (step == 3 || step == 6) {
      EXPECT_EQ(info->kind, Kind::kBitmap);
      ASSERT_EQ(out.size(), BitmapMessageInts(64));
      EXPECT_EQ(out[3], 2);
      EXPECT_EQ(out[0], 64);
      EXPECT_EQ(codec::BitsToFloat(static_cast<uint32_t>(out[2])), t / 3.0f);
      EXPECT_EQ(c->last_threshold(), t / 3.0f);
      EXPECT_EQ(c->threshold(), t);  // Not adapted on shake-up steps.
    } else {
      EXPECT_EQ(info->kind, Kind::kEmpty) << step;
      EXPECT_LT(c->threshold(), t);
    }
  }
  // A shake-up message sends what lies between t/3 and t.
  c = Compressor(16, Fixed(0.9), o);
  std::vector<float> v(16, 0.0f), z(16, 0.0f);
  v[0] = 0.4f;
  v[1] = -0.2f;
  std::vector<int32_t> out;
  for (int step = 0; step < 4; ++step) {
    out.clear();
    ASSERT_TRUE(c->Step(step == 0 ? v : z, &out).ok());
  }
  const float ts = 0.9f / 3.0f;
  EXPECT_EQ(out[3], 2);
  EXPECT_EQ(Decoded(out, 16)[0], ts);
  EXPECT_EQ(Decoded(out, 16)[1], -0.5f * ts);
  EXPECT_EQ(c->residual()[0], 0.4f - ts);
  EXPECT_EQ(c->residual()[1], -0.2f + 0.5f * ts);
}

TEST(GradientCompressorTest, WithoutResidualDropsWhatIsNotSent) {
  std::vector<float> u(100, 0.6f);
  for (bool use_residual : {true, false}) {
    GradientCompressor::Options o;
    o.use_residual = use_residual;
    auto c = Compressor(100, Fixed(1.0), o);
    std::vector<int32_t> out;
    absl::StatusOr<EncodeInfo> info = c->Step(u, &out);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->kind, Kind::kEmpty);
    info = c->Step(u, &out);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->kind, use_residual ? Kind::kBitmap : Kind::kEmpty);
    EXPECT_FLOAT_EQ(c->residual()[0], use_residual ? 0.2f : 0.6f);
  }
}

// Sum of everything sent plus the final residual equals the sum of all
// updates (float64, no clipping), with the adaptive threshold and shake-ups.
TEST(GradientCompressorTest, CumulativeConservation) {
  const size_t n = 3000;
  const int steps = 600;
  GradientCompressor::Options o;
  o.shake_frequency = 17;
  auto c = Compressor(n, Adaptive(), o);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> u(n);
  std::vector<double> total_u(n, 0.0), total_sent(n, 0.0), max_abs(n, 0.0);
  int kinds[4] = {0, 0, 0, 0};
  for (int step = 0; step < steps; ++step) {
    const float scale = step % 100 < 50 ? 1e-4f : 3e-3f;
    for (size_t i = 0; i < n; ++i) {
      u[i] = normal(rng) * scale;
      total_u[i] += u[i];
      max_abs[i] = std::max(
          max_abs[i], std::abs(static_cast<double>(c->residual()[i]) + u[i]));
    }
    std::vector<int32_t> out;
    absl::StatusOr<EncodeInfo> info = c->Step(u, &out);
    ASSERT_TRUE(info.ok());
    ++kinds[static_cast<int>(info->kind)];
    const std::vector<float> s = Decoded(out, n);
    for (size_t i = 0; i < n; ++i) total_sent[i] += s[i];
  }
  EXPECT_GT(kinds[static_cast<int>(Kind::kThreshold)], 0);
  EXPECT_GT(kinds[static_cast<int>(Kind::kBitmap)], 0);
  EXPECT_EQ(c->total_clipped_mass(), 0.0);
  for (size_t i = 0; i < n; ++i) {
    const double ulp = 2 * max_abs[i] * std::ldexp(1.0, -23);
    EXPECT_NEAR(total_sent[i] + c->residual()[i], total_u[i], steps * ulp) << i;
  }
}

}  // namespace
}  // namespace shardps
