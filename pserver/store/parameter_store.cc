
#include "pserver/store/parameter_store.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace shardps {
ParameterStore::ParameterStore(StoreOptions options)
    : state_(std::move(options)) {}

ParameterStore::~ParameterStore() {
  CancelAllWaiters(absl::UnavailableError("pserver is shutting down"));
}

// --- Membership ---

absl::StatusOr<RegisterResult> ParameterStore::Register(int trainer_id,
                                                        uint64_t incarnation,
                                                        absl::Time now) {
  RegisterResult r;
  r.job_ready = state_.is_ready();
  r.generation = generation();
  if (!r.job_ready) return r;  // everyone is expected from the start
  RETURN_IF_ERROR(state_.membership->CheckTrainerId(trainer_id));
  std::vector<WaiterPtr> released;
  {
    absl::MutexLock g(&state_.gate);
    const Membership::Registration reg = state_.membership->Register(
        trainer_id, incarnation, now,
        state_.sync ? state_.tables->Versions().max + 1 : 0,
        state_.sync ? 0 : state_.staleness->clock(trainer_id));
    r.join_step = reg.join_step;
    // A rejoin may complete a step that waited for the previous
    // incarnation.
    if (reg.rejoined) RecheckBarriers(&released);
  }
  state_.ReleaseAll(released);
  return r;
}

absl::Status ParameterStore::ConfirmJoin(int trainer_id, uint64_t incarnation,
                                         int64_t start_step) {
  RETURN_IF_ERROR(state_.CheckReadyAndTrainer(trainer_id));
  if (start_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative start_step ", start_step));
  }
  std::vector<WaiterPtr> released;
  {
    absl::MutexLock g(&state_.gate);
    bool changed = false;
    RETURN_IF_ERROR(state_.membership->ConfirmJoin(trainer_id, incarnation,
                                                   start_step, &changed));
    if (changed) RecheckBarriers(&released);
  }
  state_.ReleaseAll(released);
  return absl::OkStatus();
}

absl::Status ParameterStore::Leave(int trainer_id, uint64_t incarnation) {
  if (!state_.is_ready()) return absl::OkStatus();
  std::vector<WaiterPtr> released;
  {
    absl::MutexLock g(&state_.gate);
    bool changed = false;
    RETURN_IF_ERROR(
        state_.membership->Leave(trainer_id, incarnation, &changed));
    if (changed) RecheckBarriers(&released);
  }
  state_.ReleaseAll(released);
  return absl::OkStatus();
}

void ParameterStore::RecheckBarriers(std::vector<WaiterPtr>* ready) {
  if (!state_.sync) {
    state_.staleness->Recheck(ready);
    return;
  }
  for (BarrierUnit* u : state_.tables->units()) {
    AppliedUpdates applied;
    {
      UnitLocks lock(absl::MakeConstSpan(&u, 1));
      u->mu.AssertHeld();
      if (!u->barrier.Complete() || !state_.CheckServes(*u).ok()) continue;
      applied.Add(u, u->ApplyStep(/*last=*/nullptr, ready));
      ++state_.updates;
    }
    absl::Status s = state_.Forward(applied, -1, 0, 0);
    LOG_IF(ERROR, !s.ok()) << u->name() << ": " << s;
  }
}

// --- Pushes ---

absl::Status ParameterStore::CheckPushStart(int trainer_id,
                                            int64_t step) const {
  RETURN_IF_ERROR(state_.CheckReadyAndTrainer(trainer_id));
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative step ", step));
  }
  return state_.staleness->CheckPushStep(trainer_id, step);
}

