#ifndef SHARDPS_PSERVER_SERVER_PSERVER_H_
#define SHARDPS_PSERVER_SERVER_PSERVER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/storage/env.h"
#include "pserver/checkpoint/checkpointer.h"
#include "pserver/replication/replica_set.h"
#include "pserver/service/request_handler.h"
#include "pserver/store/memory/memory_budget.h"
#include "pserver/store/parameter_store.h"

namespace shardps {

struct PserverOptions {
  // Passed to each job's store (trainer count, wait limits, clock); its
  // max_memory_bytes bounds all jobs together.
  StoreOptions store;
  // How often the stores are swept for stalled pulls and silent trainers,
  // and idle jobs freed. Default: 1 s.
  absl::Duration sweep_interval = absl::Seconds(1);
  // Where checkpoints go (docs/fault_tolerance.md), a folder per job:
  // <checkpoint_dir>/<job>/. Start loads each job's newest complete one.
  // Empty: no checkpoints. Default: empty.
  std::string checkpoint_dir;
  // A job checkpoint of any number of pservers (--restore_from): a job with
  // no checkpoint in checkpoint_dir starts from there at its chief's
  // InitJob, resharded onto this pserver's place (StartRestore). Empty:
  // none. Default: empty.
  std::string restore_from;
  // A folder every pserver of the job writes under (a shared mount), with
  // checkpoint_dir inside it (--shared_checkpoint_root): the pserver that
  // completes a step writes the step's job manifest there
  // (UpdateJobManifest). Empty: none. Default: empty.
  std::string shared_checkpoint_root;
  // Complete checkpoints kept per job. Default: 2.
  int keep_checkpoints = 2;
  // Of every this many checkpoints the first is full and the others deltas
  // (--full_checkpoint_every); keep_checkpoints then counts full ones,
  // each with its deltas. Default: 1 (every one full).
  int full_checkpoint_every = 1;
  // The file-system seam for checkpoints; null means Env::Default(). Must
  // outlive the pserver.
  Env* env = nullptr;
  // Jobs held at once (--max_jobs); a request for another is refused
  // RESOURCE_EXHAUSTED. Default: 16.
  int max_jobs = 16;
  // What one job's tables may hold here (--max_memory_mb_per_job), within
  // store.max_memory_bytes for all jobs. 0: no limit of its own. Default: 0.
  int64_t max_memory_bytes_per_job = 0;
  // Shared-memory regions all jobs' trainers on this host may hold at once
  // (--max_shared_regions); past it, a trainer's values go over TCP.
  // Default: 256.
  int max_shared_regions = 256;
  // A job no request has named for this long is freed, after its final
  // checkpoint (--job_retention); the default job never is. Default: 10 min.
  absl::Duration job_retention = absl::Minutes(10);
  // How a replicated job (docs/replication.md) reaches pserver `address`
  // in job `job_id`, taking a peer silent for `lease` as gone (the gRPC
  // binding sets it). Null: jobs with replication > 1 are refused.
  // Default: null.
  std::function<std::unique_ptr<ReplicaPeer>(const std::string& job_id,
                                             const std::string& address,
                                             absl::Duration lease)>
      replica_peers;
};

// What one job holds and has done on a pserver (Pserver::Stats), for
// monitoring.
struct JobStats {
  std::string id;
  bool ready = false;  // its chief has initialised it
  StoreCounters counters;
  int live_trainers = 0;
  size_t waiting_pulls = 0;
  std::vector<ParameterStore::TableProgress> tables;
  std::vector<ParameterStore::SparseTableStats> sparse;
  int64_t dense_bytes = 0;
  bool checkpoints = false;  // with --checkpoint_dir
  Checkpointer::Stats checkpoint;
};

// Whether a call may make the job it names.
enum class JobAccess {
  // Made if not held: its chief's InitJob, and the calls between pservers.
  kMake,
  // Made only from checkpoints on disk: any other call. A job id alone
  // reserves nothing (issue 34: 14 GetStatus calls filled --max_jobs).
  kIfKnown,
};

// Where the transport finds a job's request handler.
class JobDirectory {
 public:
  virtual ~JobDirectory() = default;
  // The handler of job `job_id`, alive while the caller holds it. A job
  // this pserver does not hold is made: restored from its checkpoints, or
  // (kMake only) empty, waiting for its chief. INVALID_ARGUMENT for a bad
  // id (see base/job_id.h), RESOURCE_EXHAUSTED when max_jobs are held,
  // NOT_FOUND for a job kIfKnown does not make.
  virtual absl::StatusOr<std::shared_ptr<RequestHandler>> Job(
      absl::string_view job_id, JobAccess access = JobAccess::kMake) = 0;
  // A handler of no job, never initialised, for the calls that a job not
  // yet made answers as an empty one would (GetStatus: not ready;
  // Register: wait for the chief), without making it.
  virtual std::shared_ptr<RequestHandler> Unmade() = 0;
};

// A pserver without its transport: one store, checkpointer and request
// handler per job (jobs share nothing but the memory budget), and the
// sweeper thread that times out pulls, drops silent trainers and frees idle
// jobs. A transport (GrpcPsServer, or a trainer's in-process client) asks
// Job() for a job's handler. Thread-safe.
class Pserver : public JobDirectory {
 public:
  // INVALID_ARGUMENT for a negative trainer count, checkpoint count or job
  // count.
  static absl::StatusOr<std::unique_ptr<Pserver>> Create(
      PserverOptions options);
  // Stop()s.
  ~Pserver() override;

