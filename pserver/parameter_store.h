#ifndef SHARDPS_PSERVER_PARAMETER_STORE_H_
#define SHARDPS_PSERVER_PARAMETER_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/ps_service.pb.h"
#include "pserver/optimizer.h"
#include "pserver/sparse_table.h"

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
};

// A request's generation that is not checked (tests, in-process callers).
inline constexpr uint64_t kAnyGeneration = ~uint64_t{0};

// What one pserver holds, for a checkpoint: `info` (the job, the step, the
// timeline, the async clocks) and one blob per table, named
// "table-<id>.bin".
struct StoreSnapshot {
  CheckpointInfo info;
  std::vector<std::pair<std::string, std::string>> files;  // name, bytes
};

// Gradient or value for one block, as a view into the request.
struct BlockData {
  uint32_t table_id = 0;
  uint32_t block = 0;
  absl::Span<const float> values;
};

struct BlockId {
  uint32_t table_id = 0;
  uint32_t block = 0;
};

// One chunk of a trainer's gradients for a sparse table, as views into the
// request: keys.size() rows of the table's dim floats.
struct SparseGrads {
  uint32_t table_id = 0;
  absl::Span<const uint64_t> keys;
  absl::Span<const float> grads;
  // SYNC: how many chunks of this table the trainer sends this pserver for
  // the step (every chunk carries the same count; an empty chunk counts).
  int32_t num_chunks = 1;
};

// The rows of `keys` that a pull wants, written to `out` (keys.size() * dim
// floats, owned by the caller until the pull is done).
struct SparsePull {
  uint32_t table_id = 0;
  absl::Span<const uint64_t> keys;
  float* out = nullptr;
};

// Receives each pulled block, under that block's lock.
using PullSink =
    std::function<void(uint32_t table_id, uint32_t block, int64_t version,
                       absl::Span<const float> values)>;
// Called once when a pull ends: OK after every block went to the sink.
using PullDone =
    std::function<void(absl::Status status, absl::Duration waited)>;

// Counters, cumulative since start.
struct StoreCounters {
  int64_t pushes = 0;
  int64_t block_updates = 0;  // optimizer applications to one block
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

// The dense tables that one pserver holds, with their optimizer state, the
// per-block sync barrier and the pulls that wait on it. Plain C++: no gRPC.
// Locking is per block; no lock covers the whole store on the push or pull
// path. Thread-safe.
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
  absl::StatusOr<bool> InitJob(const JobSpec& job,
                               absl::Span<const BlockId> blocks);
  // Initial values; ignored once the job is ready.
  absl::Status SetInitialValues(absl::Span<const BlockData> blocks);
  // Marks the job ready. FAILED_PRECONDITION if a block has no value yet.
  absl::Status CommitInit();

  bool ready() const { return ready_.load(std::memory_order_acquire); }
  // REQUIRES: ready().
  const JobSpec& job() const { return job_; }

  // Membership (docs/fault_tolerance.md). Every trainer of the job is
  // expected from step 0 (or the restored step) until it leaves or is
  // dropped. Register by a trainer the store knows under another
  // incarnation, or one that was dropped or left, is a rejoin: the store
  // waits for it from the step after the newest one it holds (join_step).
  // ConfirmJoin then moves that step to `start_step`, the largest join_step
  // of all pservers. Heartbeat keeps a trainer alive; a stale incarnation
  // or a dropped trainer is told so with FAILED_PRECONDITION. Leave takes a
  // trainer out of the barrier at once.
  absl::StatusOr<RegisterResult> Register(int trainer_id, uint64_t incarnation,
                                          absl::Time now);
  absl::Status ConfirmJoin(int trainer_id, uint64_t incarnation,
                           int64_t start_step);
  absl::Status Heartbeat(int trainer_id, uint64_t incarnation, absl::Time now);
  absl::Status Leave(int trainer_id, uint64_t incarnation);
  // Trainers the barrier waits for (not dropped, not left).
  std::vector<int> LiveTrainers() const;
  // SYNC: ABORTED, naming `what` ("push", "pull", "checkpoint"), when
  // `generation` is neither kAnyGeneration nor the store's. A caller that
  // must not race a rollback checks it under a block lock, or, like the
  // service's checkpoint handler, under its own rollback lock.
  absl::Status CheckGeneration(absl::string_view what,
                               uint64_t generation) const;
  // FAILED_PRECONDITION when `incarnation` is not 0 and trainer
  // `trainer_id` is now known under another one: a process replaced by a
  // restarted one must not push or pull for it.
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
  absl::Status Push(int trainer_id, int64_t step,
                    absl::Span<const BlockData> grads,
                    uint64_t generation = kAnyGeneration,
                    int* late_blocks = nullptr);

  // Applies one trainer's gradients of sparse tables for `step`, all or
  // nothing, after validating the whole request (table, lengths, finite
  // values, distinct keys, step). SYNC: accumulated per key; once every
  // trainer has sent all its chunks of a table for the step, each key gets
  // the mean over the trainers that pushed it and the table's version moves
  // on. A repeated chunk beyond a trainer's count is ignored. ASYNC: applied
  // on arrival under per-stripe locks.
  absl::Status PushSparse(int trainer_id, int64_t step,
                          absl::Span<const SparseGrads> rows,
                          uint64_t generation = kAnyGeneration);

