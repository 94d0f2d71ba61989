#ifndef SHARDPS_TRAINER_MODEL_SAVED_MODEL_H_
#define SHARDPS_TRAINER_MODEL_SAVED_MODEL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/model_export/saved_model.h"
#include "proto/model_config.pb.h"
#include "trainer/model/layers.h"

namespace shardps {

// A model's tables as the saved model's (common/model_export/
// saved_model.h): what is written, and where a load writes.
std::vector<DenseTensorView> TensorViews(const std::vector<ParamTable>& tables);
std::vector<DenseTensorSlot> TensorSlots(std::vector<ParamTable>* tables);

// SaveModel and LoadModelParams of a model's tables (the load copies into
// the existing value buffers, so pointers to them stay valid).
absl::Status SaveModel(const std::string& dir, const ModelConfig& config,
                       const std::vector<ParamTable>& tables);
absl::Status LoadModelParams(const std::string& dir,
                             std::vector<ParamTable>* tables);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_MODEL_SAVED_MODEL_H_
