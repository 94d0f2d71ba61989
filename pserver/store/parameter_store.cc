// ParameterStore: the running job (membership, pushes, pulls, sweeps,
// reports). Set-up and checkpoints are in parameter_store_setup.cc.
#include "pserver/store/parameter_store.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace shardps {
namespace {

absl::Status NotReadyError() {
  return absl::FailedPreconditionError(
      "the job is not initialised on this pserver yet (the chief, trainer 0, "
      "sends the tables first)");
}

}  // namespace

ParameterStore::ParameterStore(StoreOptions options)
    : options_(std::move(options)),
      clock_(options_.clock),
      own_budget_(options_.max_memory_bytes),
      budget_(options_.budget != nullptr ? options_.budget : &own_budget_),
      waiters_(options_.clock) {}

ParameterStore::~ParameterStore() {
  CancelAllWaiters(absl::UnavailableError("pserver is shutting down"));
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
    if (!u->barrier.Complete() || !CheckServes(*u).ok()) continue;
    UpdateCollector collect;
    u->ApplyStep(/*last=*/nullptr, ready);
    ++updates_;
    absl::Status s = ForwardCollected(collect, -1, 0, 0);
    LOG_IF(ERROR, !s.ok()) << u->name() << ": " << s;
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
  return staleness_->CheckPushStep(trainer_id, step);
}

absl::Status ParameterStore::Push(int trainer_id, int64_t step,
                                  absl::Span<const BlockData> grads,
                                  uint64_t generation, int* late_blocks,
                                  uint64_t request_id) {
  if (late_blocks != nullptr) *late_blocks = 0;
  std::vector<PushPart> parts;
  absl::Status st = CheckPushStart(trainer_id, step);
  if (st.ok()) st = tables_->ResolveDensePush(grads, trainer_id, step, &parts);
  if (!st.ok()) {
    ++rejected_;
    return st;
  }
  return ApplyPush(trainer_id, step, generation, std::move(parts), late_blocks,
                   request_id);
}

absl::Status ParameterStore::PushSparse(int trainer_id, int64_t step,
                                        absl::Span<const SparseGrads> rows,
                                        uint64_t generation,
                                        uint64_t request_id) {
  std::vector<PushPart> parts;
  absl::Status st = CheckPushStart(trainer_id, step);
  if (st.ok()) {
    st = tables_->ResolveSparsePush(rows, trainer_id, step, sync_, &parts);
  }
  if (st.ok() && sync_) {
    // The step's accumulators grow by at most this push's rows.
    int64_t bytes = 0;
    for (const SparseGrads& r : rows) {
      bytes += static_cast<int64_t>(r.grads.size() * sizeof(float) +
                                    r.keys.size() * 32);
    }
    if (!budget_->Fits(bytes)) {
      st = absl::ResourceExhaustedError(absl::StrCat(
          "sparse push: the step's sums would pass --max_memory_mb (",
          budget_->limit() >> 20, " MiB, ", budget_->used() >> 20,
          " MiB held)"));
    }
  }
  if (!st.ok()) {
    ++rejected_;
    return st;
  }
  return ApplyPush(trainer_id, step, generation, std::move(parts), nullptr,
                   request_id);
}

absl::Status ParameterStore::ApplyPush(int trainer_id, int64_t step,
                                       uint64_t generation,
                                       std::vector<PushPart> parts, int* late,
                                       uint64_t request_id) {
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
    st = ApplyPushLocked(trainer_id, step, generation, parts, late, request_id,
                         &ready);
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
                                             int* late, uint64_t request_id,
                                             std::vector<WaiterPtr>* ready) {
  RETURN_IF_ERROR(membership_->CheckGeneration("push", generation));
  absl::InlinedVector<BarrierUnit*, 16> units;
  for (const PushPart& p : parts) units.push_back(p.unit);
  UnitLocks locks(units);
  for (const PushPart& p : parts) RETURN_IF_ERROR(CheckServes(*p.unit));
  UpdateCollector collect;
  if (!sync_) {
    const int64_t job_step = staleness_->SlowestLiveClock();
    for (const PushPart& p : parts) {
      p.unit->mu.AssertHeld();
      PushPayload payload = p.payload;
      payload.job_step = job_step;
      p.unit->ApplyNow(step, payload);
      ++updates_;
    }
    return ForwardCollected(collect, trainer_id, request_id, step);
  }
  // Every unit admits the push before any changes: all or nothing.
  absl::InlinedVector<uint8_t, 16> is_late(parts.size(), 0);
  for (size_t i = 0; i < parts.size(); ++i) {
    BarrierUnit* u = parts[i].unit;
    u->mu.AssertHeld();
    if (forwarder_.load() != nullptr && step < u->barrier.version()) {
      is_late[i] = 2;  // applied already: pushed again after a failover
      continue;
    }
    if (step == u->barrier.version() && u->barrier.assembled()) {
      // LARS: the step is assembled and its norms are out; a push that
      // comes now (a retry, or a trainer that rejoined) changes nothing.
      is_late[i] = 2;
      continue;
    }
    ASSIGN_OR_RETURN(
        const StepBarrier::Admission a,
        u->barrier.Admit(trainer_id, step, parts[i].payload.num_chunks));
    is_late[i] = a == StepBarrier::Admission::kLate;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    BarrierUnit* u = parts[i].unit;
    const PushPayload& p = parts[i].payload;
    u->mu.AssertHeld();
    if (is_late[i] == 2) {
      ++duplicates_;
      continue;
    }
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
    if (r.first) u->barrier.set_started(clock_->Now());
    u->Accumulate(p, r.first);
    if (r.arrival == StepBarrier::Arrival::kTrainerDone &&
        u->barrier.Complete()) {
      u->ApplyStep(&p, ready);
      ++updates_;
    }
  }
  return ForwardCollected(collect, trainer_id, request_id, step);
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
                          PullDone done, uint64_t generation,
                          int64_t own_clock) {
  absl::Status st = CheckReadyAndTrainer(trainer_id);
  if (st.ok() &&
      (min_version < 0 || step < 0 || min_clock < 0 || own_clock < 0)) {
    st = absl::InvalidArgumentError(
        "negative min_version, step, min_clock or own_clock in pull");
  }
  if (st.ok()) st = membership_->CheckGeneration("pull", generation);
  auto w = std::make_shared<PullWaiter>();
  if (st.ok()) st = AddBlockTargets(blocks, nullptr, w.get());
  for (size_t i = 0; st.ok() && i < sparse.size(); ++i) {
    auto s = tables_->FindSparse(sparse[i].table_id, sparse[i].shard);
    if (s.ok()) {
      w->targets.push_back(PullTarget{*s, sparse[i].keys, sparse[i].out});
    }
    st = s.ok() ? CheckServes(**s) : s.status();
  }
  w->trainer_id = trainer_id;
  w->min_version = min_version;
  w->step = step;
  w->min_clock = min_clock;
  w->own_clock = own_clock;
  w->sink = std::move(sink);
  Admit(std::move(st), w, std::move(done), generation);
}

