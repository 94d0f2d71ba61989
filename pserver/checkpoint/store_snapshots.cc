#include "pserver/checkpoint/store_snapshots.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/placement/shard_map.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"

namespace shardps {

namespace {

// How far ahead of a unit a K-of-N save may be asked for: the chief asks a
// couple of steps past the newest version any pserver holds.
constexpr int64_t kMaxCheckpointLead = 1000;

// K of N (docs/checkpoint_format.md, "Checkpoints of K-of-N jobs"): a step
// completes without the trainers that are late, so the units here are at
// different versions, and a save of `step` takes each when it gets there.
// None may be past it.
absl::Status CheckReachable(const JobTables& tables, int64_t step) {
  for (BarrierUnit* u : tables.units()) {
    absl::MutexLock l(&u->mu);
    const int64_t v = u->barrier.version();
    if (v > step) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint of step ", step, ": ", u->name(),
                       " is at version ", v, " already"));
    }
    if (step - v > kMaxCheckpointLead) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint of step ", step, ": ", u->name(), " is at version ", v,
          ", more than ", kMaxCheckpointLead, " steps behind; refused"));
    }
  }
  return absl::OkStatus();
}

// A replicated job's sparse tables have a unit per shard, whose rows share
// the table's blob: the keys of unit `s`'s shard, of `num_servers`; null
// (every key) without replication.
SparseTable::KeyFilter KeysOf(const SparseShard& s, bool sharded,
                              int num_servers) {
  if (!sharded) return nullptr;
  const int shard = static_cast<int>(s.index());
  return [shard, num_servers](uint64_t key) {
    return SparseKeyServer(key, num_servers) == shard;
  };
}

// The shards of the sparse tables held here, ascending (replication);
// empty without.
std::vector<int> HeldSparseShards(const JobTables& tables) {
  std::set<int> shards;
  if (tables.sharded_sparse()) {
    for (const SparseShard* s : tables.sparse()) {
      shards.insert(static_cast<int>(s->index()));
    }
  }
  return {shards.begin(), shards.end()};
}

}  // namespace

absl::StatusOr<CheckpointInfo> StoreSnapshots::Describe(int64_t step) const {
  CheckpointInfo info;
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
  for (int s : HeldSparseShards(*state_->tables)) info.add_sparse_shards(s);
  if (state_->sync && state_->job.replicas_to_aggregate() > 0) {
    RETURN_IF_ERROR(CheckReachable(*state_->tables, step));
  } else if (state_->sync) {
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
    ASSIGN_OR_RETURN(std::string blob, EncodeTable(*state_->tables, t));
    snap.files.emplace_back(TableFileName(t), std::move(blob));
  }
  return snap;
}

namespace {

// The dense blocks a save of `step` writes: every one, or for a `delta`
// those that moved since the last save or are not at `step` yet.
std::vector<DenseTableBlock*> BlocksToSave(const JobTables& tables,
                                           int64_t step, bool delta) {
  std::vector<DenseTableBlock*> marked;
  for (DenseTableBlock* b : tables.blocks()) {
    absl::MutexLock l(&b->mu);
    if (!delta || b->barrier.version() != b->saved_version() ||
        b->barrier.version() < step) {
      marked.push_back(b);
    }
  }
  return marked;
}

// Appends each table's blob header to `sink`: a sparse table's (SPT2, or
// SPD1 for a `delta`), or a dense one's counting its blocks in `marked`.
void AppendHeaders(const JobTables& tables,
                   const std::vector<DenseTableBlock*>& marked, bool delta,
                   SaveSink* sink) {
  for (uint32_t t = 0; t < tables.num_tables(); ++t) {
    if (auto shard = tables.FindSparse(t); shard.ok()) {
      // A replicated job's shards of the table held here share its blob.
      int copies = 0;
      for (const SparseShard* s : tables.sparse()) {
        copies += s->table_id() == t;
      }
      SparseTable& rows = (*shard)->rows();
      sink->Append(t, delta ? SparseDeltas::Header(rows, copies)
                            : rows.SaveHeader(copies));
      continue;
    }
    uint32_t n = 0;
    for (const DenseTableBlock* b : marked) n += b->table_id() == t;
    sink->Append(t, DenseBlobHeader(n));
  }
}

}  // namespace

