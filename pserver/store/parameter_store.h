#ifndef SHARDPS_PSERVER_STORE_PARAMETER_STORE_H_
#define SHARDPS_PSERVER_STORE_PARAMETER_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/clock.h"
#include "proto/ps_service.pb.h"
#include "pserver/store/job_tables.h"
#include "pserver/store/membership.h"
#include "pserver/store/memory_budget.h"
#include "pserver/store/pull_waiters.h"
#include "pserver/store/sparse_table.h"
#include "pserver/store/staleness_gate.h"
#include "pserver/store/table_snapshot.h"
#include "pserver/store/update_forwarder.h"

namespace shardps {

struct StoreOptions {
  // Trainers in the job; 0 takes the count from the chief's JobSpec.
  // Default: 0.
  int num_trainers = 0;
  // A sync step or a pull that has waited this long is logged with the ids
  // of the trainers it waits for. Default: 5 s.
  absl::Duration report_after = absl::Seconds(5);
  // A pull waits at most this long; then it is answered DEADLINE_EXCEEDED
  // with what it was waiting for, and the trainer retries. Default: 20 s.
  absl::Duration max_pull_wait = absl::Seconds(20);
  // A trainer that has registered and then says nothing (no heartbeat, pull
  // or push) for this long is dropped from the barrier, logged and counted;
  // the job goes on with the others. Zero: never. Default: 60 s.
  absl::Duration trainer_timeout = absl::Seconds(60);
  // Where the store reads the time (pull waits, when a trainer was last
  // heard from); must outlive the store. Default: the real clock.
  const Clock* clock = Clock::Real();
  // What a job's tables and optimizer state may hold on this pserver
  // (--max_memory_mb); a job that needs more is refused RESOURCE_EXHAUSTED.
  // 0: no limit. Default: 0. Ignored when `budget` is set.
  int64_t max_memory_bytes = 0;
  // The budget this store draws on, shared by every job of a pserver; must
  // outlive the store. Null: the store's own, of max_memory_bytes.
  MemoryBudget* budget = nullptr;
};

// Counters, cumulative since start.
struct StoreCounters {
  int64_t pushes = 0;
  int64_t block_updates = 0;  // optimizer applications to one unit
  int64_t duplicate_block_pushes = 0;
  int64_t rejected_requests = 0;
  int64_t pulls = 0;
  int64_t pull_timeouts = 0;
  int64_t dropped_trainers = 0;   // silent past trainer_timeout
  int64_t rejoined_trainers = 0;  // came back (restarted, or after a drop)
  int64_t late_block_pushes = 0;  // replicas_to_aggregate: after the step
  int64_t rollbacks = 0;          // Restore on a running job
};

// What Register tells a trainer.
struct RegisterResult {
  bool job_ready = false;
  // SYNC: the first step the store waits for this trainer's push.
  int64_t join_step = 0;
  uint64_t generation = 0;
};

// What one pserver holds of a job, and the orchestration of its parts
// (docs/architecture.md): the tables (JobTables: dense blocks and sparse
// tables, each a BarrierUnit with a StepBarrier), Membership, the async
// StalenessGate and the PullWaiters. Plain C++: no gRPC.
//
// Thread-safe. No lock covers the whole store on the push or pull path:
// pushes and pull registrations hold the gate shared and lock only the
// units they touch. What must see no push half-way through (a rejoin, a
// Leave, a drop, Snapshot, Restore) holds the gate exclusively. Lock order:
// gate_ -> init_mu_; gate_ -> Membership -> units in (table, block) order ->
// SparseTable stripes; StalenessGate and PullWaiters last, never while
// holding a unit.
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
                               std::vector<int> sparse_shards = {});
  // Initial values; ignored once the job is ready.
  absl::Status SetInitialValues(absl::Span<const BlockData> blocks);
  // Marks the job ready. FAILED_PRECONDITION if a block has no value yet.
  absl::Status CommitInit();

  bool ready() const { return ready_.load(std::memory_order_acquire); }
  // REQUIRES: ready().
  const JobSpec& job() const { return job_; }

  // Membership (Membership, docs/fault_tolerance.md). A rejoin waits for
  // the trainer from the step after the newest one held; ConfirmJoin moves
  // it to `start_step`, the largest join_step of all pservers.
  absl::StatusOr<RegisterResult> Register(int trainer_id, uint64_t incarnation,
                                          absl::Time now);
  absl::Status ConfirmJoin(int trainer_id, uint64_t incarnation,
                           int64_t start_step);
  absl::Status Heartbeat(int trainer_id, uint64_t incarnation, absl::Time now);
  absl::Status Leave(int trainer_id, uint64_t incarnation);
  // Trainers the barrier waits for (not dropped, not left).
  std::vector<int> LiveTrainers() const;
  // See Membership::CheckGeneration and CheckIncarnation.
  absl::Status CheckGeneration(absl::string_view what,
                               uint64_t generation) const;
  absl::Status CheckIncarnation(int trainer_id, uint64_t incarnation) const;

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

  // Replication (docs/replication.md). With a forwarder (set once, after
  // InitJob; it must outlive the store): pushes
  // and pulls of units this pserver is not the primary of are refused
  // FAILED_PRECONDITION; every update applied here is forwarded to the
  // unit's backups before the push is answered or a pull can see it; a
  // sync push for a step already applied is a duplicate (a trainer pushing
  // again after a failover).
  void set_forwarder(UpdateForwarder* forwarder);
  // A backup: applies its primary's updates in order; one this store holds
  // already (its version is below the unit's) is skipped. FAILED_PRECONDITION
  // for a gap, INVALID_ARGUMENT for an unknown unit or a wrong size;
  // the updates before it stay applied.
  absl::Status ApplyReplicated(const std::vector<AppliedUpdate>& updates);
  // A backup, ASYNC: the pushes its primary applied move their trainers'
  // clocks as they did there (PushRef.step). SYNC: nothing.
  void ReplicatedPushes(const std::vector<PushRef>& pushes);
  // A primary: the state of unit `unit` of table `table_id`: a dense
  // block as a one-block dense blob (table_snapshot.h), a sparse shard as
  // its version and rows (SparseTable::Serialize). REQUIRES: the caller
  // holds its lock (a push being forwarded).
  absl::StatusOr<std::string> UnitImageHeld(uint32_t table_id,
                                            uint32_t unit) const;
  // A joining backup: loads such an image (values, optimizer state,
  // version) and takes the job's timeline `generation`. DATA_LOSS for a
  // malformed image, NOT_FOUND for a unit not held here.
  absl::Status InstallUnit(uint32_t table_id, uint32_t unit,
                           const std::string& image, uint64_t generation);

  // The number of values of dense block (table_id, block) held here;
  // NOT_FOUND when there is none.
  absl::StatusOr<int64_t> BlockSize(uint32_t table_id, uint32_t block) const;
  // The row width of sparse table `table_id`; NOT_FOUND or INVALID_ARGUMENT
  // when there is no such sparse table.
  absl::StatusOr<int> SparseDim(uint32_t table_id) const;

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
            int64_t min_clock, absl::Span<const BlockId> blocks,
            absl::Span<const SparsePull> sparse, PullSink sink, PullDone done,
            uint64_t generation = kAnyGeneration, int64_t own_clock = 0);

  // SYNC, LARS (docs/tuning.md, "LARS"): the squared norms of step `step`
  // of each of `blocks`, three doubles per block into `out` (weights,
  // gradient, the step), once each has assembled the step; `out` must live
  // until `done`. Then ApplyTrust, with the norms of the whole table (the
  // square roots of the sums over every block of every pserver), applies
  // the step to the table's blocks held here and answers the pulls of the
  // next version. One call takes several tables, all or nothing: where one
  // table's blocks cannot take the ratio, no table's are changed. A
  // repeated ApplyTrust for the step applied is a no-op; INVALID_ARGUMENT
  // for a table without LARS, named twice, or norms that are negative or
  // not finite; FAILED_PRECONDITION for a step not assembled.
  void PullNorms(int trainer_id, int64_t step, absl::Span<const BlockId> blocks,
                 double* out, PullDone done,
                 uint64_t generation = kAnyGeneration);
  struct TableNorm {
    uint32_t table_id = 0;
    double weights = 0;   // the whole table's weights' norm
    double gradient = 0;  // and its gradient's
    // The blocks to apply, each held here once (NOT_FOUND, or
    // INVALID_ARGUMENT for one named twice); empty: every block of the
    // table held here.
    std::vector<uint32_t> blocks;
  };
  absl::Status ApplyTrust(int trainer_id, int64_t step,
                          absl::Span<const TableNorm> tables,
                          uint64_t generation = kAnyGeneration);
  // One table's (tests).
  absl::Status ApplyTrust(int trainer_id, int64_t step, uint32_t table_id,
                          double weights_norm, double gradient_norm,
                          uint64_t generation = kAnyGeneration) {
    const TableNorm t{table_id, weights_norm, gradient_norm, {}};
    return ApplyTrust(trainer_id, step, absl::MakeConstSpan(&t, 1), generation);
  }

  // Times out pulls past max_pull_wait, logs stalled steps, and drops
  // trainers silent past trainer_timeout. Called about once a second by the
  // server.
  void Sweep(absl::Time now);

  // Checkpoints. Snapshot copies everything this store holds while no push
  // runs. SYNC: every unit must be at version `step` (FAILED_PRECONDITION
  // otherwise: not a step boundary); ASYNC: whatever each unit holds now,
  // labelled `step`.
  absl::StatusOr<StoreSnapshot> Snapshot(int64_t step) const;
  // Loads a snapshot as timeline `generation`. On a store without a job it
  // creates the job from the snapshot and makes it ready (a pserver
  // restarting from its checkpoint). On a running job (a rollback) the job
  // and blocks must be the same; every waiting pull is answered ABORTED.
  // DataLoss for a malformed table blob, with nothing changed.
  absl::Status Restore(const StoreSnapshot& snapshot, uint64_t generation);
  // The timeline: bumped by every Restore, and the step it started from.
  uint64_t generation() const;
  int64_t base_step() const;

  // Answers every waiting pull with `status`, and every later pull that
  // would have to wait with UNAVAILABLE (shutdown).
  void CancelAllWaiters(const absl::Status& status);

  struct VersionRange {
    int64_t min = 0;
    int64_t max = 0;
  };
  VersionRange Versions() const;
  StoreCounters counters() const;
  // Pulls waiting now.
  size_t waiting_pulls() const { return waiters_.size(); }
  // Pulls the units' barriers hold, answered or not (tests).
  size_t TEST_HeldPulls() const;
  // Blocks until at least `n` pulls wait, or `timeout` passes (tests).
  bool WaitForWaitingPulls(size_t n, absl::Duration timeout) const {
    return waiters_.WaitForSize(n, timeout);
  }

  // Rows, memory and admission/eviction counters of each sparse table.
  struct SparseTableStats {
    std::string name;
    SparseCounters counters;
    size_t memory_bytes = 0;
  };
  std::vector<SparseTableStats> SparseStats() const;
  // Each table with units here, in table order, and the steps applied to
  // it: the most of its units' versions (a sync step, or an async push).
  struct TableProgress {
    std::string name;
    bool sparse = false;
    int64_t steps = 0;
  };
  std::vector<TableProgress> Progress() const;
  // What the dense blocks held here take: values, gradient sums and
  // optimizer state (0 before InitJob).
  int64_t dense_bytes() const;
  // The memory budget it draws on (--max_memory_mb), for what else a job
  // holds (shared regions).
  MemoryBudget* budget() const { return budget_; }
  size_t num_blocks() const;

  // Test hooks.
  std::vector<float> TEST_BlockValues(uint32_t table_id, uint32_t block) const;
  int64_t TEST_BlockVersion(uint32_t table_id, uint32_t block) const;

 private:
  absl::StatusOr<bool> InitJobLocked(const JobSpec& job,
                                     absl::Span<const BlockId> blocks,
                                     absl::Span<const int> sparse_shards = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(init_mu_);
  // FAILED_PRECONDITION before the job is ready; else Membership::Touch.
  absl::Status CheckReadyAndTrainer(int trainer_id) const;
  // The validated parts of a push: refused unless `step` >= 0.
  absl::Status CheckPushStart(int trainer_id, int64_t step) const;
  // ApplyTrust's norms checked (known tables, finite, each table and block
  // once, some block held here) and each table's blocks held here, in the
  // order of `tables`, into *units.
  absl::Status TrustUnits(absl::Span<const TableNorm> tables,
                          std::vector<std::vector<BarrierUnit*>>* units) const;
  // Applies a validated push (sorted, distinct units): the generation, then
  // every unit's admission, then the updates; counts the refusal.
  absl::Status ApplyPush(int trainer_id, int64_t step, uint64_t generation,
                         std::vector<PushPart> parts, int* late,
                         uint64_t request_id);
  absl::Status ApplyPushLocked(int trainer_id, int64_t step,
                               uint64_t generation,
                               const std::vector<PushPart>& parts, int* late,
                               uint64_t request_id,
                               std::vector<WaiterPtr>* ready)
      ABSL_SHARED_LOCKS_REQUIRED(gate_);
  // Forwards what `c` collected (with a forwarder; OK without).
  absl::Status ForwardCollected(const UpdateCollector& c, int trainer_id,
                                uint64_t request_id, int64_t step);
  // A unit held here: a dense block, or a sparse table's shard.
  absl::StatusOr<BarrierUnit*> FindUnit(uint32_t table_id, uint32_t unit) const;
  // With a forwarder: OK when this pserver is the primary of `unit`.
  absl::Status CheckServes(const BarrierUnit& unit) const;
  // Registers a pull's holds on the units and the staleness gate; answers
  // it at once when nothing holds it.
  void StartPull(const WaiterPtr& w, uint64_t generation);
  // Adds a target per dense block to *w (with `norms_out`, a norms pull's:
  // three doubles per block there); NOT_FOUND or FAILED_PRECONDITION for a
  // block not held or not served here.
  absl::Status AddBlockTargets(absl::Span<const BlockId> blocks,
                               double* norms_out, PullWaiter* w) const;
  // A pull set up with status `st`: refused (also when as many pulls wait
  // as the job's trainers can need at once), or counted and started.
  void Admit(absl::Status st, const WaiterPtr& w, PullDone done,
             uint64_t generation);
  // SYNC: applies every step that a membership change completed; ASYNC:
  // re-checks the pulls held by the staleness gate.
  void RecheckBarriers(std::vector<WaiterPtr>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_);
  int64_t MaxVersion() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_);
  // Answers the released pulls (outside every lock).
  void ReleaseAll(const std::vector<WaiterPtr>& ready);
  std::string DescribeWait(const PullWaiter& w) const;
  // Sweep: drops the trainers that hold a sync step back for `timeout`.
  void DropStalling(absl::Time now, absl::Duration timeout);
  // Restore's half that changes the store, after every blob was parsed.
  void RestoreLocked(const CheckpointInfo& info, bool running,
                     ParsedSnapshot parsed, uint64_t generation,
                     std::vector<WaiterPtr>* aborted,
                     absl::Status* sparse_error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_);

  const StoreOptions options_;
  const Clock* const clock_;

  // The gate (see the class comment).
  mutable absl::Mutex gate_;
  // What the tables hold, against --max_memory_mb (outlives tables_).
  MemoryBudget own_budget_;
  MemoryBudget* const budget_;
  // Set-up state. The tables, membership and gate below are created by
  // InitJob and fixed once ready_ is true; after that they are read without
  // init_mu_.
  mutable absl::Mutex init_mu_ ABSL_ACQUIRED_AFTER(gate_);
  std::atomic<bool> ready_{false};
  // Pulls that may wait at once: per trainer, one per chunk of the dense
  // blocks held here, and 16 more (set by InitJob).
  std::atomic<size_t> max_waiting_pulls_{0};
  bool initialized_ ABSL_GUARDED_BY(init_mu_) = false;
  std::vector<BlockId> init_blocks_ ABSL_GUARDED_BY(init_mu_);
  JobSpec job_;
  bool sync_ = true;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<JobTables> tables_;
  std::unique_ptr<StalenessGate> staleness_;
  // Set once (InitJob of a replicated job; after ready_ for a pserver that
  // restored its checkpoint and then rejoins).
  std::atomic<UpdateForwarder*> forwarder_{nullptr};

  PullWaiters waiters_;

  std::atomic<int64_t> pushes_{0}, updates_{0}, duplicates_{0}, rejected_{0},
      pulls_{0}, pull_timeouts_{0}, late_{0}, rollbacks_{0};
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_PARAMETER_STORE_H_
