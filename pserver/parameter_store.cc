#include "pserver/parameter_store.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "kernels/finite.h"

namespace shardps {
namespace {

absl::Status NotReadyError() {
  return absl::FailedPreconditionError(
      "the job is not initialised on this pserver yet (the chief, trainer 0, "
      "sends the tables first)");
}

// The position and kind of the first non-finite value of `v`, for a message.
std::string FirstNonFinite(absl::Span<const float> v) {
  for (size_t j = 0; j < v.size(); ++j) {
    if (!std::isfinite(v[j])) {
      return absl::StrCat(j, " is ", std::isnan(v[j]) ? "NaN" : "Inf");
    }
  }
  return "";
}

}  // namespace

ParameterStore::ParameterStore(StoreOptions options)
    : options_(std::move(options)),
      clock_(options_.clock),
      waiters_(options_.clock) {}

ParameterStore::~ParameterStore() {
  CancelAllWaiters(absl::UnavailableError("pserver is shutting down"));
}

// --- Job set-up ---

absl::StatusOr<bool> ParameterStore::InitJob(const JobSpec& job,
                                             absl::Span<const BlockId> blocks) {
  absl::MutexLock g(&gate_);
  absl::MutexLock l(&init_mu_);
  return InitJobLocked(job, blocks);
}

absl::StatusOr<bool> ParameterStore::InitJobLocked(
    const JobSpec& job, absl::Span<const BlockId> blocks) {
  if (initialized_) {
    if (!google::protobuf::util::MessageDifferencer::Equals(job, job_)) {
      ++rejected_;
      return absl::FailedPreconditionError(
          "InitJob: this pserver already holds a job with a different spec "
          "(tables, shapes, optimizers, mode or trainer count differ); "
          "restart the pserver to start a new job");
    }
    return ready();
  }
  // Validate the whole spec before changing anything.
  RETURN_IF_ERROR(ValidateJob(job, options_.num_trainers));
  const bool sync = job.mode() == SYNC;
  auto membership = std::make_unique<Membership>(job.num_trainers(), sync);
  ASSIGN_OR_RETURN(std::unique_ptr<JobTables> tables,
                   JobTables::Create(job, blocks, membership.get()));
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

// --- Membership ---

absl::Status ParameterStore::CheckReadyAndTrainer(int trainer_id) const {
  if (!ready()) return NotReadyError();
  return membership_->Touch(trainer_id, clock_->Now());
}

absl::StatusOr<RegisterResult> ParameterStore::Register(int trainer_id,
                                                        uint64_t incarnation,
                                                        absl::Time now) {
  RegisterResult r;
  r.job_ready = ready();
  r.generation = generation();
  if (!r.job_ready) return r;  // everyone is expected from the start
  RETURN_IF_ERROR(membership_->CheckTrainerId(trainer_id));
  std::vector<WaiterPtr> released;
  {
    absl::MutexLock g(&gate_);
    const Membership::Registration reg = membership_->Register(
        trainer_id, incarnation, now, sync_ ? MaxVersion() + 1 : 0,
        sync_ ? 0 : staleness_->clock(trainer_id));
    r.join_step = reg.join_step;
    // A rejoin may complete a step that waited for the previous
    // incarnation.
    if (reg.rejoined) RecheckBarriers(&released);
  }
  ReleaseAll(released);
  return r;
}

absl::Status ParameterStore::ConfirmJoin(int trainer_id, uint64_t incarnation,
                                         int64_t start_step) {
  RETURN_IF_ERROR(CheckReadyAndTrainer(trainer_id));
  if (start_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative start_step ", start_step));
  }
  std::vector<WaiterPtr> released;
  {
    absl::MutexLock g(&gate_);
    bool changed = false;
    RETURN_IF_ERROR(membership_->ConfirmJoin(trainer_id, incarnation,
                                             start_step, &changed));
    if (changed) RecheckBarriers(&released);
  }
  ReleaseAll(released);
  return absl::OkStatus();
}

absl::Status ParameterStore::Heartbeat(int trainer_id, uint64_t incarnation,
                                       absl::Time now) {
  if (!ready()) return absl::OkStatus();
  return membership_->Heartbeat(trainer_id, incarnation, now);
}

absl::Status ParameterStore::Leave(int trainer_id, uint64_t incarnation) {
  if (!ready()) return absl::OkStatus();
  std::vector<WaiterPtr> released;
  {
    absl::MutexLock g(&gate_);
    bool changed = false;
    RETURN_IF_ERROR(membership_->Leave(trainer_id, incarnation, &changed));
    if (changed) RecheckBarriers(&released);
  }
  ReleaseAll(released);
  return absl::OkStatus();
}

std::vector<int> ParameterStore::LiveTrainers() const {
  if (!ready()) return {};
  return membership_->LiveTrainers();
}

absl::Status ParameterStore::CheckGeneration(absl::string_view what,
                                             uint64_t generation) const {
  if (!ready()) return absl::OkStatus();
  return membership_->CheckGeneration(what, generation);
}

absl::Status ParameterStore::CheckIncarnation(int trainer_id,
                                              uint64_t incarnation) const {
  if (!ready()) return absl::OkStatus();
  return membership_->CheckIncarnation(trainer_id, incarnation);
}

uint64_t ParameterStore::generation() const {
  return ready() ? membership_->generation() : 0;
}

int64_t ParameterStore::base_step() const {
  return ready() ? membership_->base_step() : 0;
}

void ParameterStore::RecheckBarriers(std::vector<WaiterPtr>* ready) {
  if (!sync_) {
    staleness_->Recheck(ready);
    return;
  }
  for (BarrierUnit* u : tables_->units()) {
    absl::MutexLock l(&u->mu);
    if (!u->barrier.Complete()) continue;
    u->ApplyStep(/*last=*/nullptr, ready);
    ++updates_;
  }
}

int64_t ParameterStore::MaxVersion() const {
  int64_t v = 0;
  for (BarrierUnit* u : tables_->units()) {
    absl::MutexLock l(&u->mu);
    v = std::max(v, u->barrier.version());
  }
  return v;
}

void ParameterStore::ReleaseAll(const std::vector<WaiterPtr>& ready) {
  for (const WaiterPtr& w : ready) waiters_.Release(w);
}

// --- Pushes ---

absl::Status ParameterStore::CheckPushStart(int trainer_id,
                                            int64_t step) const {
  RETURN_IF_ERROR(CheckReadyAndTrainer(trainer_id));
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative step ", step));
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::Push(int trainer_id, int64_t step,
                                  absl::Span<const BlockData> grads,
                                  uint64_t generation, int* late_blocks) {
  if (late_blocks != nullptr) *late_blocks = 0;
  absl::Status st = CheckPushStart(trainer_id, step);
  std::vector<PushPart> parts;
  parts.reserve(grads.size());
  for (size_t i = 0; st.ok() && i < grads.size(); ++i) {
    const BlockData& g = grads[i];
    auto b = tables_->FindBlock(g.table_id, g.block);
    if (!b.ok()) {
      st = b.status();
      break;
    }
    const std::string& name = tables_->spec(g.table_id).name();
    if (static_cast<int64_t>(g.values.size()) != (*b)->size()) {
      st = absl::InvalidArgumentError(absl::StrCat(
          "table ", name, " block ", g.block, ": gradient has ",
          g.values.size(), " values, the block has ", (*b)->size()));
    } else if (!AllFinite(g.values.data(), g.values.size())) {
      st = absl::InvalidArgumentError(
          absl::StrCat("table ", name, " block ", g.block, ": gradient value ",
                       FirstNonFinite(g.values), " (trainer ", trainer_id,
                       ", step ", step, "); nothing was applied"));
    }
    parts.push_back(PushPart{*b, PushPayload{g.values, {}, 1}});
  }
  if (!st.ok()) {
    ++rejected_;
    return st;
  }
  return ApplyPush(trainer_id, step, generation, std::move(parts), late_blocks);
}

absl::Status ParameterStore::PushSparse(int trainer_id, int64_t step,
                                        absl::Span<const SparseGrads> rows,
                                        uint64_t generation) {
  absl::Status st = CheckPushStart(trainer_id, step);
  std::vector<PushPart> parts;
  absl::flat_hash_set<uint64_t> seen;
  for (size_t i = 0; st.ok() && i < rows.size(); ++i) {
    const SparseGrads& r = rows[i];
    auto shard = tables_->FindSparse(r.table_id);
    if (!shard.ok()) {
      st = shard.status();
      break;
    }
    const std::string& name = (*shard)->name();
    const size_t dim = static_cast<size_t>((*shard)->rows().dim());
    if (r.grads.size() != r.keys.size() * dim) {
      st = absl::InvalidArgumentError(
          absl::StrCat("sparse table ", name, ": ", r.keys.size(), " keys but ",
                       r.grads.size(), " values; rows have ", dim,
                       " values each (keys and values of different lengths)"));
    } else if (sync_ && r.num_chunks < 1) {
      st = absl::InvalidArgumentError(
          absl::StrCat("sparse table ", name,
                       ": num_chunks must be at least 1, got ", r.num_chunks));
    } else if (!AllFinite(r.grads.data(), r.grads.size())) {
      st = absl::InvalidArgumentError(absl::StrCat(
          "sparse table ", name, ": a gradient value is NaN or Inf (trainer ",
          trainer_id, ", step ", step, "); nothing was applied"));
    }
    seen.clear();
    for (size_t j = 0; st.ok() && j < r.keys.size(); ++j) {
      if (!seen.insert(r.keys[j]).second) {
        st = absl::InvalidArgumentError(absl::StrCat(
            "sparse table ", name, ": key ", r.keys[j],
            " appears twice in one push (the trainer sums a batch's "
            "gradients per key)"));
      }
    }
    parts.push_back(
        PushPart{*shard, PushPayload{r.grads, r.keys, r.num_chunks}});
  }
  if (!st.ok()) {
    ++rejected_;
    return st;
  }
  return ApplyPush(trainer_id, step, generation, std::move(parts), nullptr);
}

absl::Status ParameterStore::ApplyPush(int trainer_id, int64_t step,
                                       uint64_t generation,
                                       std::vector<PushPart> parts, int* late) {
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) {
    return a.unit->LockedBefore(*b.unit);
  });
  absl::Status st;
  for (size_t i = 1; st.ok() && i < parts.size(); ++i) {
    if (parts[i].unit == parts[i - 1].unit) {
      st = absl::InvalidArgumentError(
          absl::StrCat(parts[i].unit->name(), " appears twice in one push"));
    }
  }
  std::vector<WaiterPtr> ready;
  if (st.ok()) {
    absl::ReaderMutexLock g(&gate_);
    st = ApplyPushLocked(trainer_id, step, generation, parts, late, &ready);
  }
  if (!st.ok()) {
    ++rejected_;
    return st;
  }
  ++pushes_;
  if (!sync_) staleness_->Advance(trainer_id, step, &ready);
  ReleaseAll(ready);
  return absl::OkStatus();
}

absl::Status ParameterStore::ApplyPushLocked(int trainer_id, int64_t step,
                                             uint64_t generation,
                                             const std::vector<PushPart>& parts,
                                             int* late,
                                             std::vector<WaiterPtr>* ready) {
  RETURN_IF_ERROR(membership_->CheckGeneration("push", generation));
  std::vector<BarrierUnit*> units;
  units.reserve(parts.size());
  for (const PushPart& p : parts) units.push_back(p.unit);
  UnitLocks locks(units);
  if (!sync_) {
    for (const PushPart& p : parts) {
      p.unit->mu.AssertHeld();
      p.unit->ApplyNow(step, p.payload);
      ++updates_;
    }
    return absl::OkStatus();
  }
  // Every unit admits the push before any changes: all or nothing.
  std::vector<uint8_t> is_late(parts.size(), 0);
  for (size_t i = 0; i < parts.size(); ++i) {
    BarrierUnit* u = parts[i].unit;
    u->mu.AssertHeld();
    ASSIGN_OR_RETURN(
        const StepBarrier::Admission a,
        u->barrier.Admit(trainer_id, step, parts[i].payload.num_chunks));
    is_late[i] = a == StepBarrier::Admission::kLate;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    BarrierUnit* u = parts[i].unit;
    const PushPayload& p = parts[i].payload;
    u->mu.AssertHeld();
    if (is_late[i]) {
      ++late_;  // the step went ahead without this push
      if (late != nullptr) ++*late;
      continue;
    }
    const StepBarrier::Received r =
        u->barrier.Receive(trainer_id, p.num_chunks);
    if (r.arrival == StepBarrier::Arrival::kDuplicate) {
      ++duplicates_;
      continue;
    }
    u->Accumulate(p, r.first);
    if (r.arrival == StepBarrier::Arrival::kTrainerDone &&
        u->barrier.Complete()) {
      u->ApplyStep(&p, ready);
      ++updates_;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParameterStore::BlockSize(uint32_t table_id,
                                                  uint32_t block) const {
  if (!ready()) return NotReadyError();
  ASSIGN_OR_RETURN(DenseTableBlock * b, tables_->FindBlock(table_id, block));
  return b->size();
}

absl::StatusOr<int> ParameterStore::SparseDim(uint32_t table_id) const {
  if (!ready()) return NotReadyError();
  ASSIGN_OR_RETURN(SparseShard * s, tables_->FindSparse(table_id));
  return s->rows().dim();
}

// --- Pulls ---

void ParameterStore::Pull(int trainer_id, int64_t min_version, int64_t step,
                          int64_t min_clock, absl::Span<const BlockId> blocks,
                          absl::Span<const SparsePull> sparse, PullSink sink,
                          PullDone done, uint64_t generation) {
  absl::Status st = CheckReadyAndTrainer(trainer_id);
  if (st.ok() && (min_version < 0 || step < 0 || min_clock < 0)) {
    st = absl::InvalidArgumentError(
        "negative min_version, step or min_clock in pull");
  }
  if (st.ok()) st = membership_->CheckGeneration("pull", generation);
  auto w = std::make_shared<PullWaiter>();
  for (size_t i = 0; st.ok() && i < blocks.size(); ++i) {
    auto b = tables_->FindBlock(blocks[i].table_id, blocks[i].block);
    if (b.ok()) w->targets.push_back(PullTarget{*b});
    st = b.status();
  }
  for (size_t i = 0; st.ok() && i < sparse.size(); ++i) {
    auto s = tables_->FindSparse(sparse[i].table_id);
    if (s.ok()) {
      w->targets.push_back(PullTarget{*s, sparse[i].keys, sparse[i].out});
    }
    st = s.status();
  }
  if (!st.ok()) {
    ++rejected_;
    done(st, absl::ZeroDuration());
    return;
  }
  ++pulls_;
  w->trainer_id = trainer_id;
  w->min_version = min_version;
  w->step = step;
  w->min_clock = min_clock;
  w->sink = std::move(sink);
  w->done = std::move(done);
  w->start = clock_->Now();
  StartPull(w, generation);
}

void ParameterStore::StartPull(const WaiterPtr& w, uint64_t generation) {
  // One unit per target, one for the staleness gate, one held here.
  w->pending.store(static_cast<int>(w->targets.size()) + 2);
  absl::Status st;
  {
    // The generation is checked again under the gate: a rollback holds it
    // exclusively, so a pull is either held before it (and aborted by it)
    // or sees the new generation.
    absl::ReaderMutexLock g(&gate_);
    st = membership_->CheckGeneration("pull", generation);
    if (st.ok()) {
      if (staleness_->PassOrHold(w)) w->pending.fetch_sub(1);
      for (const PullTarget& t : w->targets) {
        absl::MutexLock l(&t.unit->mu);
        if (!sync_ || t.unit->barrier.version() >= w->min_version) {
          w->pending.fetch_sub(1);
        } else {
          t.unit->barrier.Hold(w->min_version, w);
        }
      }
    }
  }
  if (!st.ok()) {
    waiters_.Finish(w, st);
    return;
  }
  waiters_.Start(w);
}

std::string ParameterStore::DescribeWait(const PullWaiter& w) const {
  // Which trainers have not pushed the step this pull waits for.
  std::vector<int> missing;
  int64_t lowest = INT64_MAX;
  for (const PullTarget& t : w.targets) {
    if (!sync_) break;
    absl::MutexLock l(&t.unit->mu);
    if (t.unit->barrier.version() >= w.min_version) continue;
    lowest = std::min(lowest, t.unit->barrier.version());
    t.unit->barrier.AppendMissing(&missing);
  }
  std::sort(missing.begin(), missing.end());
  std::string out;
  if (lowest != INT64_MAX) {
    out = absl::StrCat(
        "version ", w.min_version, " (a block is at ", lowest,
        missing.empty()
            ? "; every live trainer has pushed, the step is being applied)"
            : absl::StrCat("; waiting for the pushes of step ", lowest,
                           " from trainer(s) ", absl::StrJoin(missing, ","),
                           ")"));
  }
  const std::string gate = staleness_->DescribeWait(w);
  if (!gate.empty()) absl::StrAppend(&out, out.empty() ? "" : "; ", gate);
  return out;
}

void ParameterStore::Sweep(absl::Time now) {
  const absl::Duration timeout = options_.trainer_timeout;
  if (ready() && timeout > absl::ZeroDuration() &&
      membership_->HasSilent(now, timeout)) {
    std::vector<WaiterPtr> released;
    {
      absl::MutexLock g(&gate_);
      if (membership_->DropSilent(now, timeout) > 0) {
        RecheckBarriers(&released);
      }
    }
    ReleaseAll(released);
  }
  std::vector<WaiterPtr> expired, to_report;
  waiters_.Scan(now, options_.max_pull_wait, options_.report_after, &expired,
                &to_report);
  for (const WaiterPtr& w : to_report) {
    const std::string what = DescribeWait(*w);
    if (what.empty()) continue;
    LOG(WARNING) << "pull from trainer " << w->trainer_id << " has waited "
                 << absl::FormatDuration(now - w->start) << " for " << what;
  }
  for (const WaiterPtr& w : expired) {
    const std::string what = DescribeWait(*w);
    ++pull_timeouts_;
    LOG(WARNING) << "pull from trainer " << w->trainer_id << " timed out after "
                 << absl::FormatDuration(now - w->start) << " waiting for "
                 << what;
    waiters_.Finish(
        w, absl::DeadlineExceededError(absl::StrCat(
               "pserver waited ", absl::FormatDuration(now - w->start), " for ",
               what.empty() ? "the step" : what)));
  }
}

void ParameterStore::CancelAllWaiters(const absl::Status& status) {
  waiters_.Close(status);
}

// --- Checkpoints ---

absl::Status ParameterStore::CheckSnapshotBoundary(int64_t step) const {
  for (BarrierUnit* u : tables_->units()) {
    absl::MutexLock l(&u->mu);
    if (u->barrier.version() != step) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint of step ", step, ": ", u->name(), " is at version ",
          u->barrier.version(), " (not a step boundary)"));
    }
  }
  return absl::OkStatus();
}

std::string ParameterStore::EncodeTable(uint32_t table_id) const {
  std::string blob;
  if (auto shard = tables_->FindSparse(table_id); shard.ok()) {
    (*shard)->rows().Serialize(&blob);
    return blob;
  }
  uint32_t n = 0;
  for (const DenseTableBlock* b : tables_->blocks())
    n += b->table_id() == table_id;
  DenseBlobWriter writer(n);
  for (const DenseTableBlock* b : tables_->blocks()) {
    if (b->table_id() != table_id) continue;
    absl::MutexLock l(&b->mu);
    writer.Add(b->index(), b->barrier.version(), b->value, b->slots);
  }
  return std::move(writer).Finish();
}

absl::StatusOr<StoreSnapshot> ParameterStore::Snapshot(int64_t step) const {
  if (!ready()) {
    return absl::FailedPreconditionError(
        "checkpoint: the job is not initialised on this pserver");
  }
  StoreSnapshot snap;
  CheckpointInfo& info = snap.info;
  absl::MutexLock g(&gate_);
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
  if (sync_) RETURN_IF_ERROR(CheckSnapshotBoundary(step));
  for (uint32_t t = 0; t < tables_->num_tables(); ++t) {
    snap.files.emplace_back(TableFileName(t), EncodeTable(t));
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
      return absl::DataLossError(
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
  const size_t num_tables = tables_->num_tables();
  std::vector<std::vector<DenseBlockImage>> dense(num_tables);
  std::vector<const std::string*> sparse_blobs(num_tables, nullptr);
  std::vector<uint8_t> seen(num_tables, 0);
  size_t parsed = 0;
  for (const auto& [name, blob] : snap.files) {
    size_t id = 0;
    while (id < num_tables && name != TableFileName(id)) ++id;
    if (id == num_tables) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: unexpected file ", name));
    }
    if (seen[id]++) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: ", name, " appears twice"));
    }
    if (auto shard = tables_->FindSparse(id); shard.ok()) {
      if (absl::Status v = (*shard)->Verify(blob); !v.ok()) {
        return absl::DataLossError(
            absl::StrCat("checkpoint: ", name, ": ", v.message()));
      }
      sparse_blobs[id] = &blob;
      continue;
    }
    ASSIGN_OR_RETURN(dense[id],
                     ParseDenseBlob(name, blob, tables_->BlockSizes(id),
                                    tables_->num_slots(id)));
    parsed += dense[id].size();
  }
  if (parsed != tables_->blocks().size()) {
    return absl::DataLossError(absl::StrCat("checkpoint: holds ", parsed,
                                            " dense blocks, the job places ",
                                            tables_->blocks().size(), " here"));
  }
  for (const SparseShard* s : tables_->sparse()) {
    if (sparse_blobs[s->table_id()] == nullptr) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: no file for table ", s->name()));
    }
  }
  std::vector<WaiterPtr> aborted;
  absl::Status st;
  {
    absl::MutexLock g(&gate_);
    RestoreLocked(info, running, std::move(dense), sparse_blobs, generation,
                  &aborted, &st);
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
               << "): " << parsed << " dense blocks"
               << (st.ok() ? "" : absl::StrCat("; ", st.message()));
  return st;
}

void ParameterStore::RestoreLocked(
    const CheckpointInfo& info, bool running,
    std::vector<std::vector<DenseBlockImage>> dense,
    const std::vector<const std::string*>& sparse_blobs, uint64_t generation,
    std::vector<WaiterPtr>* aborted, absl::Status* sparse_error) {
  membership_->Restore(info, generation, /*restarted=*/!running, clock_->Now());
  for (uint32_t t = 0; t < dense.size(); ++t) {
    for (DenseBlockImage& image : dense[t]) {
      DenseTableBlock* b = *tables_->FindBlock(t, image.index);
      absl::MutexLock l(&b->mu);
      b->Restore(image.version, std::move(image.value), std::move(image.slots),
                 aborted);
    }
  }
  for (SparseShard* s : tables_->sparse()) {
    absl::MutexLock l(&s->mu);
    absl::Status st = s->rows().Deserialize(*sparse_blobs[s->table_id()]);
    if (!st.ok() && sparse_error->ok()) *sparse_error = st;
    s->barrier.Reset(info.step(), aborted);
  }
  staleness_->Restore(info, aborted);
}

// --- Reports ---

ParameterStore::VersionRange ParameterStore::Versions() const {
  if (!ready()) return VersionRange{};
  VersionRange r{INT64_MAX, 0};
  for (BarrierUnit* u : tables_->units()) {
    absl::MutexLock l(&u->mu);
    r.min = std::min(r.min, u->barrier.version());
    r.max = std::max(r.max, u->barrier.version());
  }
  if (r.min == INT64_MAX) r.min = 0;
  return r;
}

StoreCounters ParameterStore::counters() const {
  StoreCounters c;
  c.pushes = pushes_.load();
  c.block_updates = updates_.load();
  c.duplicate_block_pushes = duplicates_.load();
  c.rejected_requests = rejected_.load();
  c.pulls = pulls_.load();
  c.pull_timeouts = pull_timeouts_.load();
  c.late_block_pushes = late_.load();
  c.rollbacks = rollbacks_.load();
  if (ready()) {
    c.dropped_trainers = membership_->dropped();
    c.rejoined_trainers = membership_->rejoined();
  }
  return c;
}

std::vector<ParameterStore::SparseTableStats> ParameterStore::SparseStats()
    const {
  std::vector<SparseTableStats> out;
  if (!ready()) return out;
  for (const SparseShard* s : tables_->sparse()) {
    out.push_back(SparseTableStats{s->name(), s->rows().counters(),
                                   s->rows().MemoryBytes()});
  }
  return out;
}

size_t ParameterStore::num_blocks() const {
  absl::MutexLock l(&init_mu_);
  return init_blocks_.size();
}

std::vector<float> ParameterStore::TEST_BlockValues(uint32_t table_id,
                                                    uint32_t block) const {
  if (!ready()) return {};
  auto b = tables_->FindBlock(table_id, block);
  if (!b.ok()) return {};
  absl::MutexLock l(&(*b)->mu);
  return (*b)->value;
}

int64_t ParameterStore::TEST_BlockVersion(uint32_t table_id,
                                          uint32_t block) const {
  if (!ready()) return -1;
  auto b = tables_->FindBlock(table_id, block);
  if (!b.ok()) return -1;
  absl::MutexLock l(&(*b)->mu);
  return (*b)->barrier.version();
}

}  // namespace shardps
