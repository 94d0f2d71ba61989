#include "optimizer/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "kernels/finite.h"
#include "kernels/optimizer_cpu.h"

namespace shardps {
namespace {

bool IsFinite(float x) { return std::isfinite(x); }

// Checks the momentum of MOMENTUM and LARS: in [0, 1).
absl::Status CheckMomentum(const OptimizerConfig& config) {
  if (!(config.momentum() >= 0 && config.momentum() < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("momentum must be in [0, 1), got ", config.momentum()));
  }
  return absl::OkStatus();
}

// Fills in Adagrad's defaults (epsilon 1e-10, initial accumulator 0.1) and
// checks its initial accumulator.
absl::Status SetUpAdagrad(OptimizerConfig* config) {
  if (config->epsilon() == 0) config->set_epsilon(1e-10f);
  if (config->initial_accumulator() == 0) {
    config->set_initial_accumulator(0.1f);
  }
  // An infinite one would start every block's state non-finite.
  if (!(config->initial_accumulator() >= 0) ||
      !(config->initial_accumulator() <= kMaxInitialAccumulator)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initial_accumulator must be in [0, ", kMaxInitialAccumulator,
        "], got ", config->initial_accumulator()));
  }
  return absl::OkStatus();
}

// Fills in Adam's defaults (betas 0.9 and 0.999, epsilon 1e-8) and checks
// its betas.
absl::Status SetUpAdam(OptimizerConfig* config) {
  if (config->beta1() == 0) config->set_beta1(0.9f);
  if (config->beta2() == 0) config->set_beta2(0.999f);
  if (config->epsilon() == 0) config->set_epsilon(1e-8f);
  if (!(config->beta1() > 0 && config->beta1() < 1) ||
      !(config->beta2() > 0 && config->beta2() < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Adam betas must be in (0, 1), got ", config->beta1(),
                     " and ", config->beta2()));
  }
  return absl::OkStatus();
}

// Fills in FTRL's default beta (1) and checks l1, l2 and beta.
absl::Status SetUpFtrl(OptimizerConfig* config) {
  if (config->beta() == 0) config->set_beta(1.0f);
  if (!(config->l1() >= 0) || !(config->l2() >= 0) || !(config->beta() > 0) ||
      !IsFinite(config->l1()) || !IsFinite(config->l2()) ||
      !IsFinite(config->beta())) {
    return absl::InvalidArgumentError(
        absl::StrCat("FTRL needs l1 >= 0, l2 >= 0 and beta > 0, got ",
                     config->l1(), ", ", config->l2(), ", ", config->beta()));
  }
  return absl::OkStatus();
}

// Fills in LARS's default trust coefficient (1e-3) and checks its
// momentum, trust coefficient and weight decay; LARS has no Nesterov.
absl::Status SetUpLars(OptimizerConfig* config) {
  if (config->trust_coefficient() == 0) config->set_trust_coefficient(1e-3f);
  if (absl::Status s = CheckMomentum(*config); !s.ok()) return s;
  if (!(config->trust_coefficient() > 0) || !(config->weight_decay() >= 0) ||
      !IsFinite(config->trust_coefficient()) ||
      !IsFinite(config->weight_decay())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LARS needs trust_coefficient > 0 and weight_decay >= 0, got ",
        config->trust_coefficient(), " and ", config->weight_decay()));
  }
  if (config->nesterov()) {
    return absl::InvalidArgumentError("LARS has no Nesterov momentum");
  }
  return absl::OkStatus();
}

// Fills in the defaults of the hyperparameters of the config's optimizer
// type and checks them; INVALID_ARGUMENT for an unknown type.
absl::Status SetUpTypeConfig(OptimizerConfig* config) {
  switch (config->type()) {
    case OptimizerConfig::SGD:
      return absl::OkStatus();
    case OptimizerConfig::MOMENTUM:
      return CheckMomentum(*config);
    case OptimizerConfig::ADAGRAD:
    case OptimizerConfig::ROWWISE_ADAGRAD:
      return SetUpAdagrad(config);
    case OptimizerConfig::ADAM:
    case OptimizerConfig::ROWWISE_ADAM:
      return SetUpAdam(config);
    case OptimizerConfig::FTRL:
      return SetUpFtrl(config);
    case OptimizerConfig::LARS:
      return SetUpLars(config);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown optimizer type ", config->type()));
  }
}

// Row-wise Adagrad (FBGEMM's rowwise_adagrad): one accumulator for the
// row, acc += mean(g^2); p -= lr * g / (sqrt(acc) + eps).
void ApplyRowwiseAdagrad(float lr, float eps, float grad_scale,
                         absl::Span<const float> grad, absl::Span<float> value,
                         float& acc) {
  double sum = 0;
  for (float g : grad) sum += double{g * grad_scale} * (g * grad_scale);
  acc += static_cast<float>(sum / static_cast<double>(value.size()));
  const float step = lr / (std::sqrt(acc) + eps);
  for (size_t i = 0; i < value.size(); ++i) {
    value[i] -= step * (grad[i] * grad_scale);
  }
}

