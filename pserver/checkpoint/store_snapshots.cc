#include "pserver/checkpoint/store_snapshots.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"

namespace shardps {

absl::StatusOr<StoreSnapshot> StoreSnapshots::Snapshot(int64_t step) const {
  if (!state_->is_ready()) {
    return absl::FailedPreconditionError(
        "checkpoint: the job is not initialised on this pserver");
  }
  StoreSnapshot snap;
  CheckpointInfo& info = snap.info;
  absl::MutexLock g(&state_->gate);
  if (state_->tables->sharded_sparse()) {
    return absl::UnimplementedError(
        "checkpoints of replicated sparse tables are not built yet "
        "(docs/replication.md, \"Limits\")");
  }
  info.set_step(step);
  info.set_generation(state_->membership->generation());
  *info.mutable_job() = state_->job;
  for (const DenseTableBlock* b : state_->tables->blocks()) {
    BlockRef* r = info.add_blocks();
    r->set_table_id(b->table_id());
    r->set_block(b->index());
  }
  state_->staleness->AddTo(&info);
  state_->membership->AddTo(&info);
  *info.mutable_placement() = state_->current_placement();
  if (state_->sync) {
    RETURN_IF_ERROR(CheckStepBoundary(*state_->tables, step));
  } else if (const int64_t fastest = state_->staleness->FastestClock();
             step > fastest + 1) {
    // A step no trainer has reached: it would sort after every real
    // checkpoint, and retention would delete those.
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint of step ", step, ": no trainer has pushed past step ",
        fastest, " here; refused"));
  }
  for (uint32_t t = 0; t < state_->tables->num_tables(); ++t) {
    snap.files.emplace_back(TableFileName(t), EncodeTable(*state_->tables, t));
  }
  return snap;
}

absl::Status StoreSnapshots::Restore(const StoreSnapshot& snap,
                                     uint64_t generation) {
  const CheckpointInfo& info = snap.info;
  std::vector<BlockId> ids;
  for (const BlockRef& r : info.blocks()) {
    ids.push_back(BlockId{r.table_id(), r.block()});
  }
  const bool running = state_->is_ready();
  if (!running) {
    auto st = state_->InitJob(info.job(), ids, {});
    if (!st.ok()) {
      // A spec no chief could send is a damaged checkpoint (DATA_LOSS); one
      // this pserver's flags refuse (--num_gradient_servers,
      // --max_memory_mb) keeps its code.
      const absl::StatusCode code = absl::IsInvalidArgument(st.status())
                                        ? absl::StatusCode::kDataLoss
                                        : st.status().code();
      return absl::Status(code,
                          absl::StrCat("checkpoint: ", st.status().message()));
    }
  } else if (!google::protobuf::util::MessageDifferencer::Equals(info.job(),
                                                                 state_->job) ||
             ids.size() != state_->tables->blocks().size()) {
    return absl::FailedPreconditionError(
        "rollback: the checkpoint holds another job or other blocks than "
        "this pserver");
  }
  RETURN_IF_ERROR(state_->AdoptPlacement(info.placement()));
  // Parse and check every blob before changing anything.
  ASSIGN_OR_RETURN(ParsedSnapshot parsed, ParseSnapshot(snap, *state_->tables));
  std::vector<WaiterPtr> aborted;
  absl::Status st;
  {
    absl::MutexLock g(&state_->gate);
    RestoreLocked(info, running, std::move(parsed), generation, &aborted, &st);
  }
  if (!running) {
    state_->ready.store(true, std::memory_order_release);
  } else {
    ++state_->rollbacks;
  }
  const absl::Status abort = absl::AbortedError(
      absl::StrCat("the job was rolled back to step ", info.step(),
                   " (generation ", generation, "); the trainer must recover"));
  for (const WaiterPtr& w : aborted) state_->waiters.Finish(w, abort);
  LOG(WARNING) << (running ? "rolled back" : "restored") << " to step "
               << info.step() << " (generation " << generation
               << "): " << parsed.dense_blocks << " dense blocks"
               << (st.ok() ? "" : absl::StrCat("; ", st.message()));
  return st;
}

void StoreSnapshots::RestoreLocked(const CheckpointInfo& info, bool running,
                                   ParsedSnapshot parsed, uint64_t generation,
                                   std::vector<WaiterPtr>* aborted,
                                   absl::Status* sparse_error) {
  state_->membership->Restore(info, generation, /*restarted=*/!running,
                              state_->clock->Now());
  for (uint32_t t = 0; t < parsed.dense.size(); ++t) {
    for (DenseBlockImage& image : parsed.dense[t]) {
      DenseTableBlock* b = *state_->tables->FindBlock(t, image.index);
      absl::MutexLock l(&b->mu);
      b->Restore(image.version, std::move(image.value), std::move(image.slots),
                 aborted);
    }
  }
  for (SparseShard* s : state_->tables->sparse()) {
    absl::MutexLock l(&s->mu);
    absl::Status st = s->rows().Deserialize(*parsed.sparse[s->table_id()]);
    if (!st.ok() && sparse_error->ok()) *sparse_error = st;
    s->barrier.Reset(info.step(), aborted);
  }
  state_->staleness->Restore(info, aborted);
}

}  // namespace shardps