absl::Status ParameterStore::Push(int trainer_id, int64_t step,
                                  absl::Span<const BlockData> grads,
                                  uint64_t generation, int* late_blocks,
                                  uint64_t request_id) {
  if (late_blocks != nullptr) *late_blocks = 0;
  std::vector<PushPart> parts;
  absl::Status st = CheckPushStart(trainer_id, step);
  if (st.ok())
    st = state_.tables->ResolveDensePush(grads, trainer_id, step, &parts);
  if (!st.ok()) {
    ++state_.rejected;
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
    st = state_.tables->ResolveSparsePush(rows, trainer_id, step, state_.sync,
                                          &parts);
  }
  if (st.ok() && state_.sync) {
    // The step's accumulators grow by at most this push's rows.
    int64_t bytes = 0;
    for (const SparseGrads& r : rows) {
      bytes += static_cast<int64_t>(r.grads.size() * sizeof(float) +
                                    r.keys.size() * 32);
    }
    if (!state_.budget->Fits(bytes)) {
      st = absl::ResourceExhaustedError(absl::StrCat(
          "sparse push: the step's sums would pass --max_memory_mb (",
          state_.budget->limit() >> 20, " MiB, ", state_.budget->used() >> 20,
          " MiB held)"));
    }
  }
  if (!st.ok()) {
    ++state_.rejected;
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
    absl::ReaderMutexLock g(&state_.gate);
    AppliedUpdates applied;
    st = ApplyPushLocked(trainer_id, step, generation, parts, late, &ready,
                         &applied);
    // The units' locks are released; their updates reach the backups before
    // the push is answered, the released pulls are, or any pull or push of
    // the units goes on (they wait until the units are settled).
    const absl::Status forwarded =
        state_.Forward(applied, trainer_id, request_id, step);
    if (st.ok()) st = forwarded;
  }
  if (!st.ok()) {
    ++state_.rejected;
    return st;
  }
  ++state_.pushes;
  if (!state_.sync) state_.staleness->Advance(trainer_id, step, &ready);
  state_.ReleaseAll(ready);
  return absl::OkStatus();
}

namespace {

// What a SYNC push does to one of its units, decided before any changes.
enum class PartFate : uint8_t {
  kAccumulate,
  kLate,            // the step went ahead without this push (K of N)
  kAppliedAlready,  // pushed again after a failover, or LARS's step is out
};
using PartFates = absl::InlinedVector<PartFate, 16>;

// ASYNC: each part applied on arrival, at the job's slowest live clock.
void ApplyNowLocked(StoreState& state, int64_t step,
                    const std::vector<PushPart>& parts,
                    AppliedUpdates* applied) {
  const int64_t job_step = state.staleness->SlowestLiveClock();
  for (const PushPart& p : parts) {
    p.unit->mu.AssertHeld();
    PushPayload payload = p.payload;
    payload.job_step = job_step;
    applied->Add(p.unit, p.unit->ApplyNow(step, payload));
    ++state.updates;
  }
}

// SYNC: every unit admits the push before any changes (all or nothing).
absl::StatusOr<PartFates> AdmitStepLocked(const StoreState& state,
                                          int trainer_id, int64_t step,
                                          const std::vector<PushPart>& parts) {
  PartFates fates(parts.size(), PartFate::kAccumulate);
  for (size_t i = 0; i < parts.size(); ++i) {
    BarrierUnit* u = parts[i].unit;
    u->mu.AssertHeld();
    if ((state.forwarder.load() != nullptr && step < u->barrier.version()) ||
        (step == u->barrier.version() && u->barrier.assembled())) {
      // Applied already, pushed again after a failover; or LARS: the step
      // is assembled and its norms are out, and a push that comes now (a
      // retry, or a trainer that rejoined) changes nothing.
      fates[i] = PartFate::kAppliedAlready;
      continue;
    }
    ASSIGN_OR_RETURN(
        const StepBarrier::Admission a,
        u->barrier.Admit(trainer_id, step, parts[i].payload.num_chunks));
    if (a == StepBarrier::Admission::kLate) fates[i] = PartFate::kLate;
  }
  return fates;
}

// SYNC: the admitted parts accumulated; a unit whose step it completes
// applies it and releases its pulls into `ready`.
void AccumulateLocked(StoreState& state, int trainer_id,
                      const std::vector<PushPart>& parts,
                      const PartFates& fates, int* late,
                      std::vector<WaiterPtr>* ready, AppliedUpdates* applied) {
  for (size_t i = 0; i < parts.size(); ++i) {
    BarrierUnit* u = parts[i].unit;
    const PushPayload& p = parts[i].payload;
    u->mu.AssertHeld();
    if (fates[i] == PartFate::kAppliedAlready) {
      ++state.duplicates;
      continue;
    }
    if (fates[i] == PartFate::kLate) {
      ++state.late;
      if (late != nullptr) ++*late;
      continue;
    }
    const StepBarrier::Received r =
        u->barrier.Receive(trainer_id, p.num_chunks);
    if (r.arrival == StepBarrier::Arrival::kDuplicate) {
      ++state.duplicates;
      continue;
    }
    if (r.first) u->barrier.set_started(state.clock->Now());
    u->Accumulate(p, r.first);
    if (r.arrival == StepBarrier::Arrival::kTrainerDone &&
        u->barrier.Complete()) {
      applied->Add(u, u->ApplyStep(&p, ready));
      ++state.updates;
    }
  }
}

}  // namespace

