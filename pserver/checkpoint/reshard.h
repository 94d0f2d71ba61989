#ifndef SHARDPS_PSERVER_CHECKPOINT_RESHARD_H_
#define SHARDPS_PSERVER_CHECKPOINT_RESHARD_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/storage/env.h"
#include "pserver/checkpoint/job_checkpoint.h"
#include "pserver/store/table_snapshot.h"

namespace shardps {

// Progress lines ("pserver 1 of 3: read shard 0 of 2, 12.3 MB"); may be
// empty.
using ReshardProgress = std::function<void(absl::string_view)>;

// What the shard checkpoint of `step` in `folder` holds, whole: the
// checkpoint itself, or for a delta its chain materialized
// (StoreSnapshots::Materialize). Each link verified.
absl::StatusOr<StoreSnapshot> LoadShardState(Env* env,
                                             const std::string& folder,
                                             int64_t step);

// Shard `index` of `num_servers` of the job checkpoint `from`, as a pserver
// at that place holds it (docs/checkpoint_format.md, "Resharding"): the
// dense blocks placed there (with the job's replication, those it backs
// too), taken from their primary's shard, and the sparse rows whose keys
// land there (Mix64(key) % num_servers) with their optimizer state, update
// counts, last-update steps and admission counts. The step, job and
// clocks are `from`'s; the generation the newest of its shards'. Reads
// the source shards one at a time, each verified (CRCs), so at most one
// source shard and the result are in memory.
//
// DATA_LOSS, naming the file, for a blob that does not parse, a block or
// row in a shard that does not place it there, a block missing, or a block
// of another size than the job's; INVALID_ARGUMENT for a bad `index` or
// `num_servers`, or fewer pservers than the job's replication.
absl::StatusOr<StoreSnapshot> ReshardShard(Env* env, const JobCheckpoint& from,
                                           int index, int num_servers,
                                           const ReshardProgress& progress);

// Writes the job checkpoint `from` resharded onto `num_servers` pservers
// under `to`: to/pserver-<i>/<job>/ckpt-<step>/ for each i (start pserver
// i with --checkpoint_dir=to/pserver-<i>), then the job manifest
// to/<job>/JOB-<step>. Everything is written under `to`.tmp first and
// renamed to `to` at the end, so a run that dies leaves no `to` that looks
// whole. FAILED_PRECONDITION when `to` exists; the leftover of a dead run
// (`to`.tmp) is removed first. Returns the job checkpoint written.
absl::StatusOr<JobCheckpoint> ReshardJob(Env* env, const JobCheckpoint& from,
                                         const std::string& to, int num_servers,
                                         const ReshardProgress& progress);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_CHECKPOINT_RESHARD_H_
