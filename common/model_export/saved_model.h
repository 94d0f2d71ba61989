#ifndef SHARDPS_COMMON_MODEL_EXPORT_SAVED_MODEL_H_
#define SHARDPS_COMMON_MODEL_EXPORT_SAVED_MODEL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/model_export/exported_model.h"
#include "proto/model_config.pb.h"

namespace shardps {

// A trained model on disk, as docs/saved_model.md describes: in directory
// `dir`, `model.pbtxt` (the config, protobuf text) and `params.bin` (every
// table's name, shape and float32 values, with a CRC32 of the whole file).
// Each file is written to a temporary name, synced and renamed, so a crash
// never leaves a half-written model under the final names.

absl::Status SaveModel(const std::string& dir, const ModelConfig& config,
                       const std::vector<DenseTensorView>& tables);

// A dense table to load into: its name and shape, which the file's must
// match, and where its values go (the product of shape floats).
struct DenseTensorSlot {
  std::string name;
  std::vector<int64_t> shape;
  absl::Span<float> values;
};

// Loads params.bin from `dir` into `tables`' buffers, whose names and shapes
// must match the file's (FAILED_PRECONDITION naming the table otherwise;
// nothing is written then). DATA_LOSS for a truncated or corrupted file.
absl::Status LoadModelParams(const std::string& dir,
                             const std::vector<DenseTensorSlot>& tables);

}  // namespace shardps

#endif  // SHARDPS_COMMON_MODEL_EXPORT_SAVED_MODEL_H_