absl::Status ParameterStore::AddBlockTargets(absl::Span<const BlockId> blocks,
                                             double* norms_out,
                                             PullWaiter* w) const {
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSIGN_OR_RETURN(DenseTableBlock * b,
                     tables_->FindBlock(blocks[i].table_id, blocks[i].block));
    w->targets.push_back(PullTarget{
        b, {}, nullptr, norms_out != nullptr ? norms_out + 3 * i : nullptr});
    RETURN_IF_ERROR(CheckServes(*b));
  }
  return absl::OkStatus();
}

void ParameterStore::Admit(absl::Status st, const WaiterPtr& w, PullDone done,
                           uint64_t generation) {
  if (st.ok() && waiters_.size() >= max_waiting_pulls_) {
    st = absl::ResourceExhaustedError(absl::StrCat(
        waiters_.size(), " pulls wait on this pserver already, as many as ",
        "this job's trainers can need at once; refused"));
  }
  if (!st.ok()) {
    ++rejected_;
    done(st, absl::ZeroDuration());
    return;
  }
  ++pulls_;
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
        if (w->norms_step >= 0) {
          absl::StatusOr<bool> has = t.unit->NormsReady(w->norms_step);
          st = has.status();
          if (!st.ok()) break;
          if (*has) {
            w->pending.fetch_sub(1);
          } else {
            t.unit->barrier.HoldForAssembly(w);
          }
          continue;
        }
        const int64_t version = t.unit->barrier.version();
        if (!sync_ || version >= w->min_version) {
          w->pending.fetch_sub(1);
        } else if (w->min_version > version + 1) {
          // No trainer is more than one step ahead of a unit: it pulled
          // the unit's version before pushing the step that is missing.
          // (Holds made before are let go once the pull is answered.)
          st = absl::InvalidArgumentError(
              absl::StrCat("pull for version ", w->min_version, " of ",
                           t.unit->name(), ", which is at version ", version,
                           ": a trainer is at most one step ahead; refused"));
          break;
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
        w.norms_step >= 0 ? "the LARS norms of step " : "version ",
        w.norms_step >= 0 ? w.norms_step : w.min_version, " (a block is at ",
        lowest,
        missing.empty()
            ? "; every live trainer has pushed: the step is being applied, "
              "or, LARS, waits for its table norms)"
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
  if (ready() && sync_ && timeout > absl::ZeroDuration()) {
    DropStalling(now, timeout);
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

void ParameterStore::DropStalling(absl::Time now, absl::Duration timeout) {
  // Trainers that heartbeat but have not sent their part of a step that
  // others started `timeout` ago: dropped as silent ones are.
  std::vector<int> missing;
  int64_t step = 0;
  for (BarrierUnit* u : tables_->units()) {
    absl::MutexLock l(&u->mu);
    if (u->barrier.assembling() && now - u->barrier.started() >= timeout) {
      u->barrier.AppendMissing(&missing);
      step = u->barrier.version();
    }
  }
  if (missing.empty()) return;
  std::vector<WaiterPtr> released;
  {
    absl::MutexLock g(&gate_);
    bool dropped = false;
    for (int k : missing)
      dropped |= membership_->DropStalling(k, step, timeout);
    if (dropped) RecheckBarriers(&released);
  }
  ReleaseAll(released);
}

size_t ParameterStore::TEST_HeldPulls() const {
  size_t n = 0;
  if (!ready()) return n;
  for (BarrierUnit* u : tables_->units()) {
    absl::MutexLock l(&u->mu);
    n += u->barrier.held();
  }
  return n;
}

void ParameterStore::CancelAllWaiters(const absl::Status& status) {
  waiters_.Close(status);
}

}  // namespace shardps
