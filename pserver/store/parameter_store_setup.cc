// ParameterStore: how a store gets its job, from the chief (InitJob,
// SetInitialValues, CommitInit) or from a checkpoint (Restore), and what it
// saves (Snapshot). The running job is in parameter_store.cc.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/transport/wire_limits.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "kernels/finite.h"
#include "pserver/store/parameter_store.h"

namespace shardps {

// --- Job set-up ---

absl::StatusOr<bool> ParameterStore::InitJob(const JobSpec& job,
                                             absl::Span<const BlockId> blocks,
                                             std::vector<int> sparse_shards) {
  absl::MutexLock g(&gate_);
  absl::MutexLock l(&init_mu_);
  return InitJobLocked(job, blocks, sparse_shards);
}

absl::StatusOr<bool> ParameterStore::InitJobLocked(
    const JobSpec& job, absl::Span<const BlockId> blocks,
    absl::Span<const int> sparse_shards) {
  if (initialized_) {
    std::string difference;
    google::protobuf::util::MessageDifferencer differ;
    differ.ReportDifferencesToString(&difference);
    if (!differ.Compare(job, job_)) {
      ++rejected_;
      // The first difference, as "modified: tables[0].shape[0]: 10 -> 12".
      difference = difference.substr(0, difference.find('\n'));
      return absl::FailedPreconditionError(absl::StrCat(
          "InitJob: this pserver already holds a job with a different spec (",
          difference,
          "; the running job's value comes second); restart the "
          "pserver to start a new job"));
    }
    return ready();
  }
  // Validate the whole spec before changing anything.
  RETURN_IF_ERROR(ValidateJob(job, options_.num_trainers));
  const bool sync = job.mode() == SYNC;
  auto membership = std::make_unique<Membership>(job.num_trainers(), sync);
  ASSIGN_OR_RETURN(
      std::unique_ptr<JobTables> tables,
      JobTables::Create(job, blocks, membership.get(), budget_, sparse_shards));
  size_t value_bytes = 0;
  for (const DenseTableBlock* b : tables->blocks()) {
    value_bytes += static_cast<size_t>(b->size()) * sizeof(float);
  }
  max_waiting_pulls_ = static_cast<size_t>(job.num_trainers()) *
                       (value_bytes / kMaxChunkBytes + 16);
  job_ = job;
  sync_ = sync;
  membership_ = std::move(membership);
  tables_ = std::move(tables);
  staleness_ = std::make_unique<StalenessGate>(!sync, job.max_staleness(),
                                               membership_.get());
  init_blocks_.assign(blocks.begin(), blocks.end());
  initialized_ = true;
  LOG(INFO) << "job initialised: " << (sync_ ? "sync" : "async") << ", "
            << job.num_trainers() << " trainers, " << tables_->num_tables()
            << " tables, " << blocks.size() << " blocks held here";
  return false;
}

absl::Status ParameterStore::SetInitialValues(
    absl::Span<const BlockData> blocks) {
  absl::MutexLock l(&init_mu_);
  if (!initialized_) {
    return absl::FailedPreconditionError(
        "SetInitialValues before InitJob: the chief must send the job spec "
        "first");
  }
  if (ready()) return absl::OkStatus();  // trained values win
  std::vector<DenseTableBlock*> targets;
  for (const BlockData& d : blocks) {
    ASSIGN_OR_RETURN(DenseTableBlock * b,
                     tables_->FindBlock(d.table_id, d.block));
    const std::string& name = tables_->spec(d.table_id).name();
    if (static_cast<int64_t>(d.values.size()) != b->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetInitialValues: table ", name, " block ", d.block,
                       " has ", b->size(), " values, got ", d.values.size()));
    }
    if (!AllFinite(d.values.data(), d.values.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetInitialValues: table ", name, " block ", d.block,
                       " has a NaN or Inf value"));
    }
    targets.push_back(b);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    absl::MutexLock bl(&targets[i]->mu);
    targets[i]->SetInitialValue(blocks[i].values);
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::CommitInit() {
  absl::MutexLock l(&init_mu_);
  if (!initialized_) {
    return absl::FailedPreconditionError("CommitInit before InitJob");
  }
  if (ready()) return absl::OkStatus();
  for (const BlockId& id : init_blocks_) {
    DenseTableBlock* b = *tables_->FindBlock(id.table_id, id.block);
    absl::MutexLock bl(&b->mu);
    if (!b->has_value) {
      return absl::FailedPreconditionError(
          absl::StrCat("CommitInit: table ", tables_->spec(id.table_id).name(),
                       " block ", id.block, " has no initial value"));
    }
  }
  ready_.store(true, std::memory_order_release);
  LOG(INFO) << "job ready: " << init_blocks_.size() << " blocks";
  return absl::OkStatus();
}