  // The number of values of dense block (table_id, block) held here;
  // NOT_FOUND when there is none.
  absl::StatusOr<int64_t> BlockSize(uint32_t table_id, uint32_t block) const;

  // The row width of sparse table `table_id`; NOT_FOUND or INVALID_ARGUMENT
  // when there is no such sparse table.
  absl::StatusOr<int> SparseDim(uint32_t table_id) const;

  // Answers once every block has applied `min_version` updates and, in
  // ASYNC mode, (with max_staleness >= 0) step minus the slowest trainer's
  // step is at most max_staleness, and every trainer has pushed `min_clock`
  // steps (the end-of-training evaluation waits for all with it). `sink`
  // and `done` may run on this thread or on a pushing thread.
  // Sparse tables wait for their own version in the same way, and their
  // rows are written to each SparsePull's `out` before `done`.
  // SYNC: a `generation` other than the store's is answered ABORTED, and so
  // is a waiting pull when the store is rolled back.
  void Pull(int trainer_id, int64_t min_version, int64_t step,
            int64_t min_clock, absl::Span<const BlockId> blocks,
            absl::Span<const SparsePull> sparse, PullSink sink, PullDone done,
            uint64_t generation = kAnyGeneration);

  // Times out pulls past max_pull_wait, logs stalled steps, and drops
  // trainers silent past trainer_timeout. Called about once a second by the
  // server.
  void Sweep(absl::Time now);

  // Checkpoints. Snapshot copies everything this store holds under every
  // block lock. SYNC: every block and sparse table must be at version
  // `step` (FAILED_PRECONDITION otherwise: not a step boundary); ASYNC:
  // whatever each block holds now, labelled `step`.
  absl::StatusOr<StoreSnapshot> Snapshot(int64_t step) const;
  // Loads a snapshot as timeline `generation`. On a store without a job it
  // creates the job from the snapshot and makes it ready (a pserver
  // restarting from its checkpoint). On a running job (a rollback) the job
  // and blocks must be the same; every waiting pull is answered ABORTED.
  // DataLoss for a malformed table blob.
  absl::Status Restore(const StoreSnapshot& snapshot, uint64_t generation);
  // The timeline: bumped by every Restore, and the step it started from.
  uint64_t generation() const { return generation_.load(); }
  int64_t base_step() const { return base_step_.load(); }

  // Answers every waiting pull with `status`, and every later pull that
  // would have to wait with UNAVAILABLE (shutdown).
  void CancelAllWaiters(const absl::Status& status);

  struct VersionRange {
    int64_t min = 0;
    int64_t max = 0;
  };
  VersionRange Versions() const;
  StoreCounters counters() const;

  // Rows, memory and admission/eviction counters of each sparse table.
  struct SparseTableStats {
    std::string name;
    SparseCounters counters;
    size_t memory_bytes = 0;
  };
  std::vector<SparseTableStats> SparseStats() const;
  size_t num_blocks() const;

  // Test hooks.
  std::vector<float> TEST_BlockValues(uint32_t table_id, uint32_t block) const;
  int64_t TEST_BlockVersion(uint32_t table_id, uint32_t block) const;

 private:
  struct Waiter;
  struct Block;
  // The step state of a sparse table: its version and, in SYNC mode, which
  // trainers have sent all their chunks of the step being assembled.
  struct SparseStep {
    absl::Mutex mu;
    int64_t version ABSL_GUARDED_BY(mu) = 0;
    std::vector<int32_t> expected ABSL_GUARDED_BY(mu);  // per trainer; 0: none
    std::vector<int32_t> received ABSL_GUARDED_BY(mu);
    std::vector<uint8_t> done ABSL_GUARDED_BY(mu);  // sent all its chunks
    int trainers_done ABSL_GUARDED_BY(mu) = 0;
    absl::Time first_push ABSL_GUARDED_BY(mu);
    int64_t last_evict_step ABSL_GUARDED_BY(mu) = 0;
    std::vector<std::pair<int64_t, std::shared_ptr<Waiter>>> waiters
        ABSL_GUARDED_BY(mu);
  };
  struct Table {
    TableSpec spec;
    int64_t num_values = 0;
    std::unique_ptr<Optimizer> optimizer;
    absl::flat_hash_map<uint32_t, std::unique_ptr<Block>> blocks;
    std::unique_ptr<SparseTable> sparse;  // SPARSE tables only
    std::unique_ptr<SparseStep> sparse_step;
  };

  // Membership of one trainer.
  enum class MemberState : uint8_t { kExpected, kActive, kDropped, kLeft };
  struct Member {
    MemberState state = MemberState::kExpected;
    uint64_t incarnation = 0;
  };

