#include "trainer/update_sharing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace shardps {

absl::StatusOr<std::unique_ptr<UpdateSharing>> UpdateSharing::Create(
    const std::vector<std::string>& names,
    std::vector<OptimizerConfig>* optimizers, const std::vector<size_t>& sizes,
    bool momentum_masking) {
  std::vector<OptimizerConfig> local;
  for (size_t t = 0; t < optimizers->size(); ++t) {
    const OptimizerConfig& oc = (*optimizers)[t];
    if ((oc.type() != OptimizerConfig::SGD &&
         oc.type() != OptimizerConfig::MOMENTUM) ||
        oc.schedule().type() != LrSchedule::CONSTANT ||
        !(oc.learning_rate() > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--compression=threshold shares updates computed on the trainer: "
          "table ",
          names[t],
          " needs an SGD or MOMENTUM optimizer with a constant, positive "
          "learning rate"));
    }
    local.push_back(oc);
  }
  for (OptimizerConfig& oc : *optimizers) {
    OptimizerConfig sgd;
    sgd.set_type(OptimizerConfig::SGD);
    sgd.set_learning_rate(1.0f);
    oc = sgd;
  }
  return std::unique_ptr<UpdateSharing>(
      new UpdateSharing(std::move(local), momentum_masking, sizes));
}

UpdateSharing::UpdateSharing(std::vector<OptimizerConfig> local,
                             bool momentum_masking,
                             const std::vector<size_t>& sizes)
    : local_(std::move(local)), momentum_masking_(momentum_masking) {
  for (size_t n : sizes) {
    velocity_.emplace_back(n, 0.0f);
    updates_.emplace_back(n, 0.0f);
    update_ptrs_.push_back(updates_.back().data());
  }
}

void UpdateSharing::ComputeUpdates(const std::vector<const float*>& grads) {
  for (size_t t = 0; t < updates_.size(); ++t) {
    const OptimizerConfig& oc = local_[t];
    const float lr = oc.learning_rate();
    const float mu =
        oc.type() == OptimizerConfig::MOMENTUM ? oc.momentum() : 0.0f;
    const float* g = grads[t];
    float* v = velocity_[t].data();
    float* u = updates_[t].data();
    for (size_t i = 0; i < updates_[t].size(); ++i) {
      v[i] = mu * v[i] + g[i];
      u[i] = lr * (oc.nesterov() ? g[i] + mu * v[i] : v[i]);
    }
  }
}

void UpdateSharing::MaskSent(const ThresholdPushEncoder& encoder) {
  if (!momentum_masking_) return;
  for (size_t t = 0; t < velocity_.size(); ++t) {
    const std::vector<uint8_t>& mask = encoder.sent_mask(t);
    float* v = velocity_[t].data();
    for (size_t i = 0; i < mask.size(); ++i) {
      if (mask[i]) v[i] = 0.0f;
    }
  }
}

void UpdateSharing::Reset() {
  for (auto& v : velocity_) std::fill(v.begin(), v.end(), 0.0f);
}

}  // namespace shardps