  Pserver(const Pserver&) = delete;
  Pserver& operator=(const Pserver&) = delete;

  // Restores every job found under checkpoint_dir (a checkpoint_dir of the
  // single-job layout, ckpt-* at its top, is moved to default/ first), makes
  // the default job, and starts the sweeper.
  absl::Status Start();
  // The first step of a shutdown, before the transport drains: tells the
  // sweeper to stop (no trainer is dropped while the transport drains), and
  // answers every waiting pull with UNAVAILABLE, and every later one that
  // would wait. Idempotent.
  void BeginShutdown();
  // BeginShutdown()s if that has not been done, waits for the sweeper,
  // writes each job's final checkpoint (with checkpoint_dir; in SYNC mode
  // only at a step boundary) and logs the counters. Idempotent.
  void Stop();

  absl::StatusOr<std::shared_ptr<RequestHandler>> Job(
      absl::string_view job_id, JobAccess access = JobAccess::kMake) override;
  std::shared_ptr<RequestHandler> Unmade() override;
  // The default job's handler and store (in-process clients, tests and
  // benchmarks): the default job lives as long as the pserver.
  RequestHandler* handler();
  ParameterStore* store();
  // The ids of the jobs held now, sorted.
  std::vector<std::string> JobIds() const;
  // Every job held now, sorted by id. Takes no lock that a request holds
  // while it waits.
  std::vector<JobStats> Stats() const;
  // What all jobs' tables hold, and the --max_memory_mb limit (0: none).
  int64_t memory_used_bytes() const { return budget_.used(); }
  // The budget every job draws on (transports count their buffers in it).
  MemoryBudget* memory_budget() { return &budget_; }
  int64_t memory_limit_bytes() const { return budget_.limit(); }

 private:
  struct JobSlot;
  explicit Pserver(PserverOptions options);
  absl::StatusOr<std::shared_ptr<JobSlot>> FindOrAdd(
      absl::string_view job_id, JobAccess access = JobAccess::kMake);
  absl::StatusOr<std::shared_ptr<JobSlot>> NewJob(const std::string& job_id);
  // The options of a job's store, drawing on `budget`.
  StoreOptions StoreOptionsFor(std::shared_ptr<MemoryBudget> budget) const;
  absl::Status MoveSingleJobLayout();
  // FAILED_PRECONDITION naming checkpoint_dir when a file cannot be
  // written and synced there (a read-only or full disk), said at start
  // rather than at the first checkpoint.
  absl::Status CheckCheckpointDir();
  static constexpr size_t kCheckpointDirProbeBytes = 16384;
  // Whether `path` holds a job's checkpoints.
  bool IsJobFolder(const std::string& path) const;
  void Sweep();
  std::vector<std::shared_ptr<JobSlot>> Slots() const;
  static void FinalCheckpoint(JobSlot& job);
  static void LogCounters(const JobSlot& job);
  // The ReplicaSet of job `job_id` from its InitJob.
  absl::StatusOr<std::unique_ptr<ReplicaSet>> MakeReplicaSet(
      const std::string& job_id, const InitJobRequest& req) const;

  const PserverOptions options_;
  Env* const env_;
  MemoryBudget budget_;
  // Every job's shared regions (--max_shared_regions).
  const std::shared_ptr<RegionQuota> regions_;
  mutable absl::Mutex jobs_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<JobSlot>> jobs_
      ABSL_GUARDED_BY(jobs_mu_);
  // Unmade()'s, made at the first call.
  std::shared_ptr<JobSlot> unmade_ ABSL_GUARDED_BY(jobs_mu_);
  // Jobs freed whose final checkpoint is being written.
  absl::flat_hash_set<std::string> closing_ ABSL_GUARDED_BY(jobs_mu_);
  absl::Notification stop_sweeping_;  // notified under stop_mu_
  std::thread sweeper_;
  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVER_PSERVER_H_