  // INVALID_ARGUMENT unless 0 <= trainer_id < the job's trainer count.
  absl::Status CheckTrainerId(int trainer_id) const;
  absl::Status CheckReadyAndTrainer(int trainer_id) const;
  // Copies members_[k] into active_incarnation_[k].
  void PublishMemberLocked(int k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(members_mu_);
  // Register's work under members_mu_.
  void RegisterLocked(int trainer_id, uint64_t incarnation, absl::Time now,
                      RegisterResult* out, bool* rejoined)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(members_mu_);
  // SYNC: whether a block (or sparse table) at `version`, with `pushed`
  // marking the trainers that pushed, has what it needs to apply.
  bool StepComplete(const std::vector<uint8_t>& done, int num_done,
                    int64_t version) const;
  // SYNC: applies every block and sparse table step that membership changes
  // have completed; ASYNC: re-checks the pulls held by the staleness gate.
  void RecheckBarriers();
  // Applies the sparse step being assembled and collects the pulls it
  // satisfies. REQUIRES: ss.mu held.
  void ApplySparseStep(Table& t, SparseStep& ss,
                       std::vector<std::shared_ptr<Waiter>>* ready);
  // Collects the waiters of `b` satisfied by its version. REQUIRES: b->mu.
  static void TakeReadyWaiters(Block* b,
                               std::vector<std::shared_ptr<Waiter>>* ready);
  // Locks every block and sparse step, in the order Push uses.
  void LockAll() const;
  void UnlockAll() const;
  // REQUIRES: LockAll held.
  int64_t MaxVersionLocked() const;
  absl::StatusOr<Block*> FindBlock(uint32_t table_id, uint32_t block) const;
  // Applies a complete sync step or an async update to `b`.
  // REQUIRES: b->mu held.
  void ApplyUpdate(const Table& t, Block* b, int64_t step, float scale,
                   absl::Span<const float> grad);
  // ASYNC: trainer `trainer_id` has pushed `step`; releases the pulls that
  // waited for it.
  void AdvanceClock(int trainer_id, int64_t step);
  // Releases one pending unit of `w`; completes it at zero.
  void Release(const std::shared_ptr<Waiter>& w);
  void Complete(const std::shared_ptr<Waiter>& w);
  void Finish(const std::shared_ptr<Waiter>& w, absl::Status status);
  std::string DescribeWait(const Waiter& w) const;
  // ASYNC: the staleness bound and min_clock allow the pull `w`.
  bool ClockGateOk(const Waiter& w) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(clock_mu_);
  // ASYNC: removes and returns the pulls the staleness gate now lets go.
  std::vector<std::shared_ptr<Waiter>> TakeClockReady()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(clock_mu_);

  const StoreOptions options_;

  // Set-up state. Tables and blocks are fixed once ready_ is true; after
  // that they are read without init_mu_.
  mutable absl::Mutex init_mu_;
  std::atomic<bool> ready_{false};
  bool initialized_ ABSL_GUARDED_BY(init_mu_) = false;
  JobSpec job_;
  std::vector<BlockId> init_blocks_ ABSL_GUARDED_BY(init_mu_);
  std::vector<Table> tables_;
  std::vector<Block*> all_blocks_;  // sorted by (table, block)
  int num_trainers_ = 0;
  int quorum_ = 0;  // replicas_to_aggregate; 0: every live trainer
  bool sync_ = true;

  // Membership. required_from_[k]: the first version whose step waits for
  // trainer k (INT64_MAX when it was dropped or left); read without a lock
  // on the push path, written under members_mu_ (and, for a rejoin, every
  // block lock). last_seen_us_[k]: its last word, Unix microseconds.
  mutable absl::Mutex members_mu_;
  std::vector<Member> members_ ABSL_GUARDED_BY(members_mu_);
  std::unique_ptr<std::atomic<int64_t>[]> required_from_;
  std::unique_ptr<std::atomic<int64_t>[]> last_seen_us_;
  // active_incarnation_[k]: trainer k's incarnation while it is active and
  // known, else 0; a lock-free copy of members_ for CheckIncarnation.
  std::unique_ptr<std::atomic<uint64_t>[]> active_incarnation_;

  // The timeline (see generation()); written under LockAll.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> base_step_{0};

  // ASYNC staleness: each trainer's clock (steps pushed) and the pulls that
  // wait for the slowest one.
  mutable absl::Mutex clock_mu_;
  std::vector<int64_t> clocks_ ABSL_GUARDED_BY(clock_mu_);
  std::vector<std::shared_ptr<Waiter>> stale_waiters_
      ABSL_GUARDED_BY(clock_mu_);

  // Pulls that wait, for time-outs, reports and shutdown. A pull that can be
  // answered at once never takes this lock.
  mutable absl::Mutex waiters_mu_;
  absl::flat_hash_set<std::shared_ptr<Waiter>> waiters_
      ABSL_GUARDED_BY(waiters_mu_);
  bool closed_ ABSL_GUARDED_BY(waiters_mu_) = false;

  std::atomic<int64_t> pushes_{0}, block_updates_{0},
      duplicate_block_pushes_{0}, rejected_{0}, pulls_{0}, pull_timeouts_{0},
      dropped_{0}, rejoined_{0}, late_{0}, rollbacks_{0};
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_PARAMETER_STORE_H_
