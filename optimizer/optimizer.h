#ifndef SHARDPS_OPTIMIZER_OPTIMIZER_H_
#define SHARDPS_OPTIMIZER_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// The largest learning rate an optimizer takes, before and after a
// schedule's scaling. Large-batch LARS runs use tens; anything near this
// is a typo or an attack, and drives parameters to infinity in a few steps.
inline constexpr float kMaxLearningRate = 1e4f;
// The largest initial Adagrad accumulator (the default is 0.1).
inline constexpr float kMaxInitialAccumulator = 1e6f;
// Gradients within this bound (2^20) cannot make a step non-finite in any
// number of steps a job can run, for optimizers that bound their step
// (Optimizer::ApplyIfFinite): state grows by at most
// kMaxLearningRate * kFastGradient / (1 - momentum), or kFastGradient^2,
// per step.
inline constexpr float kFastGradient = 1048576.0f;

// The learning rate at a step, from an OptimizerConfig's schedule.
// Thread-safe (immutable after Create).
class LearningRateSchedule {
 public:
  // `global_batch_size` is N*b, used by the linear scaling rule.
  static absl::StatusOr<LearningRateSchedule> Create(
      const OptimizerConfig& config, int64_t global_batch_size);
  float At(int64_t step) const;

 private:
  LearningRateSchedule() = default;
  LrSchedule::Type type_ = LrSchedule::CONSTANT;
  float base_lr_ = 0;
  float target_lr_ = 0;  // WARMUP: after the ramp
  float start_lr_ = 0;   // WARMUP: at step 0
  int64_t step_size_ = 0;
  float gamma_ = 1;
  int64_t warmup_steps_ = 0;
};

// A table's optimizer: turns a gradient into an update of values and state.
// Thread-safe (immutable after Create); the caller synchronises the spans.
class Optimizer {
 public:
  // Validates the config (learning rate positive and finite, momentum and
  // betas in [0, 1), epsilon non-negative) and fills in defaults.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const OptimizerConfig& config, int64_t global_batch_size);

  // Number of state vectors per value: 0 (SGD), 1 (momentum, Adagrad) or
  // 2 (Adam: m and v; FTRL: z and n, with the value the closed-form weight);
  // LARS 1 (the velocity); ROWWISE_ADAGRAD 1 and ROWWISE_ADAM 2, of which
  // the last holds one float for the whole row.
  int num_slots() const { return num_slots_; }
  // Whether the last slot is one float per row (row-wise optimizers: sparse
  // tables only), and the floats of state a row of `dim` values holds.
  bool rowwise() const { return rowwise_; }
  int SlotWidth(int slot, int dim) const {
    return rowwise_ && slot == num_slots_ - 1 ? 1 : dim;
  }
  int StateFloats(int dim) const {
    return rowwise_ ? (num_slots_ - 1) * dim + 1 : num_slots_ * dim;
  }
  // Initial value of every state element (Adagrad's accumulator, else 0).
  float initial_slot_value() const { return initial_slot_value_; }

  // Applies one update. `step` selects the learning rate; `update_count` is
  // the number of updates this block has seen before (Adam's t - 1).
  // `trust_ratio` multiplies LARS's learning rate (TrustRatio of the whole
  // table); other types ignore it.
  // REQUIRES: grad, value and every slot have the same length (a
  //           row-wise last slot: 1); slots.size() == num_slots().
  void Apply(int64_t step, int64_t update_count, float grad_scale,
             absl::Span<const float> grad, absl::Span<float> value,
             absl::Span<const absl::Span<float>> slots,
             float trust_ratio = 1.0f) const;

  // Apply, unless the update would leave any value or state element
  // infinite or NaN (a huge gradient or learning rate, each in bounds):
  // then nothing changes and it returns false. When every |grad_scale *
  // grad| is within kFastGradient and the configuration bounds a step (see
  // the constructor), the result is finite and Apply runs as it is;
  // otherwise the update runs a chunk at a time, each chunk saved first to
  // a per-thread buffer that restores what was written when a chunk comes
  // out non-finite (docs/design_choices.md, "A step that would make a
  // parameter non-finite"). REQUIRES: value and state finite (the store
  // holds no others: initial values and restored state are checked, and
  // every update goes through here).
  bool ApplyIfFinite(int64_t step, int64_t update_count, float grad_scale,
                     absl::Span<const float> grad, absl::Span<float> value,
                     absl::Span<const absl::Span<float>> slots,
                     float trust_ratio = 1.0f) const;

  // LARS: its update needs the norms of the whole table, whose blocks live
  // on several pservers (docs/tuning.md, "LARS"): each block adds its
  // squared sums (Partials), the sums meet, and TrustRatio turns their
  // square roots into the ratio every block applies.
  bool needs_table_norms() const {
    return config_.type() == OptimizerConfig::LARS;
  }
  struct SquaredNorms {
    double weights = 0;   // sum of value^2
    double gradient = 0;  // sum of (grad_scale * grad)^2
  };
  static SquaredNorms Partials(float grad_scale, absl::Span<const float> grad,
                               absl::Span<const float> value);
  // trust_coefficient * |w| / (|g| + weight_decay * |w| + epsilon), or 1
  // when either norm is 0 (You et al. 2017; as TensorFlow's LARSOptimizer).
  float TrustRatio(double weights_norm, double gradient_norm) const;

  float LearningRate(int64_t step) const { return schedule_.At(step); }
  const OptimizerConfig& config() const { return config_; }

 private:
  Optimizer(const OptimizerConfig& config, LearningRateSchedule schedule);
  // Adam's step size at update t = update_count + 1, bias-corrected.
  float AdamRate(float lr, int64_t update_count) const;
  // ApplyIfFinite's slow path for row-wise optimizers: the row whole.
  bool ApplyRowIfFinite(int64_t step, int64_t update_count, float grad_scale,
                        absl::Span<const float> grad, absl::Span<float> value,
                        absl::Span<const absl::Span<float>> slots) const;

  const OptimizerConfig config_;
  const LearningRateSchedule schedule_;
  int num_slots_ = 0;
  bool rowwise_ = false;
  float initial_slot_value_ = 0;
  // ApplyIfFinite may skip its copy when the gradient is within bounds.
  bool bounded_step_ = false;
};

}  // namespace shardps

#endif  // SHARDPS_OPTIMIZER_OPTIMIZER_H_