// --- Checkpoints ---

absl::StatusOr<StoreSnapshot> ParameterStore::Snapshot(int64_t step) const {
  if (!ready()) {
    return absl::FailedPreconditionError(
        "checkpoint: the job is not initialised on this pserver");
  }
  StoreSnapshot snap;
  CheckpointInfo& info = snap.info;
  absl::MutexLock g(&gate_);
  if (tables_->sharded_sparse()) {
    return absl::UnimplementedError(
        "checkpoints of replicated sparse tables are not built yet "
        "(docs/replication.md, \"Limits\")");
  }
  info.set_step(step);
  info.set_generation(membership_->generation());
  *info.mutable_job() = job_;
  for (const DenseTableBlock* b : tables_->blocks()) {
    BlockRef* r = info.add_blocks();
    r->set_table_id(b->table_id());
    r->set_block(b->index());
  }
  staleness_->AddTo(&info);
  membership_->AddTo(&info);
  if (sync_) {
    RETURN_IF_ERROR(CheckStepBoundary(*tables_, step));
  } else if (const int64_t fastest = staleness_->FastestClock();
             step > fastest + 1) {
    // A step no trainer has reached: it would sort after every real
    // checkpoint, and retention would delete those.
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint of step ", step, ": no trainer has pushed past step ",
        fastest, " here; refused"));
  }
  for (uint32_t t = 0; t < tables_->num_tables(); ++t) {
    snap.files.emplace_back(TableFileName(t), EncodeTable(*tables_, t));
  }
  return snap;
}

absl::Status ParameterStore::Restore(const StoreSnapshot& snap,
                                     uint64_t generation) {
  const CheckpointInfo& info = snap.info;
  std::vector<BlockId> ids;
  for (const BlockRef& r : info.blocks()) {
    ids.push_back(BlockId{r.table_id(), r.block()});
  }
  const bool running = ready();
  if (!running) {
    auto st = InitJob(info.job(), ids);
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
                                                                 job_) ||
             ids.size() != tables_->blocks().size()) {
    return absl::FailedPreconditionError(
        "rollback: the checkpoint holds another job or other blocks than "
        "this pserver");
  }
  // Parse and check every blob before changing anything.
  ASSIGN_OR_RETURN(ParsedSnapshot parsed, ParseSnapshot(snap, *tables_));
  std::vector<WaiterPtr> aborted;
  absl::Status st;
  {
    absl::MutexLock g(&gate_);
    RestoreLocked(info, running, std::move(parsed), generation, &aborted, &st);
  }
  if (!running) {
    ready_.store(true, std::memory_order_release);
  } else {
    ++rollbacks_;
  }
  const absl::Status abort = absl::AbortedError(
      absl::StrCat("the job was rolled back to step ", info.step(),
                   " (generation ", generation, "); the trainer must recover"));
  for (const WaiterPtr& w : aborted) waiters_.Finish(w, abort);
  LOG(WARNING) << (running ? "rolled back" : "restored") << " to step "
               << info.step() << " (generation " << generation
               << "): " << parsed.dense_blocks << " dense blocks"
               << (st.ok() ? "" : absl::StrCat("; ", st.message()));
  return st;
}

void ParameterStore::RestoreLocked(const CheckpointInfo& info, bool running,
                                   ParsedSnapshot parsed, uint64_t generation,
                                   std::vector<WaiterPtr>* aborted,
                                   absl::Status* sparse_error) {
  membership_->Restore(info, generation, /*restarted=*/!running, clock_->Now());
  for (uint32_t t = 0; t < parsed.dense.size(); ++t) {
    for (DenseBlockImage& image : parsed.dense[t]) {
      DenseTableBlock* b = *tables_->FindBlock(t, image.index);
      absl::MutexLock l(&b->mu);
      b->Restore(image.version, std::move(image.value), std::move(image.slots),
                 aborted);
    }
  }
  for (SparseShard* s : tables_->sparse()) {
    absl::MutexLock l(&s->mu);
    absl::Status st = s->rows().Deserialize(*parsed.sparse[s->table_id()]);
    if (!st.ok() && sparse_error->ok()) *sparse_error = st;
    s->barrier.Reset(info.step(), aborted);
  }
  staleness_->Restore(info, aborted);
}

}  // namespace shardps
