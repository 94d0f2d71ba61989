#ifndef SHARDPS_PSERVER_CHECKPOINT_STORE_SNAPSHOTS_H_
#define SHARDPS_PSERVER_CHECKPOINT_STORE_SNAPSHOTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "pserver/checkpoint/checkpointer.h"
#include "pserver/store/parameter_store.h"
#include "pserver/store/table_snapshot.h"

namespace shardps {

// What a checkpoint holds of a store, and a store made again from one
// (docs/checkpoint_format.md): the job's spec, its blocks, membership and
// clocks, and each table's blob. It works on a ParameterStore's state and
// holds nothing of its own: make one where it is needed. Thread-safe.
class StoreSnapshots {
 public:
  // `store` must outlive it.
  explicit StoreSnapshots(ParameterStore* store) : state_(store->state()) {}

  // Copies everything the store holds while no push runs. SYNC: every unit
  // must be at version `step` (FAILED_PRECONDITION otherwise: not a step
  // boundary); ASYNC: whatever each unit holds now, labelled `step`.
  absl::StatusOr<StoreSnapshot> Snapshot(int64_t step) const;
  // Saves the store as checkpoint `step` through `checkpointer`, streaming
  // (docs/checkpoint_format.md, "Streaming saves"): under the gate, the
  // checks and metadata of Snapshot, each table's blob header, and every
  // unit marked; then the units are written as they were at that instant
  // by whoever changes one first (a push) or by the checkpointer's thread,
  // without a copy of the store. Returns Snapshot's errors (nothing is
  // written then); *previous: how the previous write ended.
  absl::Status SaveTo(Checkpointer* checkpointer, int64_t step,
                      absl::Status* previous);
  // SaveTo's two halves: the instant (checks, metadata, headers, marks),
  // and the units no change has written yet. K-of-N jobs
  // (--replicas_to_aggregate; docs/checkpoint_format.md, "Checkpoints of
  // K-of-N jobs"): units below `step` are armed at the instant and taken
  // when they get there, and WriteRest waits for them: DEADLINE_EXCEEDED
  // when one does not within --max_pull_wait, ABORTED when CallOffSaves
  // called the save off; nothing of it is committed then.
  // With `delta_base` >= 0 the save is a delta on this pserver's
  // checkpoint of that step (docs/checkpoint_format.md, "Deltas"): only the
  // dense blocks that moved since, and the sparse keys changed since.
  // `track_changes`: the sparse tables keep the keys changed from now on,
  // for deltas on this save.
  absl::StatusOr<CheckpointInfo> BeginSave(int64_t step, SaveSink* sink,
                                           int64_t delta_base = -1,
                                           bool track_changes = false);
  absl::Status WriteRest(int64_t step);
  // Calls off a save whose armed units have not got to its step yet (a
  // rollback, a newer checkpoint request, the job's end): its WriteRest
  // returns ABORTED. `why` goes to the log.
  void CallOffSaves(absl::string_view why);

  // Loads a snapshot as timeline `generation`. On a store without a job it
  // creates the job from the snapshot and makes it ready (a pserver
  // restarting from its checkpoint). On a running job (a rollback) the job
  // and blocks must be the same; every waiting pull is answered ABORTED.
  // DataLoss for a malformed table blob, with nothing changed.
  absl::Status Restore(const StoreSnapshot& snapshot, uint64_t generation);
  // The same for a chain (Checkpointer::LoadChain): the full checkpoint,
  // then each delta applied in order; every blob of every link is parsed
  // before anything changes. The membership, clocks and step are the last
  // link's.
  absl::Status RestoreChain(absl::Span<const StoreSnapshot* const> chain,
                            uint64_t generation);
  // A chain as one full snapshot of its last step (what the shard holds
  // then), through a scratch store: for tools that read checkpoints.
  static absl::StatusOr<StoreSnapshot> Materialize(
      const std::vector<StoreSnapshot>& chain);

 private:
  // A delta's blobs, checked against the tables.
  struct ParsedDelta {
    std::vector<std::vector<DenseBlockImage>> dense;  // per table
    std::vector<const std::string*> sparse;  // per table, SPD1; or null
  };
  absl::StatusOr<ParsedDelta> ParseDelta(const StoreSnapshot& snap) const;
  void ApplyDeltaLocked(ParsedDelta delta, std::vector<WaiterPtr>* aborted,
                        absl::Status* error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->gate);
  // Puts each table's dense block images (every block held, or a delta's)
  // into their blocks.
  void RestoreDense(std::vector<std::vector<DenseBlockImage>>* dense,
                    std::vector<WaiterPtr>* aborted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->gate);
  // Restore's half that changes the store, after every blob was parsed.
  void RestoreLocked(const CheckpointInfo& info, bool running,
                     ParsedSnapshot parsed, uint64_t generation,
                     std::vector<WaiterPtr>* aborted,
                     absl::Status* sparse_error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->gate);

  // WriteRest of the store `state` belongs to (SaveTo's thread outlives
  // this object).
  static absl::Status WriteRestOf(StoreState* state, int64_t step);
  // The checks and metadata of a checkpoint of `step`, under the gate.
  absl::StatusOr<CheckpointInfo> Describe(int64_t step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->gate);

  StoreState* const state_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_CHECKPOINT_STORE_SNAPSHOTS_H_
