#include "trainer/core/update_sharing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace shardps {

absl::StatusOr<std::unique_ptr<UpdateSharing>> UpdateSharing::Create(
    const std::vector<std::string>& names,
    std::vector<OptimizerConfig>* optimizers, const std::vector<size_t>& sizes,
    bool momentum_masking, int64_t global_batch_size) {
  std::vector<Table> tables;
  for (size_t t = 0; t < optimizers->size(); ++t) {
    const OptimizerConfig& oc = (*optimizers)[t];
    const std::string why = absl::StrCat(
        "--compression=threshold shares updates computed on the trainer: "
        "table ",
        names[t]);
    if (oc.type() == OptimizerConfig::FTRL) {
      return absl::InvalidArgumentError(absl::StrCat(
          why,
          " has FTRL, whose weights are not a sum of updates; use SGD, "
          "MOMENTUM, ADAGRAD or ADAM"));
    }
    auto opt = Optimizer::Create(oc, global_batch_size);
    if (!opt.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(why, ": ", opt.status().message()));
    }
    Table table;
    table.optimizer = *std::move(opt);
    table.slots.assign(
        table.optimizer->num_slots(),
        std::vector<float>(sizes[t], table.optimizer->initial_slot_value()));
    table.update.assign(sizes[t], 0.0f);
    for (auto& slot : table.slots) {
      table.slot_spans.push_back(absl::MakeSpan(slot));
    }
    tables.push_back(std::move(table));
  }
  for (OptimizerConfig& oc : *optimizers) {
    OptimizerConfig sgd;
    sgd.set_type(OptimizerConfig::SGD);
    sgd.set_learning_rate(1.0f);
    oc = sgd;
  }
  return std::unique_ptr<UpdateSharing>(
      new UpdateSharing(std::move(tables), momentum_masking));
}

double UpdateSharing::DefaultThreshold(const OptimizerConfig& optimizer) {
  return optimizer.type() == OptimizerConfig::MOMENTUM ? 3e-2 : 1e-2;
}

UpdateSharing::UpdateSharing(std::vector<Table> tables, bool momentum_masking)
    : tables_(std::move(tables)), momentum_masking_(momentum_masking) {
  for (Table& t : tables_) update_ptrs_.push_back(t.update.data());
}

void UpdateSharing::ComputeUpdates(int64_t step,
                                   const std::vector<const float*>& grads) {
  for (size_t t = 0; t < tables_.size(); ++t) {
    Table& table = tables_[t];
    const size_t n = table.update.size();
    // The optimizer moves weights that start at zero: minus the update.
    std::fill(table.update.begin(), table.update.end(), 0.0f);
    table.optimizer->Apply(step, updates_made_, 1.0f,
                           absl::MakeConstSpan(grads[t], n),
                           absl::MakeSpan(table.update), table.slot_spans);
    for (float& u : table.update) u = -u;
  }
  ++updates_made_;
}

void UpdateSharing::MaskSent(const ThresholdPushEncoder& encoder) {
  if (!momentum_masking_) return;
  for (size_t t = 0; t < tables_.size(); ++t) {
    // DGC's masking is for momentum, whose velocity adds up the gradients
    // already sent; Adam's first moment is a mean, and SGD and ADAGRAD have
    // no velocity.
    if (tables_[t].optimizer->config().type() != OptimizerConfig::MOMENTUM) {
      continue;
    }
    const std::vector<uint8_t>& mask = encoder.sent_mask(t);
    float* m = tables_[t].slots[0].data();
    for (size_t i = 0; i < mask.size(); ++i) {
      if (mask[i]) m[i] = 0.0f;
    }
  }
}

void UpdateSharing::Reset() {
  for (Table& t : tables_) {
    for (auto& s : t.slots) {
      std::fill(s.begin(), s.end(), t.optimizer->initial_slot_value());
    }
  }
  updates_made_ = 0;
}

}  // namespace shardps