absl::StatusOr<CheckpointInfo> StoreSnapshots::BeginSave(int64_t step,
                                                         SaveSink* sink,
                                                         int64_t delta_base,
                                                         bool track_changes) {
  if (!state_->is_ready()) {
    return absl::FailedPreconditionError(
        "checkpoint: the job is not initialised on this pserver");
  }
  JobTables* tables = state_->tables.get();
  const bool delta = delta_base >= 0;
  absl::MutexLock g(&state_->gate);
  ASSIGN_OR_RETURN(CheckpointInfo info, Describe(step));
  if (delta) {
    info.set_delta(true);
    info.set_delta_base(delta_base);
  }
  // No push runs while the gate is held: the headers go first, and every
  // unit is marked at this one instant (a delta's dense blocks: those that
  // moved since the last save). K of N: a unit below `step` is armed
  // instead, and marks itself when it gets there.
  for (BarrierUnit* u : tables->units()) {
    absl::MutexLock l(&u->mu);
    u->ForgetCalledOff();
  }
  const std::vector<DenseTableBlock*> marked =
      BlocksToSave(*tables, step, delta);
  AppendHeaders(*tables, marked, delta, sink);
  std::vector<BarrierUnit*> units(marked.begin(), marked.end());
  for (SparseShard* s : tables->sparse()) {
    if (track_changes || delta) s->rows().TrackChanges(true);
    units.push_back(s);
  }
  for (BarrierUnit* u : units) {
    absl::MutexLock l(&u->mu);
    if (u->barrier.version() < step) {
      u->ArmSave(step, sink, delta);
    } else {
      u->MarkForSave(sink, delta);
    }
  }
  return info;
}

absl::Status StoreSnapshots::WriteRest(int64_t step) {
  return WriteRestOf(state_, step);
}

absl::Status StoreSnapshots::WriteRestOf(StoreState* state, int64_t step) {
  JobTables* tables = state->tables.get();
  // K of N: the units armed at the save's instant, each until it gets to
  // `step`; a save that waits longer than a pull would (--max_pull_wait)
  // for a unit, or is called off, writes nothing.
  absl::Status status;
  for (BarrierUnit* u : tables->units()) {
    absl::MutexLock l(&u->mu);
    if (status.ok() && !u->save_unarmed() &&
        !u->mu.AwaitWithTimeout(absl::Condition(u, &BarrierUnit::save_unarmed),
                                state->options.max_pull_wait)) {
      status = absl::DeadlineExceededError(
          absl::StrCat("checkpoint of step ", step, ": ", u->name(),
                       " was at version ", u->barrier.version(), " after ",
                       absl::FormatDuration(state->options.max_pull_wait),
                       " (--max_pull_wait); not written"));
    } else if (status.ok() && u->save_called_off()) {
      status = absl::AbortedError(absl::StrCat(
          "checkpoint of step ", step, ": called off with ", u->name(),
          " at version ", u->barrier.version(),
          " (a rollback, a newer checkpoint or the job's end); not written"));
    }
    // Once the save failed, no unit marks itself for it any more.
    if (!status.ok()) u->DisarmSave();
  }
  for (DenseTableBlock* b : tables->blocks()) {
    absl::MutexLock l(&b->mu);
    b->SaveIfPending();
  }
  for (SparseShard* s : tables->sparse()) s->rows().SaveRemaining();
  return status;
}

void StoreSnapshots::CallOffSaves(absl::string_view why) {
  if (!state_->is_ready()) return;
  int called_off = 0;
  for (BarrierUnit* u : state_->tables->units()) {
    absl::MutexLock l(&u->mu);
    if (u->save_unarmed()) continue;
    u->DisarmSave();
    ++called_off;
  }
  if (called_off > 0) {
    LOG(WARNING) << "a checkpoint in progress is called off (" << why
                 << "): " << called_off << " unit(s) had not got to its step";
  }
}

