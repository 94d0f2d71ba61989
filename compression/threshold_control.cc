#include "compression/threshold_control.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/finite.h"

namespace shardps {
namespace {

bool PositiveFinite(double x) { return x > 0.0 && std::isfinite(x); }

// True when r_i + u_i (in float, as the step computes it) is finite for
// every i. Branch-free so it vectorises.
bool SumAllFinite(const float* r, const float* u, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    bad |= codec::NonFiniteAbsBits(codec::AbsBits(r[i] + u[i])) ? 1u : 0u;
  }
  return bad == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FixedThreshold>> FixedThreshold::Create(
    double threshold) {
  if (!PositiveFinite(threshold) ||
      !PositiveFinite(static_cast<float>(threshold))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fixed threshold must be finite and > 0 as a float, got ", threshold));
  }
  return std::unique_ptr<FixedThreshold>(new FixedThreshold(threshold));
}

absl::StatusOr<std::unique_ptr<AdaptiveThreshold>> AdaptiveThreshold::Create(
    const Options& o) {
  if (!PositiveFinite(o.initial_threshold)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initial_threshold must be finite and > 0, got ", o.initial_threshold));
  }
  if (!PositiveFinite(o.min_sparsity_target) ||
      !(o.min_sparsity_target <= o.max_sparsity_target) ||
      !std::isfinite(o.max_sparsity_target)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparsity targets must satisfy 0 < min <= max, got min ",
                     o.min_sparsity_target, " max ", o.max_sparsity_target));
  }
  if (!(o.decay_rate >= 0.5 && o.decay_rate < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("decay_rate must be in [0.5, 1), got ", o.decay_rate));
  }
  if (!PositiveFinite(o.min_threshold) || !PositiveFinite(o.max_threshold) ||
      !(o.min_threshold <= o.initial_threshold &&
        o.initial_threshold <= o.max_threshold) ||
      !PositiveFinite(static_cast<float>(o.min_threshold)) ||
      !PositiveFinite(static_cast<float>(o.max_threshold))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need 0 < min_threshold <= initial_threshold <= max_threshold, all "
        "finite and > 0 as floats; got ",
        o.min_threshold, " <= ", o.initial_threshold, " <= ", o.max_threshold));
  }
  return std::unique_ptr<AdaptiveThreshold>(new AdaptiveThreshold(o));
}

void AdaptiveThreshold::Update(double sparsity) {
  double t = threshold_;
  if (sparsity < options_.min_sparsity_target) {
    t *= options_.decay_rate;  // Too sparse: lower t, send more.
  } else if (sparsity > options_.max_sparsity_target) {
    t /= options_.decay_rate;  // Too dense: raise t, send less.
  }
  threshold_ = std::clamp(t, options_.min_threshold, options_.max_threshold);
}

absl::StatusOr<ResidualClipper> ResidualClipper::Create(const Options& o) {
  if (!(o.factor >= 1.0) || !std::isfinite(o.factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip factor must be finite and >= 1, got ", o.factor));
  }
  if (o.frequency < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip frequency must be >= 1, got ", o.frequency));
  }
  return ResidualClipper(o);
}

double ResidualClipper::MaybeClip(int64_t iteration, float threshold,
                                  absl::Span<float> residual) const {
  if (iteration <= 0 || iteration % options_.frequency != 0) return 0.0;
  const float bound = static_cast<float>(options_.factor * threshold);
  double removed = 0.0;
  for (float& v : residual) {
    const float c = std::clamp(v, -bound, bound);
    removed += std::abs(static_cast<double>(v) - static_cast<double>(c));
    v = c;
  }
  return removed;
}

GradientCompressor::GradientCompressor(
    size_t n, std::unique_ptr<ThresholdAlgorithm> algorithm,
    const Options& options, ResidualClipper clipper)
    : options_(options),
      algorithm_(std::move(algorithm)),
      clipper_(std::move(clipper)),
      residual_(n, 0.0f) {}

absl::StatusOr<std::unique_ptr<GradientCompressor>> GradientCompressor::Create(
    size_t num_elements, std::unique_ptr<ThresholdAlgorithm> algorithm,
    const Options& options) {
  if (algorithm == nullptr) {
    return absl::InvalidArgumentError("threshold algorithm is null");
  }
  if (num_elements > static_cast<uint64_t>(kCodecMaxElements)) {
    return absl::InvalidArgumentError(
        absl::StrCat(num_elements, " elements; the codec allows at most ",
                     kCodecMaxElements));
  }
  if (options.shake_frequency < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shake_frequency must be >= 0, got ", options.shake_frequency));
  }
  absl::StatusOr<ResidualClipper> clipper =
      ResidualClipper::Create(options.clipper);
  if (!clipper.ok()) return clipper.status();
  return std::unique_ptr<GradientCompressor>(new GradientCompressor(
      num_elements, std::move(algorithm), options, *std::move(clipper)));
}

float GradientCompressor::threshold() const {
  return static_cast<float>(algorithm_->threshold());
}

absl::StatusOr<EncodeInfo> GradientCompressor::Step(
    absl::Span<const float> update, std::vector<int32_t>* out) {
  const size_t n = residual_.size();
  if (update.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("update has ", update.size(), " elements; expected ", n));
  }
  float* r = residual_.data();
  if (options_.use_residual) {
    if (!SumAllFinite(r, update.data(), n)) {
      EncodeInfo info;
      info.kind = EncodeInfo::Kind::kNonFinite;
      return info;
    }
    for (size_t i = 0; i < n; ++i) r[i] += update[i];
  } else {
    if (!AllFinite(update.data(), n)) {
      EncodeInfo info;
      info.kind = EncodeInfo::Kind::kNonFinite;
      return info;
    }
    std::copy(update.begin(), update.end(), r);
  }

  const float t = threshold();
  const bool shake = options_.shake_frequency > 0 && iteration_ > 0 &&
                     iteration_ % options_.shake_frequency == 0;
  absl::StatusOr<EncodeInfo> info =
      shake ? EncodeBitmap(absl::MakeSpan(residual_), t / 3.0f,
                           CodecFormat::kBitmapShakeup, out)
            : EncodeThresholdOrBitmap(absl::MakeSpan(residual_), t, out);
  // The inputs were checked above, so the codec cannot fail or see NaN.
  if (!info.ok()) return info.status();
  last_threshold_ = shake ? t / 3.0f : t;

  last_clipped_mass_ =
      options_.clip
          ? clipper_.MaybeClip(iteration_, t, absl::MakeSpan(residual_))
          : 0.0;
  total_clipped_mass_ += last_clipped_mass_;

  if (!shake) {
    switch (info->kind) {
      case EncodeInfo::Kind::kBitmap:
        last_sparsity_ = 1.0 / 16.0;
        break;
      case EncodeInfo::Kind::kThreshold:
        last_sparsity_ =
            static_cast<double>(info->selected) / static_cast<double>(n);
        break;
      default:
        last_sparsity_ = 0.0;
        break;
    }
    algorithm_->Update(last_sparsity_);
  }
  ++iteration_;
  return info;
}

}  // namespace shardps
