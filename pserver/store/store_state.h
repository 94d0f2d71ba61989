#ifndef SHARDPS_PSERVER_STORE_STORE_STATE_H_
#define SHARDPS_PSERVER_STORE_STORE_STATE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/clock.h"
#include "proto/ps_service.pb.h"
#include "pserver/store/job_tables.h"
#include "pserver/store/memory/memory_budget.h"
#include "pserver/store/step/membership.h"
#include "pserver/store/step/pull_waiters.h"
#include "pserver/store/step/staleness_gate.h"
#include "pserver/store/step/update_forwarder.h"

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
  // The budget this store draws on (a job's, within the pserver's), kept
  // alive by whatever still counts in it: a shared region can outlive its
  // job. Null: the store's own, of max_memory_bytes.
  std::shared_ptr<MemoryBudget> budget;
  // The most value bytes one pull's reply carries (the transport's chunk,
  // kMaxChunkBytes, which the service sets): a job's waiting pulls are
  // bounded by the replies its trainers' pulls of every table take.
  // Default: 4 MiB.
  size_t pull_reply_bytes = size_t{4} << 20;
  // Where sparse tables with a disk tier keep their rows (a directory of
  // this process, --sparse_store_dir's pserver-<pid>). Empty: such tables
  // are refused. Default: empty.
  std::string sparse_store_dir;
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

// FAILED_PRECONDITION: the job is not initialised here yet.
absl::Status NotReadyError();

// One job's state on one pserver, which the parts of its store share
// (ParameterStore, TrustStep; above the store, StoreSnapshots and
// ReplicatedUnits): the spec, the tables, membership, the async staleness
// gate and the pull waiters, created by InitJob and fixed once `ready`;
// the gate; the counters; and the checks every part makes. A struct: the
// parts read its fields directly, under the locks the fields name.
//
// The gate: no lock covers the whole store on the push or pull path:
// pushes and pull registrations hold the gate shared and lock only the
// units they touch. What must see no push half-way through (a rejoin, a
// Leave, a drop, a snapshot, a restore) holds the gate exclusively. Lock
// order: gate -> init_mu; gate -> Membership -> units in (table, block)
// order -> SparseTable stripes; StalenessGate and PullWaiters last, never
// while holding a unit.
struct StoreState {
  explicit StoreState(StoreOptions options);

  StoreState(const StoreState&) = delete;
  StoreState& operator=(const StoreState&) = delete;

  // Job set-up, from the chief (ParameterStore::InitJob, SetInitialValues,
  // CommitInit) or from a checkpoint (StoreSnapshots::Restore).
  absl::StatusOr<bool> InitJob(const JobSpec& job,
                               absl::Span<const BlockId> blocks,
                               absl::Span<const int> sparse_shards);
  absl::Status SetInitialValues(absl::Span<const BlockData> blocks);
  absl::Status CommitInit();
  // The blocks InitJob placed here.
  size_t num_blocks() const;
  // Takes `p` as this pserver's place in the job when none is known (a
  // `p` with num_servers 0 changes nothing). FAILED_PRECONDITION, naming
  // both, when another one is: a pserver restored from shard 1 of 2 must
  // not serve as shard 2 of 3, where it holds other blocks and keys.
  absl::Status AdoptPlacement(const ShardPlacement& p);
  ShardPlacement current_placement() const;

  bool is_ready() const { return ready.load(std::memory_order_acquire); }
  // FAILED_PRECONDITION before the job is ready; else Membership::Touch.
  absl::Status CheckReadyAndTrainer(int trainer_id) const;
  // With a forwarder: OK when this pserver is the primary of `unit`.
  absl::Status CheckServes(const BarrierUnit& unit) const;
  // A unit held here: a dense block, or a sparse table's shard.
  absl::StatusOr<BarrierUnit*> FindUnit(uint32_t table_id, uint32_t unit) const;
  // Forwards the updates a push applied (`applied`, returned by the units'
  // apply steps; their locks released), as the updates of the push of
  // (`trainer_id`, `request_id`, `step`) (trainer_id < 0: of no push), to
  // the backups; `applied` settles the units when it goes. OK when there
  // are none.
  absl::Status Forward(const AppliedUpdates& applied, int trainer_id,
                       uint64_t request_id, int64_t step);
  // A request's dense blocks, found once, in the order of `ids`: NOT_FOUND
  // for one this pserver does not hold (FAILED_PRECONDITION before the job
  // is ready). The request's handler sizes, decodes and places values by
  // them and hands them on with its push (BlockData::unit) or pull
  // (ParameterStore::Pull), which find nothing again.
  // A failure counts as a refused request.
  absl::StatusOr<std::vector<DenseTableBlock*>> ResolveBlocks(
      absl::Span<const BlockId> ids);
  // The shard of sparse table `table_id` that a request's rows name
  // (`shard`: SparseGrads::shard), found once, as ResolveBlocks (its width:
  // rows().dim()); INVALID_ARGUMENT for a dense table.
  absl::StatusOr<SparseShard*> ResolveSparse(uint32_t table_id, int shard);

  // What pull `w` waits for, for the log and its DEADLINE_EXCEEDED: the
  // pushes missing from the step, the staleness gate's reason; empty when
  // nothing is known.
  std::string DescribeWait(const PullWaiter& w) const;
  // The counters, and membership's.
  StoreCounters counters() const;
  // Answers the released pulls (outside every lock).
  void ReleaseAll(const std::vector<WaiterPtr>& released);

  const StoreOptions options;
  const Clock* const clock;

  mutable absl::Mutex gate;
  // What the tables hold, against --max_memory_mb (outlives tables).
  const std::shared_ptr<MemoryBudget> shared_budget;
  MemoryBudget* const budget;  // shared_budget.get()

  // Set-up state. The job, tables, membership and staleness gate below are
  // created by InitJob and fixed once `ready` is true; after that they are
  // read without init_mu.
  mutable absl::Mutex init_mu ABSL_ACQUIRED_AFTER(gate);
  std::atomic<bool> ready{false};
  bool initialized ABSL_GUARDED_BY(init_mu) = false;
  std::vector<BlockId> init_blocks ABSL_GUARDED_BY(init_mu);
  // Which shard of the job this pserver holds, from the chief's InitJob or
  // the checkpoint it was restored from; num_servers 0 while unknown.
  ShardPlacement placement ABSL_GUARDED_BY(init_mu);
  JobSpec job;
  bool sync = true;
  std::unique_ptr<Membership> membership;
  std::unique_ptr<JobTables> tables;
  std::unique_ptr<StalenessGate> staleness;
  // Set once (a replicated job, ReplicatedUnits), after InitJob.
  std::atomic<UpdateForwarder*> forwarder{nullptr};

  PullWaiters waiters;
  // Pulls that may wait at once: per trainer, one per chunk of the dense
  // blocks held here, and 16 more (set by InitJob).
  std::atomic<size_t> max_waiting_pulls{0};

  // StoreCounters, cumulative since start.
  std::atomic<int64_t> pushes{0}, updates{0}, duplicates{0}, rejected{0},
      pulls{0}, pull_timeouts{0}, late{0}, rollbacks{0};
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_STORE_STATE_H_