// Adam with m per value and v per row (FBGEMM's partial row-wise Adam):
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) mean(g^2);
// p -= lr_t * m / (sqrt(v) + eps), lr_t bias-corrected as Adam's.
void ApplyRowwiseAdam(float lr_t, float beta1, float beta2, float eps,
                      float grad_scale, absl::Span<const float> grad,
                      absl::Span<float> value, absl::Span<float> m, float& v) {
  double sum = 0;
  for (float g : grad) sum += double{g * grad_scale} * (g * grad_scale);
  v = beta2 * v + (1.0f - beta2) * static_cast<float>(
                                       sum / static_cast<double>(grad.size()));
  const float denom = std::sqrt(v) + eps;
  for (size_t i = 0; i < value.size(); ++i) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * (grad[i] * grad_scale);
    value[i] -= lr_t * m[i] / denom;
  }
}

}  // namespace

absl::StatusOr<LearningRateSchedule> LearningRateSchedule::Create(
    const OptimizerConfig& config, int64_t global_batch_size) {
  LearningRateSchedule s;
  const LrSchedule& c = config.schedule();
  s.type_ = c.type();
  s.base_lr_ = config.learning_rate();
  switch (c.type()) {
    case LrSchedule::CONSTANT:
      break;
    case LrSchedule::STEP:
      if (c.step_size() <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schedule STEP needs step_size > 0, got ", c.step_size()));
      }
      if (!(c.gamma() > 0 && c.gamma() <= 1)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schedule STEP needs gamma in (0, 1], got ", c.gamma()));
      }
      s.step_size_ = c.step_size();
      s.gamma_ = c.gamma();
      break;
    case LrSchedule::WARMUP: {
      if (c.warmup_steps() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schedule WARMUP needs warmup_steps >= 0, got ", c.warmup_steps()));
      }
      if (c.reference_batch_size() < 0) {
        return absl::InvalidArgumentError(
            "schedule WARMUP needs reference_batch_size >= 0");
      }
      double scale = 1.0;
      if (c.reference_batch_size() > 0) {
        if (global_batch_size <= 0) {
          return absl::InvalidArgumentError(
              "the linear scaling rule needs the job's global batch size");
        }
        scale = static_cast<double>(global_batch_size) /
                static_cast<double>(c.reference_batch_size());
      }
      s.warmup_steps_ = c.warmup_steps();
      s.target_lr_ = static_cast<float>(s.base_lr_ * scale);
      s.start_lr_ = c.warmup_start_lr() > 0 ? c.warmup_start_lr() : s.base_lr_;
      if (!(s.target_lr_ <= kMaxLearningRate) ||
          !(s.start_lr_ <= kMaxLearningRate)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the warm-up learning rates (", s.start_lr_, " to ", s.target_lr_,
            " after the linear scaling rule) must be at most ",
            kMaxLearningRate));
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown learning-rate schedule ", c.type()));
  }
  return s;
}

float LearningRateSchedule::At(int64_t step) const {
  switch (type_) {
    case LrSchedule::STEP:
      return base_lr_ * std::pow(gamma_, static_cast<float>(step / step_size_));
    case LrSchedule::WARMUP:
      if (step >= warmup_steps_) return target_lr_;
      return start_lr_ + (target_lr_ - start_lr_) *
                             (static_cast<float>(step) / warmup_steps_);
    default:
      return base_lr_;
  }
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const OptimizerConfig& config_in, int64_t global_batch_size) {
  OptimizerConfig config = config_in;
  const float lr = config.learning_rate();
  if (!(lr > 0) || !(lr <= kMaxLearningRate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "learning_rate must be in (0, ", kMaxLearningRate, "], got ", lr));
  }
  if (absl::Status s = SetUpTypeConfig(&config); !s.ok()) return s;
  if (!(config.epsilon() >= 0) || !IsFinite(config.epsilon())) {
    return absl::InvalidArgumentError("epsilon must be non-negative");
  }
  auto schedule = LearningRateSchedule::Create(config, global_batch_size);
  if (!schedule.ok()) return schedule.status();
  return std::unique_ptr<Optimizer>(new Optimizer(config, *schedule));
}