absl::StatusOr<StoreSnapshot> StoreSnapshots::Materialize(
    const std::vector<StoreSnapshot>& chain) {
  if (chain.size() == 1) return chain[0];
  StoreOptions options;
  options.max_pull_wait = absl::Hours(1);
  ParameterStore scratch(options);
  std::vector<const StoreSnapshot*> links;
  for (const StoreSnapshot& s : chain) links.push_back(&s);
  RETURN_IF_ERROR(StoreSnapshots(&scratch).RestoreChain(
      links, chain.back().info.generation()));
  ASSIGN_OR_RETURN(StoreSnapshot snap,
                   StoreSnapshots(&scratch).Snapshot(chain.back().info.step()));
  // The chain's own record of trainers and clocks, not the scratch store's
  // reading of it.
  const CheckpointInfo& last = chain.back().info;
  snap.info.set_generation(last.generation());
  *snap.info.mutable_clocks() = last.clocks();
  *snap.info.mutable_left_trainers() = last.left_trainers();
  *snap.info.mutable_dropped_trainers() = last.dropped_trainers();
  return snap;
}

absl::Status StoreSnapshots::SaveTo(Checkpointer* checkpointer, int64_t step,
                                    absl::Status* previous) {
  if (!state_->is_ready()) {
    return absl::FailedPreconditionError(
        "checkpoint: the job is not initialised on this pserver");
  }
  return checkpointer->SaveStreaming(
      step, state_->tables->num_tables(),
      [this, step](SaveSink* sink, int64_t delta_base, bool track) {
        return BeginSave(step, sink, delta_base, track);
      },
      [state = state_, step]() {
        return StoreSnapshots::WriteRestOf(state, step);
      },
      previous);
}

absl::Status StoreSnapshots::Restore(const StoreSnapshot& snap,
                                     uint64_t generation) {
  return RestoreChain({&snap}, generation);
}

