#ifndef SHARDPS_PSERVER_CHECKPOINT_MODEL_EXPORT_H_
#define SHARDPS_PSERVER_CHECKPOINT_MODEL_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/storage/env.h"
#include "pserver/checkpoint/job_checkpoint.h"
#include "pserver/checkpoint/reshard.h"

namespace shardps {

struct ExportOptions {
  bool fp16 = false;  // sparse rows' values as IEEE half
  // The model's config (protobuf text), written as model.pbtxt; empty:
  // none.
  std::string config_text;
};

struct ExportSummary {
  int dense_tables = 0;
  int64_t dense_values = 0;
  int sparse_tables = 0;
  int64_t sparse_rows = 0;
};

// Writes the job checkpoint `from` as an exported model in `out`
// (docs/saved_model.md): every dense table whole in params.bin (in the
// job's table order), and each sparse table's rows, values only, by
// ascending key, in sparse-<table>.bin, with its initializer. Reads the
// shards one at a time, each verified; holds the dense tables and the
// sparse values in memory. Written under `out`.tmp and renamed, so a run
// that dies leaves no `out`. FAILED_PRECONDITION when `out` exists;
// DATA_LOSS naming the file for a blob that does not parse or a block no
// shard holds.
absl::StatusOr<ExportSummary> ExportModel(Env* env, const JobCheckpoint& from,
                                          const std::string& out,
                                          const ExportOptions& options,
                                          const ReshardProgress& progress);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_CHECKPOINT_MODEL_EXPORT_H_
