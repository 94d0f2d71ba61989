#include "trainer/model/saved_model.h"

namespace shardps {

std::vector<DenseTensorView> TensorViews(
    const std::vector<ParamTable>& tables) {
  std::vector<DenseTensorView> views;
  for (const ParamTable& t : tables) {
    views.push_back(DenseTensorView{t.name, t.shape, t.value});
  }
  return views;
}

std::vector<DenseTensorSlot> TensorSlots(std::vector<ParamTable>* tables) {
  std::vector<DenseTensorSlot> slots;
  for (ParamTable& t : *tables) {
    slots.push_back(DenseTensorSlot{t.name, t.shape, absl::MakeSpan(t.value)});
  }
  return slots;
}

absl::Status SaveModel(const std::string& dir, const ModelConfig& config,
                       const std::vector<ParamTable>& tables) {
  return SaveModel(dir, config, TensorViews(tables));
}

absl::Status LoadModelParams(const std::string& dir,
                             std::vector<ParamTable>* tables) {
  return LoadModelParams(dir, TensorSlots(tables));
}

}  // namespace shardps