absl::Status ParameterStore::ApplyPushLocked(int trainer_id, int64_t step,
                                             uint64_t generation,
                                             const std::vector<PushPart>& parts,
                                             int* late,
                                             std::vector<WaiterPtr>* ready,
                                             AppliedUpdates* applied) {
  RETURN_IF_ERROR(state_.membership->CheckGeneration("push", generation));
  absl::InlinedVector<BarrierUnit*, 16> units;
  for (const PushPart& p : parts) units.push_back(p.unit);
  UnitLocks locks(units);
  for (const PushPart& p : parts) RETURN_IF_ERROR(state_.CheckServes(*p.unit));
  if (!state_.sync) {
    ApplyNowLocked(state_, step, parts, applied);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const PartFates fates,
                   AdmitStepLocked(state_, trainer_id, step, parts));
  AccumulateLocked(state_, trainer_id, parts, fates, late, ready, applied);
  return absl::OkStatus();
}

// --- Pulls ---

void ParameterStore::Pull(int trainer_id, int64_t min_version, int64_t step,
                          int64_t min_clock,
                          absl::Span<DenseTableBlock* const> blocks,
                          absl::Span<const SparsePull> sparse, PullSink sink,
                          PullDone done, uint64_t generation,
                          int64_t own_clock) {
  absl::Status st = state_.CheckReadyAndTrainer(trainer_id);
  if (st.ok() &&
      (min_version < 0 || step < 0 || min_clock < 0 || own_clock < 0)) {
    st = absl::InvalidArgumentError(
        "negative min_version, step, min_clock or own_clock in pull");
  }
  if (st.ok()) st = state_.membership->CheckGeneration("pull", generation);
  auto w = std::make_shared<PullWaiter>();
  if (st.ok()) st = AddBlockTargets(blocks, nullptr, w.get());
  for (size_t i = 0; st.ok() && i < sparse.size(); ++i) {
    const SparsePull& p = sparse[i];
    auto s = p.unit != nullptr ? absl::StatusOr<SparseShard*>(p.unit)
                               : state_.tables->FindSparse(p.table_id, p.shard);
    if (s.ok()) {
      w->targets.push_back(PullTarget{*s, sparse[i].keys, sparse[i].out});
    }
    st = s.ok() ? state_.CheckServes(**s) : s.status();
  }
  w->trainer_id = trainer_id;
  w->min_version = min_version;
  w->step = step;
  w->min_clock = min_clock;
  w->own_clock = own_clock;
  w->sink = std::move(sink);
  Admit(std::move(st), w, std::move(done), generation);
}

void ParameterStore::PullNorms(int trainer_id, int64_t step,
                               absl::Span<const BlockId> blocks, double* out,
                               PullDone done, uint64_t generation) {
  absl::Status st = state_.CheckReadyAndTrainer(trainer_id);
  if (st.ok() && !state_.sync) {
    st = absl::InvalidArgumentError(
        "a pull of LARS norms in an ASYNC job (LARS needs SYNC)");
  }
  if (st.ok() && (step < 0 || step == INT64_MAX || blocks.empty())) {
    st = absl::InvalidArgumentError(
        "a pull of LARS norms needs a step >= 0 and at least one block");
  }
  if (st.ok()) st = state_.membership->CheckGeneration("pull", generation);
  auto w = std::make_shared<PullWaiter>();
  if (st.ok()) {
    absl::StatusOr<std::vector<DenseTableBlock*>> units =
        state_.ResolveBlocks(blocks);
    st = units.ok() ? AddBlockTargets(*units, out, w.get()) : units.status();
  }
  w->trainer_id = trainer_id;
  w->norms_step = step;
  // What DescribeWait reports: the pushes of `step` that are missing.
  w->min_version = st.ok() ? step + 1 : 0;  // step < INT64_MAX when ok
  Admit(std::move(st), w, std::move(done), generation);
}

absl::Status ParameterStore::AddBlockTargets(
    absl::Span<DenseTableBlock* const> blocks, double* norms_out,
    PullWaiter* w) const {
  for (size_t i = 0; i < blocks.size(); ++i) {
    DenseTableBlock* b = blocks[i];
    w->targets.push_back(PullTarget{
        b, {}, nullptr, norms_out != nullptr ? norms_out + 3 * i : nullptr});
    RETURN_IF_ERROR(state_.CheckServes(*b));
  }
  return absl::OkStatus();
}

