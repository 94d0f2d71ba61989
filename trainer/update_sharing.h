#ifndef SHARDPS_TRAINER_UPDATE_SHARING_H_
#define SHARDPS_TRAINER_UPDATE_SHARING_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compression/threshold_push_encoder.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// Threshold compression shares updates, not gradients (as Deeplearning4j
// does; docs/compression.md): the trainer applies the learning rate and the
// momentum to its own gradient, the update is threshold-encoded on its own
// scale, and the pservers add the mean update (SGD with learning rate 1).
// Requires external synchronization.
class UpdateSharing {
 public:
  // INVALID_ARGUMENT, naming the table, unless every table's optimizer is
  // SGD or MOMENTUM with a constant, positive learning rate. Replaces each
  // of *optimizers with what the pservers then apply: SGD at rate 1.
  // sizes[t]: the values of table t.
  static absl::StatusOr<std::unique_ptr<UpdateSharing>> Create(
      const std::vector<std::string>& names,
      std::vector<OptimizerConfig>* optimizers,
      const std::vector<size_t>& sizes, bool momentum_masking);

  // From this step's gradients: v = mu * v + g, and the update to push
  // u = lr * v (Nesterov: lr * (g + mu * v)).
  void ComputeUpdates(const std::vector<const float*>& grads);
  // The update buffers to push, per table.
  const std::vector<const float*>& updates() const { return update_ptrs_; }
  // After a push: zeroes the velocity where a message sent the value (DGC's
  // momentum factor masking), when masking is on.
  void MaskSent(const ThresholdPushEncoder& encoder);
  // After a rollback: the velocity starts again from zero.
  void Reset();

 private:
  UpdateSharing(std::vector<OptimizerConfig> local, bool momentum_masking,
                const std::vector<size_t>& sizes);

  const std::vector<OptimizerConfig> local_;  // what the trainer applies
  const bool momentum_masking_;
  std::vector<std::vector<float>> velocity_, updates_;
  std::vector<const float*> update_ptrs_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_UPDATE_SHARING_H_
