#ifndef SHARDPS_PSERVER_CHECKPOINT_JOB_CHECKPOINT_H_
#define SHARDPS_PSERVER_CHECKPOINT_JOB_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/storage/env.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// A job-wide checkpoint: the checkpoints of one step that every pserver of
// the job wrote, each naming its place in the job (CheckpointInfo.
// placement), found wherever their folders lie (docs/checkpoint_format.md,
// "Job checkpoints").

// One pserver's checkpoint of the step.
struct ShardCheckpoint {
  std::string folder;  // the Checkpointer's folder: <checkpoint_dir>/<job>
  CheckpointInfo info;
  uint32_t manifest_crc = 0;  // of its MANIFEST
  int64_t bytes = 0;          // its blobs
};

struct JobCheckpoint {
  std::string job_id;
  int64_t step = 0;
  int num_servers = 0;
  uint64_t generation = 0;              // the newest of its shards'
  std::vector<ShardCheckpoint> shards;  // by server_index
  // The job manifest that vouches for it; empty when it was put together
  // from the shards alone.
  std::string manifest_path;
};

// What a folder holds of a job.
struct JobCheckpointSurvey {
  std::vector<JobCheckpoint> complete;  // oldest first
  // The steps with some shards but not a whole job, and why: "step 300:
  // no shard 1 of 2".
  std::vector<std::string> incomplete;
  // Shard folders that could not be read, and why.
  std::vector<std::string> unreadable;
  // Job manifests that do not match the shards of their step.
  std::vector<std::string> damaged_manifests;
};

// Looks for the checkpoints of job `job_id` under `root`, which may be
// one pserver's --checkpoint_dir (root/<job>/ckpt-*), a folder holding
// several pservers' --checkpoint_dirs at any names (root/*/<job>/ckpt-*: a
// shared mount, or copies gathered in one place), what `ps_checkpoint
// reshard` wrote, or a job folder itself (root/ckpt-*). A step is complete
// when every shard 0..P-1 of one P is there once, with the same job and
// placement scheme. A job manifest (WriteJobManifest) for a step is
// checked against the shards it names: a manifest that does not verify, or
// names a shard that is missing or not the one it recorded, leaves the step
// incomplete, naming the file (with `trust_shards`, for the pserver that
// just wrote its own shard, the step stays complete, without a manifest).
// Shards of one index in two folders, of other job specs, or of a spec no
// chief could send leave the step incomplete, saying which.
absl::StatusOr<JobCheckpointSurvey> SurveyJobCheckpoints(
    Env* env, const std::string& root, absl::string_view job_id,
    bool trust_shards = false);

// The newest complete checkpoint, or the one of `step` (>= 0); the steps
// passed over as incomplete are logged. NOT_FOUND naming `root` and what is
// there when there is none.
absl::StatusOr<JobCheckpoint> FindJobCheckpoint(Env* env,
                                                const std::string& root,
                                                absl::string_view job_id,
                                                int64_t step = -1);

// The job manifest's path for `step` under `root`:
// root/<job>/JOB-<12-digit step>.
std::string JobManifestPath(const std::string& root, absl::string_view job_id,
                            int64_t step);

// Writes the job manifest of `job` under `root` durably (temporary file,
// fsync, rename, fsync of the folder). Its shards' folders must lie under
// `root`; the manifest names them relative to it.
absl::Status WriteJobManifest(Env* env, const std::string& root,
                              const JobCheckpoint& job);

// What a pserver does after writing its checkpoint of `step` when its
// --checkpoint_dir lies under the shared folder `root` that every pserver
// of the job writes to (--shared_checkpoint_root): once every shard of the
// step is there (the last pserver to finish sees them all), writes the
// job manifest; a pserver that finds it written already leaves it. Then
// removes the manifests of steps no longer complete there (their shards
// were removed by retention). Returns whether this call wrote one.
absl::StatusOr<bool> UpdateJobManifest(Env* env, const std::string& root,
                                       absl::string_view job_id, int64_t step);

// The text of a job manifest and its reading; exposed for tests.
// INVALID_ARGUMENT when a shard's folder is not under `root`.
absl::StatusOr<std::string> SerializeJobManifest(const std::string& root,
                                                 const JobCheckpoint& job);
// What a manifest says: the job, step, P and, per shard, its folder
// (joined to `root`) and MANIFEST CRC. DATA_LOSS naming `path` for
// anything that does not parse, a bad checksum, a folder outside `root`
// ("..", an absolute path), and shard lines out of order.
absl::StatusOr<JobCheckpoint> ParseJobManifest(absl::string_view text,
                                               const std::string& path,
                                               const std::string& root);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_CHECKPOINT_JOB_CHECKPOINT_H_
