#include "pserver/checkpoint/store_snapshots.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"

namespace shardps {

absl::StatusOr<CheckpointInfo> StoreSnapshots::Describe(int64_t step) const {
  CheckpointInfo info;
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
  return info;
}

absl::StatusOr<StoreSnapshot> StoreSnapshots::Snapshot(int64_t step) const {
  if (!state_->is_ready()) {
    return absl::FailedPreconditionError(
        "checkpoint: the job is not initialised on this pserver");
  }
  StoreSnapshot snap;
  absl::MutexLock g(&state_->gate);
  ASSIGN_OR_RETURN(snap.info, Describe(step));
  for (uint32_t t = 0; t < state_->tables->num_tables(); ++t) {
    snap.files.emplace_back(TableFileName(t), EncodeTable(*state_->tables, t));
  }
  return snap;
}

absl::StatusOr<CheckpointInfo> StoreSnapshots::BeginSave(int64_t step,
                                                         SaveSink* sink) {
  if (!state_->is_ready()) {
    return absl::FailedPreconditionError(
        "checkpoint: the job is not initialised on this pserver");
  }
  JobTables* tables = state_->tables.get();
  absl::MutexLock g(&state_->gate);
  ASSIGN_OR_RETURN(CheckpointInfo info, Describe(step));
  // No push runs while the gate is held: the headers go first, and every
  // unit is marked at this one instant.
  for (uint32_t t = 0; t < tables->num_tables(); ++t) {
    if (auto shard = tables->FindSparse(t); shard.ok()) {
      sink->Append(t, (*shard)->rows().SaveHeader());
      continue;
    }
    uint32_t n = 0;
    for (const DenseTableBlock* b : tables->blocks()) n += b->table_id() == t;
    sink->Append(t, DenseBlobHeader(n));
  }
  for (DenseTableBlock* b : tables->blocks()) {
    absl::MutexLock l(&b->mu);
    b->MarkForSave(sink);
  }
  for (SparseShard* s : tables->sparse()) {
    s->rows().MarkForSave(sink, s->table_id());
  }
  return info;
}

void StoreSnapshots::WriteRest() { WriteRestOf(state_); }

void StoreSnapshots::WriteRestOf(StoreState* state) {
  JobTables* tables = state->tables.get();
  for (DenseTableBlock* b : tables->blocks()) {
    absl::MutexLock l(&b->mu);
    b->SaveIfPending();
  }
  for (SparseShard* s : tables->sparse()) s->rows().SaveRemaining();
}

absl::Status StoreSnapshots::SaveTo(Checkpointer* checkpointer, int64_t step,
                                    absl::Status* previous) {
  if (!state_->is_ready()) {
    return absl::FailedPreconditionError(
        "checkpoint: the job is not initialised on this pserver");
  }
  return checkpointer->SaveStreaming(
      step, state_->tables->num_tables(),
      [this, step](SaveSink* sink) { return BeginSave(step, sink); },
      [state = state_]() { StoreSnapshots::WriteRestOf(state); }, previous);
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