Optimizer::Optimizer(const OptimizerConfig& config,
                     LearningRateSchedule schedule)
    : config_(config), schedule_(schedule) {
  switch (config_.type()) {
    case OptimizerConfig::MOMENTUM:
    case OptimizerConfig::LARS:
      num_slots_ = 1;
      break;
    case OptimizerConfig::ROWWISE_ADAGRAD:
      rowwise_ = true;
      [[fallthrough]];
    case OptimizerConfig::ADAGRAD:
      num_slots_ = 1;
      initial_slot_value_ = config_.initial_accumulator();
      break;
    case OptimizerConfig::ROWWISE_ADAM:
      rowwise_ = true;
      [[fallthrough]];
    case OptimizerConfig::ADAM:
    case OptimizerConfig::FTRL:  // z and n
      num_slots_ = 2;
      break;
    default:
      num_slots_ = 0;
  }
  // Where a gradient within kFastGradient and a learning rate within
  // kMaxLearningRate bound the step whatever the state (no 0/0, no
  // ratio that grows from step to step), ApplyIfFinite applies without
  // saving anything (docs/design_choices.md).
  const float b1 = config_.beta1(), b2 = config_.beta2();
  switch (config_.type()) {
    case OptimizerConfig::SGD:
    case OptimizerConfig::MOMENTUM:
    case OptimizerConfig::LARS:
      bounded_step_ = true;
      break;
    case OptimizerConfig::ADAGRAD:
    case OptimizerConfig::ROWWISE_ADAGRAD:
      bounded_step_ =
          config_.epsilon() > 0 || config_.initial_accumulator() > 0;
      break;
    case OptimizerConfig::ADAM:
      bounded_step_ = config_.epsilon() > 0 && b1 * b1 < b2;
      break;
    case OptimizerConfig::ROWWISE_ADAM:
      // m_i^2 may pass the row's mean of g^2 that v follows: not bounded.
      bounded_step_ = false;
      break;
    case OptimizerConfig::FTRL:
      // z grows by at most a factor (beta + sqrt(n)) / beta over a job.
      bounded_step_ = config_.beta() >= 0.01f;
      break;
    default:
      bounded_step_ = false;
  }
}

void Optimizer::Apply(int64_t step, int64_t update_count, float grad_scale,
                      absl::Span<const float> grad, absl::Span<float> value,
                      absl::Span<const absl::Span<float>> slots,
                      float trust_ratio) const {
  const float lr = schedule_.At(step);
  switch (config_.type()) {
    case OptimizerConfig::SGD:
      ApplySgd<CpuDevice>()(lr, grad_scale, grad, value);
      break;
    case OptimizerConfig::MOMENTUM:
      ApplyMomentum<CpuDevice>()(lr, config_.momentum(), config_.nesterov(),
                                 grad_scale, grad, value, slots[0]);
      break;
    case OptimizerConfig::ADAGRAD:
      ApplyAdagrad<CpuDevice>()(lr, config_.epsilon(), grad_scale, grad, value,
                                slots[0]);
      break;
    case OptimizerConfig::ADAM: {
      ApplyAdam<CpuDevice>()(AdamRate(lr, update_count), config_.beta1(),
                             config_.beta2(), config_.epsilon(), grad_scale,
                             grad, value, slots[0], slots[1]);
      break;
    }
    case OptimizerConfig::ROWWISE_ADAGRAD:
      ApplyRowwiseAdagrad(lr, config_.epsilon(), grad_scale, grad, value,
                          slots[0][0]);
      break;
    case OptimizerConfig::ROWWISE_ADAM:
      ApplyRowwiseAdam(AdamRate(lr, update_count), config_.beta1(),
                       config_.beta2(), config_.epsilon(), grad_scale, grad,
                       value, slots[0], slots[1][0]);
      break;
    case OptimizerConfig::FTRL:
      ApplyFtrl<CpuDevice>()(lr, config_.beta(), config_.l1(), config_.l2(),
                             grad_scale, grad, value, slots[0], slots[1]);
      break;
    case OptimizerConfig::LARS:
      ApplyLars<CpuDevice>()(lr * trust_ratio, config_.momentum(),
                             config_.weight_decay(), grad_scale, grad, value,
                             slots[0]);
      break;
    default:
      break;
  }
}

float Optimizer::AdamRate(float lr, int64_t update_count) const {
  const double t = static_cast<double>(update_count + 1);
  const double b1 = config_.beta1(), b2 = config_.beta2();
  return static_cast<float>(lr * std::sqrt(1 - std::pow(b2, t)) /
                            (1 - std::pow(b1, t)));
}

