#ifndef SHARDPS_TRAINER_CLIENT_SPARSE_EXPORT_H_
#define SHARDPS_TRAINER_CLIENT_SPARSE_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/ps_service.pb.h"
#include "trainer/client/job_client.h"

namespace shardps {

// `--save_dir` of a model with sparse tables (docs/saved_model.md): the
// chief reads every sparse table of `job` from the pservers
// (JobClient::ReadSparseTable, each at `min_version` or later) and writes
// each to `dir` as sparse-<table>.bin, the format `ps_checkpoint export`
// writes (values in float32), for ExportedSparseTable and
// python/shardps/exported_model.py. `dir` must exist.
absl::Status SaveSparseTables(JobClient* client, const JobSpec& job,
                              int64_t min_version, const std::string& dir);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CLIENT_SPARSE_EXPORT_H_