void ParameterStore::Admit(absl::Status st, const WaiterPtr& w, PullDone done,
                           uint64_t generation) {
  if (st.ok() && state_.waiters.size() >= state_.max_waiting_pulls) {
    st = absl::ResourceExhaustedError(
        absl::StrCat(state_.waiters.size(),
                     " pulls wait on this pserver already, as many as ",
                     "this job's trainers can need at once; refused"));
  }
  if (!st.ok()) {
    ++state_.rejected;
    done(st, absl::ZeroDuration());
    return;
  }
  ++state_.pulls;
  w->done = std::move(done);
  w->start = state_.clock->Now();
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
    absl::ReaderMutexLock g(&state_.gate);
    st = state_.membership->CheckGeneration("pull", generation);
    if (st.ok()) {
      if (state_.staleness->PassOrHold(w)) w->pending.fetch_sub(1);
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
        if (!state_.sync || version >= w->min_version) {
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
    state_.waiters.Finish(w, st);
    return;
  }
  state_.waiters.Start(w);
}

void ParameterStore::Sweep(absl::Time now) {
  const absl::Duration timeout = state_.options.trainer_timeout;
  if (state_.is_ready() && timeout > absl::ZeroDuration() &&
      state_.membership->HasSilent(now, timeout)) {
    std::vector<WaiterPtr> released;
    {
      absl::MutexLock g(&state_.gate);
      if (state_.membership->DropSilent(now, timeout) > 0) {
        RecheckBarriers(&released);
      }
    }
    state_.ReleaseAll(released);
  }
  if (state_.is_ready() && state_.sync && timeout > absl::ZeroDuration()) {
    DropStalling(now, timeout);
  }
  std::vector<WaiterPtr> expired, to_report;
  state_.waiters.Scan(now, state_.options.max_pull_wait,
                      state_.options.report_after, &expired, &to_report);
  for (const WaiterPtr& w : to_report) {
    const std::string what = state_.DescribeWait(*w);
    if (what.empty()) continue;
    LOG(WARNING) << "pull from trainer " << w->trainer_id << " has waited "
                 << absl::FormatDuration(now - w->start) << " for " << what;
  }
  for (const WaiterPtr& w : expired) {
    const std::string what = state_.DescribeWait(*w);
    ++state_.pull_timeouts;
    LOG(WARNING) << "pull from trainer " << w->trainer_id << " timed out after "
                 << absl::FormatDuration(now - w->start) << " waiting for "
                 << what;
    state_.waiters.Finish(
        w, absl::DeadlineExceededError(absl::StrCat(
               "pserver waited ", absl::FormatDuration(now - w->start), " for ",
               what.empty() ? "the step" : what)));
  }
}

void ParameterStore::DropStalling(absl::Time now, absl::Duration timeout) {
  // Trainers that heartbeat but not their part of a step begun `timeout` ago
  // in a unit served here (not one a failover left: docs/replication.md).
  std::vector<int> missing;
  int64_t step = 0;
  for (BarrierUnit* u : state_.tables->units()) {
    absl::MutexLock l(&u->mu);
    if (u->barrier.assembling() && now - u->barrier.started() >= timeout &&
        state_.CheckServes(*u).ok()) {
      u->barrier.AppendMissing(&missing);
      step = u->barrier.version();
    }
  }
  if (missing.empty()) return;
  std::vector<WaiterPtr> released;
  {
    absl::MutexLock g(&state_.gate);
    bool dropped = false;
    for (int k : missing)
      dropped |= state_.membership->DropStalling(k, step, timeout);
    if (dropped) RecheckBarriers(&released);
  }
  state_.ReleaseAll(released);
}

// --- Test hooks ---

std::vector<float> ParameterStore::TEST_BlockValues(uint32_t table_id,
                                                    uint32_t block) const {
  if (!state_.is_ready()) return {};
  auto b = state_.tables->FindBlock(table_id, block);
  if (!b.ok()) return {};
  absl::MutexLock l(&(*b)->mu);
  return (*b)->value;
}

int64_t ParameterStore::TEST_BlockVersion(uint32_t table_id,
                                          uint32_t block) const {
  if (!state_.is_ready()) return -1;
  auto b = state_.tables->FindBlock(table_id, block);
  if (!b.ok()) return -1;
  absl::MutexLock l(&(*b)->mu);
  return (*b)->barrier.version();
}

}  // namespace shardps
