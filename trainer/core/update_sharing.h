#ifndef SHARDPS_TRAINER_CORE_UPDATE_SHARING_H_
#define SHARDPS_TRAINER_CORE_UPDATE_SHARING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compression/threshold_push_encoder.h"
#include "optimizer/optimizer.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// Threshold compression shares updates, not gradients (as Deeplearning4j
// does; docs/compression.md): the trainer applies each table's optimizer
// (SGD, MOMENTUM, ADAGRAD or ADAM, with its learning-rate schedule; the
// pservers' own Optimizer code) to its own gradient, the update is
// threshold-encoded on its own scale, and the pservers add the mean update
// (SGD with learning rate 1). Requires external synchronization.
class UpdateSharing {
 public:
  // INVALID_ARGUMENT, naming the table, for FTRL (its weight is a closed
  // form of its state, not a sum of updates) or a config the optimizer
  // refuses. Replaces each of *optimizers with what the pservers then
  // apply: SGD at rate 1. sizes[t]: the values of table t;
  // global_batch_size: for the linear scaling rule of a schedule.
  static absl::StatusOr<std::unique_ptr<UpdateSharing>> Create(
      const std::vector<std::string>& names,
      std::vector<OptimizerConfig>* optimizers,
      const std::vector<size_t>& sizes, bool momentum_masking,
      int64_t global_batch_size);

  // The threshold on a table's updates when --updates_threshold is not
  // given (docs/tuning.md, "Compression defaults"): 3e-2 for MOMENTUM,
  // whose updates are lr * velocity, up to lr / (1 - momentum) times a
  // gradient; 1e-2 for the others (Adam's updates are at most about its
  // learning rate). Chosen by sweeps on the MLP (momentum) and the CNN
  // (Adam), checked on seeds they were not chosen on.
  static double DefaultThreshold(const OptimizerConfig& optimizer);

  // From this step's gradients, the update to push per table: what the
  // table's optimizer would subtract from the weights at `step` (momentum:
  // u = lr * v with v = mu * v + g; Adam: lr_t * m / (sqrt(v) + eps)).
  void ComputeUpdates(int64_t step, const std::vector<const float*>& grads);
  // The update buffers to push, per table.
  const std::vector<const float*>& updates() const { return update_ptrs_; }
  // After a push: zeroes a MOMENTUM table's velocity where a message sent
  // the value (DGC's momentum factor masking), when masking is on.
  void MaskSent(const ThresholdPushEncoder& encoder);
  // After a rollback: the optimizers' state starts again.
  void Reset();

 private:
  struct Table {
    std::unique_ptr<Optimizer> optimizer;
    std::vector<std::vector<float>> slots;
    std::vector<absl::Span<float>> slot_spans;  // over `slots`, made once
    std::vector<float> update;
  };
  UpdateSharing(std::vector<Table> tables, bool momentum_masking);

  std::vector<Table> tables_;
  const bool momentum_masking_;
  int64_t updates_made_ = 0;  // Adam's bias correction counts these
  std::vector<const float*> update_ptrs_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CORE_UPDATE_SHARING_H_