namespace {

// Takes the job of full checkpoint `full`, with its blocks `ids` and
// sparse shards `shards`: creates it in a store without one, or (`running`)
// checks that the store's job and blocks are the same.
absl::Status CreateOrMatchJob(StoreState* state, const CheckpointInfo& full,
                              const std::vector<BlockId>& ids,
                              const std::vector<int>& shards, bool running) {
  if (!shards.empty() && full.placement().num_servers() <= 0) {
    return absl::DataLossError(
        "checkpoint: sparse shards without the job's placement");
  }
  if (!running) {
    auto st = state->InitJob(full.job(), ids, shards);
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
  } else if (!google::protobuf::util::MessageDifferencer::Equals(full.job(),
                                                                 state->job) ||
             ids.size() != state->tables->blocks().size() ||
             shards != HeldSparseShards(*state->tables)) {
    return absl::FailedPreconditionError(
        "rollback: the checkpoint holds another job or other blocks than "
        "this pserver");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StoreSnapshots::RestoreChain(
    absl::Span<const StoreSnapshot* const> chain, uint64_t generation) {
  if (chain.empty() || chain[0]->info.delta()) {
    return absl::DataLossError(
        "checkpoint: a chain must start with a full one");
  }
  const CheckpointInfo& full = chain[0]->info;
  const CheckpointInfo& info = chain.back()->info;
  std::vector<BlockId> ids;
  for (const BlockRef& r : full.blocks()) {
    ids.push_back(BlockId{r.table_id(), r.block()});
  }
  const bool running = state_->is_ready();
  const std::vector<int> shards(full.sparse_shards().begin(),
                                full.sparse_shards().end());
  RETURN_IF_ERROR(CreateOrMatchJob(state_, full, ids, shards, running));
  RETURN_IF_ERROR(state_->AdoptPlacement(full.placement()));
  // Parse and check every blob before changing anything.
  ASSIGN_OR_RETURN(ParsedSnapshot parsed,
                   ParseSnapshot(*chain[0], *state_->tables));
  std::vector<ParsedDelta> deltas;
  for (size_t i = 1; i < chain.size(); ++i) {
    ASSIGN_OR_RETURN(ParsedDelta d, ParseDelta(*chain[i]));
    deltas.push_back(std::move(d));
  }
  std::vector<WaiterPtr> aborted;
  absl::Status st;
  {
    absl::MutexLock g(&state_->gate);
    RestoreLocked(info, running, std::move(parsed), generation, &aborted, &st);
    for (ParsedDelta& d : deltas) ApplyDeltaLocked(std::move(d), &aborted, &st);
  }
  if (!running) {
    // A table that did not load leaves the job unready: a later try (the
    // chief's InitJob again, a restart) restores again, never serving
    // partial tables.
    if (st.ok()) state_->ready.store(true, std::memory_order_release);
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
               << (deltas.empty()
                       ? std::string()
                       : absl::StrCat(", from the full checkpoint of step ",
                                      full.step(), " and ", deltas.size(),
                                      " delta(s)"))
               << (st.ok() ? "" : absl::StrCat("; ", st.message()));
  return st;
}

absl::StatusOr<StoreSnapshots::ParsedDelta> StoreSnapshots::ParseDelta(
    const StoreSnapshot& snap) const {
  const JobTables& tables = *state_->tables;
  ParsedDelta d;
  d.dense.resize(tables.num_tables());
  d.sparse.assign(tables.num_tables(), nullptr);
  const std::string where =
      absl::StrCat("checkpoint: the delta of step ", snap.info.step(), ": ");
  for (const auto& [name, blob] : snap.files) {
    size_t id = 0;
    while (id < tables.num_tables() && name != TableFileName(id)) ++id;
    if (id == tables.num_tables()) {
      return absl::DataLossError(absl::StrCat(where, "unexpected file ", name));
    }
    if (auto shard = tables.FindSparse(id); shard.ok()) {
      if (absl::Status v = SparseDeltas::Verify((*shard)->rows(), blob);
          !v.ok()) {
        return absl::DataLossError(
            absl::StrCat(where, name, ": ", v.message()));
      }
      d.sparse[id] = &blob;
      continue;
    }
    ASSIGN_OR_RETURN(d.dense[id],
                     ParseDenseBlob(name, blob, tables.BlockSizes(id),
                                    tables.num_slots(id)));
  }
  return d;
}

void StoreSnapshots::RestoreDense(
    std::vector<std::vector<DenseBlockImage>>* dense,
    std::vector<WaiterPtr>* aborted) {
  for (uint32_t t = 0; t < dense->size(); ++t) {
    for (DenseBlockImage& image : (*dense)[t]) {
      DenseTableBlock* b = *state_->tables->FindBlock(t, image.index);
      absl::MutexLock l(&b->mu);
      b->Restore(image.version, std::move(image.value), std::move(image.slots),
                 aborted);
    }
  }
}

void StoreSnapshots::ApplyDeltaLocked(ParsedDelta delta,
                                      std::vector<WaiterPtr>* aborted,
                                      absl::Status* error) {
  RestoreDense(&delta.dense, aborted);
  const JobTables& tables = *state_->tables;
  const int servers = state_->current_placement().num_servers();
  for (SparseShard* s : tables.sparse()) {
    if (delta.sparse[s->table_id()] == nullptr) continue;
    absl::Status st =
        SparseDeltas::Apply(&s->rows(), *delta.sparse[s->table_id()],
                            KeysOf(*s, tables.sharded_sparse(), servers));
    if (!st.ok() && error->ok()) *error = st;
  }
}

void StoreSnapshots::RestoreLocked(const CheckpointInfo& info, bool running,
                                   ParsedSnapshot parsed, uint64_t generation,
                                   std::vector<WaiterPtr>* aborted,
                                   absl::Status* sparse_error) {
  state_->membership->Restore(info, generation, /*restarted=*/!running,
                              state_->clock->Now());
  RestoreDense(&parsed.dense, aborted);
  const bool sharded = state_->tables->sharded_sparse();
  const int servers = info.placement().num_servers();
  for (SparseShard* s : state_->tables->sparse()) {
    absl::MutexLock l(&s->mu);
    absl::Status st = s->rows().Deserialize(*parsed.sparse[s->table_id()],
                                            KeysOf(*s, sharded, servers));
    if (!st.ok() && sparse_error->ok()) *sparse_error = st;
    s->DisarmSave();
    s->barrier.Reset(info.step(), aborted);
  }
  state_->staleness->Restore(info, aborted);
}

}  // namespace shardps
