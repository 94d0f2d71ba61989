#ifndef SHARDPS_PSERVER_STORE_PARAMETER_STORE_H_
#define SHARDPS_PSERVER_STORE_PARAMETER_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/ps_service.pb.h"
#include "pserver/store/job_tables.h"
#include "pserver/store/sparse/sparse_table.h"
#include "pserver/store/step/pull_waiters.h"
#include "pserver/store/store_state.h"
#include "pserver/store/trust_step.h"

namespace shardps {

// What Register tells a trainer.
struct RegisterResult {
  bool job_ready = false;
  // SYNC: the first step the store waits for this trainer's push.
  int64_t join_step = 0;
  uint64_t generation = 0;
};

// What one pserver holds of a job, and the orchestration of its parts
// (docs/architecture.md): the job's state (StoreState: the tables, dense
// blocks and sparse tables, each a BarrierUnit with a StepBarrier;
// Membership, the async StalenessGate and the PullWaiters) and the push,
// pull and membership paths over it. LARS's table norms are the TrustStep
// part (trust()); above the store, StoreSnapshots (pserver/checkpoint/)
// and ReplicatedUnits (pserver/replication/) work on its state(). Plain
// C++: no gRPC. Thread-safe; the locks are StoreState's.
class ParameterStore {
 public:
  explicit ParameterStore(StoreOptions options);
  // Answers every waiting pull with UNAVAILABLE.
  ~ParameterStore();

  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  // Job set-up, from the chief. InitJob with the spec and the blocks placed
  // here; returns true when the job is ready already (same spec: a no-op).
  // A different spec for an existing job is FAILED_PRECONDITION.
  // With replication, `sparse_shards`: the shards of each sparse table held
  // here (JobTables::Create).
  absl::StatusOr<bool> InitJob(const JobSpec& job,
                               absl::Span<const BlockId> blocks,
                               std::vector<int> sparse_shards = {}) {
    return state_.InitJob(job, blocks, sparse_shards);
  }
  // Initial values; ignored once the job is ready.
  absl::Status SetInitialValues(absl::Span<const BlockData> blocks) {
    return state_.SetInitialValues(blocks);
  }
  // Marks the job ready. FAILED_PRECONDITION if a block has no value yet.
  absl::Status CommitInit() { return state_.CommitInit(); }

  bool ready() const { return state_.is_ready(); }
  // REQUIRES: ready().
  const JobSpec& job() const { return state_.job; }

  // Membership (Membership, docs/fault_tolerance.md). A rejoin waits for
  // the trainer from the step after the newest one held; ConfirmJoin moves
  // it to `start_step`, the largest join_step of all pservers.
  absl::StatusOr<RegisterResult> Register(int trainer_id, uint64_t incarnation,
                                          absl::Time now);
  absl::Status ConfirmJoin(int trainer_id, uint64_t incarnation,
                           int64_t start_step);
  absl::Status Heartbeat(int trainer_id, uint64_t incarnation, absl::Time now) {
    if (!ready()) return absl::OkStatus();
    return state_.membership->Heartbeat(trainer_id, incarnation, now);
  }
  absl::Status Leave(int trainer_id, uint64_t incarnation);
  // Trainers the barrier waits for (not dropped, not left).
  std::vector<int> LiveTrainers() const {
    return ready() ? state_.membership->LiveTrainers() : std::vector<int>{};
  }
  // See Membership::CheckGeneration and CheckIncarnation.
  absl::Status CheckGeneration(absl::string_view what,
                               uint64_t generation) const {
    if (!ready()) return absl::OkStatus();
    return state_.membership->CheckGeneration(what, generation);
  }
  absl::Status CheckIncarnation(int trainer_id, uint64_t incarnation) const {
    if (!ready()) return absl::OkStatus();
    return state_.membership->CheckIncarnation(trainer_id, incarnation);
  }

  // Applies one trainer's gradients for `step`, all or nothing: the whole
  // request is validated first (trainer id, table, block, length, finite
  // values, step) and refused with a status naming the problem.
  // SYNC: accumulates per block; the block applies the mean of the pushes
  // once every live trainer has pushed it for the step (or, with the job's
  // replicas_to_aggregate = K, once K have). A repeated (trainer, step) is
  // ignored. With K, a push for an applied step is dropped and counted in
  // *late_blocks instead of refused. A `generation` other than the store's
  // is ABORTED (the job was rolled back). ASYNC: applied on arrival.
  // `request_id` names the push to the backups of a replicated job.
  absl::Status Push(int trainer_id, int64_t step,
                    absl::Span<const BlockData> grads,
                    uint64_t generation = kAnyGeneration,
                    int* late_blocks = nullptr, uint64_t request_id = 0);

  // Applies one trainer's gradients of sparse tables for `step`, all or
  // nothing, after validating the whole request (table, lengths, finite
  // values, distinct keys, step). SYNC: accumulated per key; once every
  // trainer has sent all its chunks of a table for the step, each key gets
  // the mean over the trainers that pushed it and the table's version moves
  // on. A repeated chunk beyond a trainer's count is ignored. ASYNC: applied
  // on arrival under per-stripe locks.
  absl::Status PushSparse(int trainer_id, int64_t step,
                          absl::Span<const SparseGrads> rows,
                          uint64_t generation = kAnyGeneration,
                          uint64_t request_id = 0);

