#ifndef SHARDPS_COMPRESSION_THRESHOLD_CONTROL_H_
#define SHARDPS_COMPRESSION_THRESHOLD_CONTROL_H_

// Per-tensor state around the threshold codec (common/threshold_codec.h):
// threshold algorithms, residual clipping and the worker's compression step,
// as docs/compression.md ("Specification") specifies them (DL4J's
// AdaptiveThresholdAlgorithm, FixedThresholdAlgorithm and
// ResidualClippingPostProcessor).

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compression/threshold_codec.h"

namespace shardps {

// Chooses each step's threshold from the sparsity the previous step reached.
// Requires external synchronization.
class ThresholdAlgorithm {
 public:
  virtual ~ThresholdAlgorithm() = default;

  // The threshold for the current step.
  virtual double threshold() const = 0;

  // Records the sparsity the current step reached (k/N after a threshold
  // message, 0 after EMPTY, 1/16 after a bitmap) and moves to the next
  // step's threshold.
  virtual void Update(double sparsity) = 0;
};

// A constant threshold (DL4J FixedThresholdAlgorithm).
// Requires external synchronization.
class FixedThreshold final : public ThresholdAlgorithm {
 public:
  // InvalidArgument unless `threshold` is finite and > 0.
  static absl::StatusOr<std::unique_ptr<FixedThreshold>> Create(
      double threshold);

  double threshold() const override { return threshold_; }
  void Update(double sparsity) override {}

 private:
  explicit FixedThreshold(double threshold) : threshold_(threshold) {}
  const double threshold_;
};

// DL4J AdaptiveThresholdAlgorithm: after a step whose sparsity was below
// min_sparsity_target, t *= decay_rate (send more); above
// max_sparsity_target, t /= decay_rate (send less); otherwise t stays. The
// result is clamped to [min_threshold, max_threshold].
// Requires external synchronization.
class AdaptiveThreshold final : public ThresholdAlgorithm {
 public:
  // 0.5^(1/20): the threshold halves or doubles in 20 steps.
  static constexpr double kDefaultDecayRate = 0.965936328924846;

  struct Options {
    // The first step's threshold. Default 1e-3 (DL4J's documented value;
    // its class constant is 1e-4).
    double initial_threshold = 1e-3;
    // Sparsity band kept (k/N). Defaults 1e-4 and 1e-2.
    double min_sparsity_target = 1e-4;
    double max_sparsity_target = 1e-2;
    // Multiplier per step, in [0.5, 1). Default kDefaultDecayRate.
    double decay_rate = kDefaultDecayRate;
    // Clamp for the threshold. Defaults 1e-8 and 1e2.
    double min_threshold = 1e-8;
    double max_threshold = 1e2;
  };

  // InvalidArgument unless initial_threshold > 0 and finite,
  // 0 < min_sparsity_target <= max_sparsity_target, 0.5 <= decay_rate < 1,
  // and 0 < min_threshold <= initial_threshold <= max_threshold < inf.
  static absl::StatusOr<std::unique_ptr<AdaptiveThreshold>> Create(
      const Options& options);

  double threshold() const override { return threshold_; }
  void Update(double sparsity) override;

 private:
  explicit AdaptiveThreshold(const Options& options)
      : options_(options), threshold_(options.initial_threshold) {}
  const Options options_;
  double threshold_;
};

// DL4J ResidualClippingPostProcessor: on steps with iteration > 0 and
// iteration % frequency == 0, clips every residual value to
// [-factor * t, factor * t]. Clipping drops mass on purpose (it breaks
// conservation), so it reports how much.
// Thread-compatible: const after creation.
class ResidualClipper {
 public:
  struct Options {
    // Clip bound in thresholds; >= 1. Default 5 (DL4J's default).
    double factor = 5.0;
    // Clip every `frequency` iterations; >= 1. Default 5.
    int64_t frequency = 5;
  };

  // InvalidArgument unless factor >= 1 (finite) and frequency >= 1.
  static absl::StatusOr<ResidualClipper> Create(const Options& options);

  // Clips `residual` when `iteration` is a clipping step. Returns the clipped
  // mass, sum of |removed| in float64 (0 on other steps).
  double MaybeClip(int64_t iteration, float threshold,
                   absl::Span<float> residual) const;

  const Options& options() const { return options_; }

 private:
  explicit ResidualClipper(const Options& options) : options_(options) {}
  Options options_;
};

// One tensor's (or shard's) compression state on a worker: residual r (fp32),
// threshold algorithm, iteration. Each Step does
//   r += u (or r = u without a residual); encode r at t (or a fmt 2 bitmap at
//   t/3 on shake-up steps); clip; update t from the sparsity.
// Requires external synchronization.
class GradientCompressor {
 public:
  struct Options {
    // Every `shake_frequency` steps (iteration > 0 and iteration %
    // shake_frequency == 0) send a fmt 2 bitmap at t/3 instead (DL4J legacy
    // shake-up). Shake-up steps leave the threshold algorithm untouched.
    // Default 0: off.
    int64_t shake_frequency = 0;
    // Clip the residual after encoding. Default off (DL4J's
    // SharedTrainingMaster turns (5, 5) on).
    bool clip = false;
    ResidualClipper::Options clipper;
    // false: the "threshold without residual" experiment: each step encodes
    // only its own update (r = u) and drops what it did not send at the next
    // step. Default true.
    bool use_residual = true;
  };

  // `algorithm` must be non-null. InvalidArgument for a bad option, a null
  // algorithm or more than kCodecMaxElements elements.
  static absl::StatusOr<std::unique_ptr<GradientCompressor>> Create(
      size_t num_elements, std::unique_ptr<ThresholdAlgorithm> algorithm,
      const Options& options);

  // One step: appends this step's message (if any) to `*out`. If r + u would
  // hold a NaN or Inf, returns kind kNonFinite and changes no state (the
  // caller skips the step). InvalidArgument if update.size() !=
  // num_elements().
  absl::StatusOr<EncodeInfo> Step(absl::Span<const float> update,
                                  std::vector<int32_t>* out);

  size_t num_elements() const { return residual_.size(); }
  // The threshold the next step will use.
  float threshold() const;
  // The threshold the last step encoded with (t/3 on a shake-up step).
  float last_threshold() const { return last_threshold_; }
  // Sparsity of the last step as given to the threshold algorithm.
  double last_sparsity() const { return last_sparsity_; }
  // Clipped mass of the last step and of all steps.
  double last_clipped_mass() const { return last_clipped_mass_; }
  double total_clipped_mass() const { return total_clipped_mass_; }
  // Steps taken (non-finite ones excluded).
  int64_t iteration() const { return iteration_; }
  absl::Span<const float> residual() const { return residual_; }

 private:
  GradientCompressor(size_t n, std::unique_ptr<ThresholdAlgorithm> algorithm,
                     const Options& options, ResidualClipper clipper);

  const Options options_;
  const std::unique_ptr<ThresholdAlgorithm> algorithm_;
  const ResidualClipper clipper_;
  std::vector<float> residual_;
  int64_t iteration_ = 0;
  float last_threshold_ = 0.0f;
  double last_sparsity_ = 0.0;
  double last_clipped_mass_ = 0.0;
  double total_clipped_mass_ = 0.0;
};

}  // namespace shardps

#endif  // SHARDPS_COMPRESSION_THRESHOLD_CONTROL_H_