bool Optimizer::ApplyRowIfFinite(
    int64_t step, int64_t update_count, float grad_scale,
    absl::Span<const float> grad, absl::Span<float> value,
    absl::Span<const absl::Span<float>> slots) const {
  // A row-wise update reads the whole row: saved whole, restored whole.
  thread_local std::vector<float> saved;
  size_t total = value.size();
  for (const auto& s : slots) total += s.size();
  saved.resize(total);
  auto save = [&](bool back) {
    size_t at = 0;
    auto one = [&](absl::Span<float> s) {
      if (back) {
        std::memcpy(s.data(), &saved[at], s.size() * sizeof(float));
      } else {
        std::memcpy(&saved[at], s.data(), s.size() * sizeof(float));
      }
      at += s.size();
    };
    one(value);
    for (const auto& s : slots) one(s);
  };
  save(false);
  Apply(step, update_count, grad_scale, grad, value, slots);
  bool finite = AllFinite(value.data(), value.size());
  for (const auto& s : slots) finite = finite && AllFinite(s.data(), s.size());
  if (!finite) save(true);
  return finite;
}

bool Optimizer::ApplyIfFinite(int64_t step, int64_t update_count,
                              float grad_scale, absl::Span<const float> grad,
                              absl::Span<float> value,
                              absl::Span<const absl::Span<float>> slots,
                              float trust_ratio) const {
  // Every optimizer's update is elementwise (LARS's table-wide ratio comes
  // in as trust_ratio), so a chunk updates as it would within the whole.
  const size_t n = value.size();
  const float lr = schedule_.At(step) *
                   (config_.type() == OptimizerConfig::LARS ? trust_ratio : 1);
  // |grad_scale * g| <= kFastGradient for every g within `bound`.
  constexpr float kMax = std::numeric_limits<float>::max();
  const float scale = std::abs(grad_scale);
  const float bound = scale > 0 ? std::min(kFastGradient / scale, kMax) : kMax;
  // LARS's weight decay shrinks a value by lr * weight_decay of itself each
  // step: past 1, the value can swing ever wider.
  const bool decay_bounded = config_.type() != OptimizerConfig::LARS ||
                             lr * config_.weight_decay() <= 1;
  if (bounded_step_ && lr <= kMaxLearningRate && decay_bounded &&
      std::isfinite(scale) && AllWithin(grad.data(), n, bound)) {
    Apply(step, update_count, grad_scale, grad, value, slots, trust_ratio);
    return true;
  }
  if (rowwise_) {
    return ApplyRowIfFinite(step, update_count, grad_scale, grad, value, slots);
  }
  constexpr size_t kChunk = 2048;  // the chunk's streams stay in L1
  const size_t streams = 1 + slots.size();
  thread_local std::vector<float> saved;
  if (saved.size() < n * streams) saved.resize(n * streams);
  auto stream = [&](size_t k) { return k == 0 ? value : slots[k - 1]; };
  absl::InlinedVector<absl::Span<float>, 2> chunk_slots(slots.size());
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const size_t len = std::min(kChunk, n - begin);
    for (size_t k = 0; k < streams; ++k) {
      std::memcpy(&saved[k * n + begin], stream(k).data() + begin,
                  len * sizeof(float));
    }
    for (size_t k = 0; k < slots.size(); ++k) {
      chunk_slots[k] = slots[k].subspan(begin, len);
    }
    Apply(step, update_count, grad_scale, grad.subspan(begin, len),
          value.subspan(begin, len), chunk_slots, trust_ratio);
    bool finite = true;
    for (size_t k = 0; k < streams && finite; ++k) {
      finite = AllFinite(stream(k).data() + begin, len);
    }
    if (finite) continue;
    const size_t written = begin + len;
    for (size_t k = 0; k < streams; ++k) {
      std::memcpy(stream(k).data(), &saved[k * n], written * sizeof(float));
    }
    return false;
  }
  return true;
}

Optimizer::SquaredNorms Optimizer::Partials(float grad_scale,
                                            absl::Span<const float> grad,
                                            absl::Span<const float> value) {
  SquaredNorms n;
  for (size_t i = 0; i < value.size(); ++i) {
    const double w = value[i];
    const double g = static_cast<double>(grad[i] * grad_scale);
    n.weights += w * w;
    n.gradient += g * g;
  }
  return n;
}

float Optimizer::TrustRatio(double weights_norm, double gradient_norm) const {
  if (!(weights_norm > 0) || !(gradient_norm > 0)) return 1.0f;
  const double ratio = config_.trust_coefficient() * weights_norm /
                       (gradient_norm + config_.weight_decay() * weights_norm +
                        config_.epsilon());
  // A gradient norm near the smallest doubles (or norms a client made up)
  // gives a ratio past float's range; the step, ratio * g, stays bounded by
  // trust_coefficient * |w| elementwise, so the ratio is capped, not
  // overflowed.
  constexpr double kMax = std::numeric_limits<float>::max();
  return static_cast<float>(std::isfinite(ratio) ? std::min(ratio, kMax)
                                                 : kMax);
}

}  // namespace shardps