  // Answers once every unit has applied `min_version` updates (SYNC; ASYNC
  // pulls do not wait on versions) and, in ASYNC mode, (with max_staleness
  // >= 0) step minus the slowest trainer's step is at most max_staleness,
  // and every trainer has pushed `min_clock` steps (the end-of-training
  // evaluation waits for all with it), and this trainer `own_clock` steps
  // (its pull sent with its push). Dense blocks go to `sink`; sparse
  // rows are written to each SparsePull's `out` before `done`. `sink` and
  // `done` may run on this thread or on a pushing thread. SYNC: a
  // `generation` other than the store's is answered ABORTED, and so is a
  // waiting pull when the store is rolled back.
  void Pull(int trainer_id, int64_t min_version, int64_t step,
            int64_t min_clock, absl::Span<DenseTableBlock* const> blocks,
            absl::Span<const SparsePull> sparse, PullSink sink, PullDone done,
            uint64_t generation = kAnyGeneration, int64_t own_clock = 0);

  // SYNC, LARS (docs/tuning.md, "LARS"): the squared norms of step `step`
  // of each of `blocks`, three doubles per block into `out` (weights,
  // gradient, the step), once each has assembled the step; `out` must live
  // until `done`. Then trust().Apply, with the norms of the whole table,
  // applies the step.
  void PullNorms(int trainer_id, int64_t step, absl::Span<const BlockId> blocks,
                 double* out, PullDone done,
                 uint64_t generation = kAnyGeneration);
  // LARS's table norms applied.
  TrustStep& trust() { return trust_; }

  // Times out pulls past max_pull_wait, logs stalled steps, and drops
  // trainers silent past trainer_timeout. Called about once a second by the
  // server.
  void Sweep(absl::Time now);

  // The job's state, for the parts above the store (StoreSnapshots,
  // ReplicatedUnits).
  StoreState* state() { return &state_; }
  // The timeline: bumped by every Restore, and the step it started from.
  uint64_t generation() const {
    return ready() ? state_.membership->generation() : 0;
  }
  int64_t base_step() const {
    return ready() ? state_.membership->base_step() : 0;
  }

  // Answers every waiting pull with `status`, and every later pull that
  // would have to wait with UNAVAILABLE (shutdown).
  void CancelAllWaiters(const absl::Status& status) {
    state_.waiters.Close(status);
  }

  // Reports (JobTables), empty before the job is ready.
  using VersionRange = ::shardps::VersionRange;
  VersionRange Versions() const {
    return ready() ? state_.tables->Versions() : VersionRange{};
  }
  StoreCounters counters() const { return state_.counters(); }
  // Pulls waiting now.
  size_t waiting_pulls() const { return state_.waiters.size(); }
  // Pulls the units' barriers hold, answered or not (tests).
  size_t TEST_HeldPulls() const {
    return ready() ? state_.tables->HeldPulls() : 0;
  }
  // Blocks until at least `n` pulls wait, or `timeout` passes (tests).
  bool WaitForWaitingPulls(size_t n, absl::Duration timeout) const {
    return state_.waiters.WaitForSize(n, timeout);
  }

  using SparseTableStats = ::shardps::SparseTableStats;
  std::vector<SparseTableStats> SparseStats() const {
    return ready() ? state_.tables->SparseStats()
                   : std::vector<SparseTableStats>{};
  }
  using TableProgress = ::shardps::TableProgress;
  std::vector<TableProgress> Progress() const {
    return ready() ? state_.tables->Progress() : std::vector<TableProgress>{};
  }
  // What the dense blocks held here take: values, gradient sums and
  // optimizer state (0 before InitJob).
  int64_t dense_bytes() const { return ready() ? state_.tables->bytes() : 0; }
  // The memory budget it draws on (--max_memory_mb), for what else a job
  // holds (shared regions).
  MemoryBudget* budget() const { return state_.budget; }
  size_t num_blocks() const { return state_.num_blocks(); }

  // Test hooks.
  std::vector<float> TEST_BlockValues(uint32_t table_id, uint32_t block) const;
  int64_t TEST_BlockVersion(uint32_t table_id, uint32_t block) const;

 private:
  // The validated parts of a push: refused unless `step` >= 0.
  absl::Status CheckPushStart(int trainer_id, int64_t step) const;
  // Applies a validated push (sorted, distinct units): the generation, then
  // every unit's admission, then the updates; counts the refusal.
  absl::Status ApplyPush(int trainer_id, int64_t step, uint64_t generation,
                         std::vector<PushPart> parts, int* late,
                         uint64_t request_id);
  // Under the units' locks; the updates to forward go to *applied.
  absl::Status ApplyPushLocked(int trainer_id, int64_t step,
                               uint64_t generation,
                               const std::vector<PushPart>& parts, int* late,
                               std::vector<WaiterPtr>* ready,
                               AppliedUpdates* applied)
      ABSL_SHARED_LOCKS_REQUIRED(state_.gate);
  // Registers a pull's holds on the units and the staleness gate; answers
  // it at once when nothing holds it.
  void StartPull(const WaiterPtr& w, uint64_t generation);
  // Adds a target per dense block to *w (with `norms_out`, a norms pull's:
  // three doubles per block there); NOT_FOUND or FAILED_PRECONDITION for a
  // block not held or not served here.
  absl::Status AddBlockTargets(absl::Span<DenseTableBlock* const> blocks,
                               double* norms_out, PullWaiter* w) const;
  // A pull set up with status `st`: refused (also when as many pulls wait
  // as the job's trainers can need at once), or counted and started.
  void Admit(absl::Status st, const WaiterPtr& w, PullDone done,
             uint64_t generation);
  // SYNC: applies every step that a membership change completed; ASYNC:
  // re-checks the pulls held by the staleness gate.
  void RecheckBarriers(std::vector<WaiterPtr>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_.gate);
  // Sweep: drops the trainers that hold a sync step back for `timeout`.
  void DropStalling(absl::Time now, absl::Duration timeout);

  StoreState state_;
  TrustStep trust_{&state_};
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_PARAMETER_STORE_H_
