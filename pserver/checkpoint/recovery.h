#ifndef SHARDPS_PSERVER_CHECKPOINT_RECOVERY_H_
#define SHARDPS_PSERVER_CHECKPOINT_RECOVERY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "pserver/checkpoint/checkpointer.h"
#include "pserver/store/parameter_store.h"

namespace shardps {

// Which checkpoint to recover from, and as which timeline.
struct RecoveryTarget {
  enum class Kind {
    // A pserver starting: the newest checkpoint that verifies, as a new
    // generation (one above the newest this directory has seen, so that
    // trainers still on an old timeline are told to recover).
    kNewestAtStart,
    // A rollback the trainers asked for: checkpoint `step`, as
    // `generation`.
    kRollback,
  };
  Kind kind = Kind::kNewestAtStart;
  int64_t step = 0;
  uint64_t generation = 0;
};

// The one recovery sequence of a pserver (docs/fault_tolerance.md), at start
// and on Rollback: waits for a checkpoint write in progress, loads and
// verifies the checkpoint, at start renames the damaged newer ones that
// LoadNewest skipped (*.damaged), records the generation durably
// (GENERATION, before the store can serve it), loads the checkpoint into
// `store`, and on a rollback deletes the abandoned timeline (the newer
// checkpoints). Returns the step recovered.
//
// At start, NOT_FOUND when the directory holds no checkpoint that verifies
// (the damaged ones are set aside then too); other errors name
// --checkpoint_dir. On a rollback, a checkpoint that cannot be loaded is
// FAILED_PRECONDITION naming the step. The caller serialises calls.
absl::StatusOr<int64_t> RecoverFromCheckpoint(Checkpointer* checkpointer,
                                              ParameterStore* store,
                                              const RecoveryTarget& target);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_CHECKPOINT_RECOVERY_H_
