#include "pserver/checkpoint/recovery.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "pserver/checkpoint/store_snapshots.h"

namespace shardps {
namespace {

using Kind = RecoveryTarget::Kind;

// The checkpoint of `target` with the ones it stands on (a full one, then
// deltas), with the errors of its kind.
absl::StatusOr<std::vector<StoreSnapshot>> LoadTarget(
    Checkpointer* checkpointer, const RecoveryTarget& target) {
  if (target.kind == Kind::kRollback) {
    auto chain = checkpointer->LoadChain(target.step);
    if (!chain.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rollback to step ", target.step, ": ", chain.status().message()));
    }
    return chain;
  }
  auto chain = checkpointer->LoadNewestChain();
  if (!chain.ok() && !absl::IsNotFound(chain.status())) {
    return absl::Status(chain.status().code(),
                        absl::StrCat("--checkpoint_dir ", checkpointer->dir(),
                                     ": ", chain.status().message()));
  }
  return chain;
}

// The generation the store takes: at start one above every generation this
// directory has been on; on a rollback the one the trainers chose.
absl::StatusOr<uint64_t> TargetGeneration(Checkpointer* checkpointer,
                                          const RecoveryTarget& target,
                                          const StoreSnapshot& snap) {
  if (target.kind == Kind::kRollback) return target.generation;
  uint64_t last = snap.info.generation();
  auto kept = checkpointer->ReadGeneration();
  if (kept.ok()) {
    last = std::max(last, *kept);
  } else if (!absl::IsNotFound(kept.status())) {
    return kept.status();
  }
  return last + 1;
}

}  // namespace

absl::StatusOr<int64_t> RecoverFromCheckpoint(Checkpointer* checkpointer,
                                              ParameterStore* store,
                                              const RecoveryTarget& target) {
  const bool start = target.kind == Kind::kNewestAtStart;
  StoreSnapshots(store).CallOffSaves("a rollback");
  if (absl::Status s = checkpointer->Flush(); !s.ok()) {
    LOG(WARNING) << (start ? "" : "rollback: ")
                 << "the last checkpoint write had failed: " << s;
  }
  for (;;) {
    auto chain = LoadTarget(checkpointer, target);
    if (start && absl::IsNotFound(chain.status())) {
      // None verifies: keep any damaged ones out of the way.
      RETURN_IF_ERROR(checkpointer->QuarantineNewerThan(-1));
      return chain.status();
    }
    RETURN_IF_ERROR(chain.status());
    const StoreSnapshot* snap = &chain->back();
    const int64_t step = snap->info.step();
    ASSIGN_OR_RETURN(const uint64_t generation,
                     TargetGeneration(checkpointer, target, *snap));
    // At start the damaged newer checkpoints go aside before anything else
    // changes; on a rollback the abandoned timeline goes once the store
    // holds the step.
    if (start) RETURN_IF_ERROR(checkpointer->QuarantineNewerThan(step));
    RETURN_IF_ERROR(checkpointer->WriteGeneration(generation));
    std::vector<const StoreSnapshot*> links;
    for (const StoreSnapshot& link : *chain) links.push_back(&link);
    absl::Status s = StoreSnapshots(store).RestoreChain(links, generation);
    // The store now holds that step, not what the last save left: the next
    // save is full.
    checkpointer->ForceFull();
    if (start && absl::IsDataLoss(s)) {
      // It verified but does not hold a job this pserver can load (a blob
      // that does not parse, a spec no chief could send): set aside like a
      // torn one, and the one before it is tried.
      LOG(ERROR) << "--checkpoint_dir " << checkpointer->dir()
                 << ": the checkpoint of step " << step
                 << " verifies but cannot be loaded (" << s.message()
                 << "); set aside, trying the one before it";
      RETURN_IF_ERROR(checkpointer->QuarantineNewerThan(step - 1));
      continue;
    }
    if (s.ok() && !start) s = checkpointer->SetAsideNewerThan(step, generation);
    if (!s.ok() && start) {
      return absl::DataLossError(
          absl::StrCat("--checkpoint_dir ", checkpointer->dir(),
                       ": cannot restore step ", step, ": ", s.message()));
    }
    RETURN_IF_ERROR(s);
    return step;
  }
}

}  // namespace shardps
