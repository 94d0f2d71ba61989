#ifndef SHARDPS_TRAINER_MODEL_SAVED_MODEL_H_
#define SHARDPS_TRAINER_MODEL_SAVED_MODEL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/model_config.pb.h"
#include "trainer/model/layers.h"

namespace shardps {

// A trained model on disk, as docs/saved_model.md describes: in directory
// `dir`, `model.pbtxt` (the config, protobuf text) and `params.bin` (every
// table's name, shape and float32 values, with a CRC32 of the whole file).
// Each file is written to a temporary name, synced and renamed, so a crash
// never leaves a half-written model under the final names.

absl::Status SaveModel(const std::string& dir, const ModelConfig& config,
                       const std::vector<ParamTable>& tables);

// Loads params.bin from `dir` into `tables` (copying into the existing value
// buffers, so pointers to them stay valid), whose names and shapes must
// match the file's (FAILED_PRECONDITION naming the table otherwise).
// DATA_LOSS for a truncated or corrupted file.
absl::Status LoadModelParams(const std::string& dir,
                             std::vector<ParamTable>* tables);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_MODEL_SAVED_MODEL_H_
