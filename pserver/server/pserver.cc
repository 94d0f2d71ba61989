#include "pserver/server/pserver.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/job_id.h"
#include "base/status_macros.h"
#include "common/placement/shard_map.h"
#include "common/storage/checkpoint.h"
#include "common/transport/wire_limits.h"
#include "glog/logging.h"
#include "pserver/checkpoint/job_checkpoint.h"
#include "pserver/checkpoint/recovery.h"
#include "pserver/checkpoint/store_snapshots.h"

namespace shardps {

// One job: its store, checkpoints and handler, and when a request last
// named it (absl::Time as nanoseconds since the epoch).
struct Pserver::JobSlot {
  std::string id;
  // Its share of the pserver's budget (--max_memory_mb_per_job); outlives
  // the store.
  std::shared_ptr<MemoryBudget> budget;
  std::unique_ptr<ParameterStore> store;
  std::unique_ptr<Checkpointer> checkpointer;
  std::shared_ptr<RequestHandler> handler;
  std::atomic<int64_t> last_used_ns{0};
};

absl::StatusOr<std::unique_ptr<Pserver>> Pserver::Create(
    PserverOptions options) {
  if (options.store.num_trainers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_gradient_servers must be >= 0, got ",
                     options.store.num_trainers));
  }
  if (options.keep_checkpoints < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--keep_checkpoints must be >= 1, got ", options.keep_checkpoints));
  }
  if (options.full_checkpoint_every < 1 ||
      options.full_checkpoint_every > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--full_checkpoint_every must be in [1, 100000], got ",
                     options.full_checkpoint_every));
  }
  if (options.max_jobs < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_jobs must be >= 1, got ", options.max_jobs));
  }
  if (options.max_shared_regions < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_shared_regions must be >= 0, got ", options.max_shared_regions));
  }
  return std::unique_ptr<Pserver>(new Pserver(std::move(options)));
}

Pserver::Pserver(PserverOptions options)
    : options_(std::move(options)),
      env_(options_.env != nullptr ? options_.env : Env::Default()),
      budget_(options_.store.max_memory_bytes),
      regions_(std::make_shared<RegionQuota>(options_.max_shared_regions)) {}

Pserver::~Pserver() { Stop(); }

absl::StatusOr<std::unique_ptr<ReplicaSet>> Pserver::MakeReplicaSet(
    const std::string& job_id, const InitJobRequest& req) const {
  ReplicaSetOptions o;
  o.self = req.server_index();
  o.num_servers = req.pservers_size();
  o.replication = req.job().replication();
  o.env = env_;
  if (req.job().pserver_lease_ms() > 0) {
    o.lease = absl::Milliseconds(req.job().pserver_lease_ms());
  }
  if (req.job().failover_after_ms() > 0) {
    o.gone_after = absl::Milliseconds(req.job().failover_after_ms());
  }
  o.watch_every = absl::Seconds(1);
  if (!options_.checkpoint_dir.empty()) {
    const std::string dir = JoinPath(options_.checkpoint_dir, job_id);
    if (!env_->FileExists(dir).ok()) RETURN_IF_ERROR(env_->CreateDir(dir));
    o.state_path = JoinPath(dir, "view_state");
  }
  std::vector<uint64_t> shard_base;
  for (const TableSpec& t : req.job().tables()) {
    shard_base.push_back(t.kind() == TableSpec::SPARSE
                             ? ReplicaSet::kSparseTable
                             : TableHash(t.name()));
  }
  std::vector<std::unique_ptr<ReplicaPeer>> peers(req.pservers_size());
  for (int i = 0; i < req.pservers_size(); ++i) {
    if (i != o.self) {
      peers[i] = options_.replica_peers(job_id, req.pservers(i), o.lease);
    }
  }
  return ReplicaSet::Create(std::move(o), std::move(shard_base),
                            std::move(peers));
}

StoreOptions Pserver::StoreOptionsFor(
    std::shared_ptr<MemoryBudget> budget) const {
  StoreOptions store = options_.store;
  store.budget = std::move(budget);
  store.pull_reply_bytes = kMaxChunkBytes;
  return store;
}

namespace {

// Updates the job manifests of job `job_id` under `root` once this
// pserver's checkpoint of `step` is written, and logs whether this call
// wrote the manifest of `step`, or failed.
void UpdateAndLogJobManifest(Env* env, const std::string& root,
                             const std::string& job_id, int64_t step) {
  auto wrote = UpdateJobManifest(env, root, job_id, step);
  if (!wrote.ok()) {
    LOG(WARNING) << "job " << job_id << ": the job manifest of step " << step
                 << " under " << root << " was not written: " << wrote.status();
  } else if (*wrote) {
    LOG(INFO) << "job " << job_id << ": every pserver's checkpoint "
              << "of step " << step << " is written; job manifest "
              << JobManifestPath(root, job_id, step);
  }
}

// Restores the store of job `job_id` from the latest checkpoint of
// `checkpointer`; OK too when there is none (the job waits for its chief).
absl::Status RecoverJob(const std::string& job_id, Checkpointer* checkpointer,
                        ParameterStore* store) {
  const absl::Time t0 = absl::Now();
  auto step = RecoverFromCheckpoint(checkpointer, store, RecoveryTarget{});
  if (step.ok()) {
    LOG(INFO) << "job " << job_id << ": restored step " << *step << " from "
              << checkpointer->dir() << " in "
              << absl::FormatDuration(
                     absl::Trunc(absl::Now() - t0, absl::Milliseconds(1)));
  } else if (absl::IsNotFound(step.status())) {
    LOG(INFO) << "job " << job_id << ": no checkpoint in "
              << checkpointer->dir()
              << ": waiting for the chief to start the job";
  } else {
    return absl::Status(
        step.status().code(),
        absl::StrCat("job ", job_id, ": ", step.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<Pserver::JobSlot>> Pserver::NewJob(
    const std::string& job_id) {
  auto job = std::make_shared<JobSlot>();
  job->id = job_id;
  job->budget = std::make_shared<MemoryBudget>(
      options_.max_memory_bytes_per_job, &budget_);
  job->store = std::make_unique<ParameterStore>(StoreOptionsFor(job->budget));
  if (!options_.checkpoint_dir.empty()) {
    job->checkpointer = std::make_unique<Checkpointer>(
        env_, JoinPath(options_.checkpoint_dir, job_id),
        options_.keep_checkpoints, options_.full_checkpoint_every);
    if (!options_.shared_checkpoint_root.empty()) {
      job->checkpointer->set_on_written([env = env_,
                                         root = options_.shared_checkpoint_root,
                                         job_id](int64_t step) {
        UpdateAndLogJobManifest(env, root, job_id, step);
      });
    }
  }
  job->handler = std::make_shared<RequestHandler>(
      job->store.get(), job->checkpointer.get(), options_.store.clock);
  job->handler->shared_regions().set_quota(regions_);
  if (!options_.restore_from.empty()) {
    job->handler->start_restore().Configure(env_, options_.restore_from,
                                            job_id);
  }
  if (options_.replica_peers) {
    job->handler->replication().set_replica_factory(
        [this, job_id](const InitJobRequest& r) {
          return MakeReplicaSet(job_id, r);
        });
  }
  job->last_used_ns = absl::ToUnixNanos(options_.store.clock->Now());
  if (job->checkpointer == nullptr) return job;
  if (absl::Status s =
          RecoverJob(job_id, job->checkpointer.get(), job->store.get());
      !s.ok()) {
    return s;
  }
  return job;
}

absl::StatusOr<std::shared_ptr<Pserver::JobSlot>> Pserver::FindOrAdd(
    absl::string_view job_id, JobAccess access) {
  {
    // Every call looks its job up: shared, so calls do not queue here.
    absl::ReaderMutexLock l(&jobs_mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) return it->second;
  }
  // Outside the lock: reading the folder must not hold up other jobs'
  // calls.
  if (access == JobAccess::kIfKnown &&
      (!ValidateJobId(job_id).ok() || options_.checkpoint_dir.empty() ||
       !IsJobFolder(JoinPath(options_.checkpoint_dir, job_id)))) {
    if (absl::Status s = ValidateJobId(job_id); !s.ok()) return s;
    absl::ReaderMutexLock l(&jobs_mu_);
    auto it = jobs_.find(job_id);  // made by its InitJob meanwhile?
    if (it != jobs_.end()) return it->second;
    return absl::NotFoundError(
        absl::StrCat("job ", job_id,
                     " is not initialised on this pserver yet (the chief, "
                     "trainer 0, sends the tables first)"));
  }
  absl::MutexLock l(&jobs_mu_);
  // Being freed: wait for its final checkpoint, then make it again from it.
  const std::string id(job_id);
  auto freed = [this, &id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(jobs_mu_) {
    return !closing_.contains(id);
  };
  jobs_mu_.Await(absl::Condition(&freed));
  auto it = jobs_.find(job_id);  // made by another call meanwhile?
  if (it != jobs_.end()) return it->second;
  if (absl::Status s = ValidateJobId(job_id); !s.ok()) return s;
  if (static_cast<int>(jobs_.size()) >= options_.max_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job ", job_id, ": this pserver holds ", jobs_.size(),
                     " jobs already (--max_jobs); an idle one is freed after "
                     "--job_retention"));
  }
  // Restoring reads the job's checkpoints under the lock: a new job is
  // rare, and its first requests wait for it anyway.
  auto job = NewJob(std::string(job_id));
  if (!job.ok()) return job.status();
  jobs_.emplace(std::string(job_id), *job);
  if (job_id != kDefaultJobId) {
    LOG(INFO) << "job " << job_id << " added (" << jobs_.size() << " held)";
  }
  return *job;
}

absl::StatusOr<std::shared_ptr<RequestHandler>> Pserver::Job(
    absl::string_view job_id, JobAccess access) {
  auto job = FindOrAdd(job_id, access);
  if (!job.ok()) return job.status();
  (*job)->last_used_ns.store(absl::ToUnixNanos(options_.store.clock->Now()),
                             std::memory_order_relaxed);
  // Shares the slot's ownership: the job outlives the call.
  return std::shared_ptr<RequestHandler>(*job, (*job)->handler.get());
}

std::shared_ptr<RequestHandler> Pserver::Unmade() {
  absl::MutexLock l(&jobs_mu_);
  if (unmade_ == nullptr) {
    unmade_ = std::make_shared<JobSlot>();
    unmade_->budget = std::make_shared<MemoryBudget>(0, &budget_);
    unmade_->store =
        std::make_unique<ParameterStore>(StoreOptionsFor(unmade_->budget));
    unmade_->handler = std::make_shared<RequestHandler>(
        unmade_->store.get(), nullptr, options_.store.clock);
    unmade_->handler->shared_regions().set_quota(regions_);
  }
  return std::shared_ptr<RequestHandler>(unmade_, unmade_->handler.get());
}

RequestHandler* Pserver::handler() {
  auto job = FindOrAdd(kDefaultJobId);
  CHECK(job.ok()) << job.status();
  return (*job)->handler.get();
}

ParameterStore* Pserver::store() {
  auto job = FindOrAdd(kDefaultJobId);
  CHECK(job.ok()) << job.status();
  return (*job)->store.get();
}

std::vector<std::string> Pserver::JobIds() const {
  std::vector<std::string> ids;
  absl::MutexLock l(&jobs_mu_);
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<JobStats> Pserver::Stats() const {
  std::vector<JobStats> out;
  for (const std::shared_ptr<JobSlot>& job : Slots()) {
    const ParameterStore& store = *job->store;
    JobStats j;
    j.id = job->id;
    j.ready = store.ready();
    j.counters = store.counters();
    j.live_trainers = static_cast<int>(store.LiveTrainers().size());
    j.waiting_pulls = store.waiting_pulls();
    j.tables = store.Progress();
    j.sparse = store.SparseStats();
    j.dense_bytes = store.dense_bytes();
    j.checkpoints = job->checkpointer != nullptr;
    if (j.checkpoints) j.checkpoint = job->checkpointer->stats();
    out.push_back(std::move(j));
  }
  std::sort(out.begin(), out.end(),
            [](const JobStats& a, const JobStats& b) { return a.id < b.id; });
  return out;
}

std::vector<std::shared_ptr<Pserver::JobSlot>> Pserver::Slots() const {
  std::vector<std::shared_ptr<JobSlot>> slots;
  absl::MutexLock l(&jobs_mu_);
  for (const auto& [id, job] : jobs_) slots.push_back(job);
  return slots;
}

absl::Status Pserver::MoveSingleJobLayout() {
  // Before jobs, a pserver's checkpoints were at the top of its
  // checkpoint_dir: they are the default job's.
  const std::string& dir = options_.checkpoint_dir;
  std::vector<std::string> children;
  absl::Status s = env_->GetChildren(dir, &children);
  if (absl::IsNotFound(s)) return absl::OkStatus();
  if (!s.ok()) return s;
  const std::string to = JoinPath(dir, kDefaultJobId);
  bool moved = false;
  for (const std::string& name : children) {
    if (!IsSingleJobLayoutName(name)) continue;
    if (IsJobFolder(JoinPath(dir, name))) {
      // A job of an earlier version took a name that is now reserved: its
      // folder stays as it is, unserved, rather than be taken for the
      // single-job layout's.
      LOG(WARNING) << JoinPath(dir, name) << " holds the checkpoints of job '"
                   << name << "', a name now reserved (base/job_id.h): left "
                   << "in place and not served; rename the folder to a "
                   << "valid job id to serve it";
      continue;
    }
    if (!moved) {
      RETURN_IF_ERROR(env_->CreateDir(to));
    }
    RETURN_IF_ERROR(env_->RenameFile(JoinPath(dir, name), JoinPath(to, name)));
    moved = true;
  }
  if (moved) {
    LOG(WARNING) << dir << " held checkpoints of the single-job layout: moved "
                 << "to " << to << " (the default job's)";
    RETURN_IF_ERROR(env_->SyncDir(to));
    RETURN_IF_ERROR(env_->SyncDir(dir));
  }
  return absl::OkStatus();
}

bool Pserver::IsJobFolder(const std::string& path) const {
  std::vector<std::string> children;
  if (!env_->GetChildren(path, &children).ok()) return false;
  for (const std::string& name : children) {
    if (absl::StartsWith(name, "ckpt-") || name == "GENERATION") return true;
  }
  return false;
}

absl::Status Pserver::CheckCheckpointDir() {
  const std::string& dir = options_.checkpoint_dir;
  auto unwritable = [&dir](const absl::Status& s) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--checkpoint_dir=", dir, ": cannot write there (", s.message(),
        "); every checkpoint would fail. Free space or give a writable "
        "folder; without --checkpoint_dir the pserver serves its jobs "
        "without checkpoints"));
  };
  if (absl::Status s = env_->CreateDir(dir); !s.ok()) return unwritable(s);
  // A few blocks written and synced: a full disk fails here (a file
  // created, or a write buffered, may not).
  const std::string probe =
      JoinPath(dir, absl::StrCat(".write-probe-", getpid()));
  auto file = env_->NewWritableFile(probe);
  if (!file.ok()) return unwritable(file.status());
  absl::Status s = (*file)->Append(std::string(kCheckpointDirProbeBytes, 0));
  if (s.ok()) s = (*file)->Sync();
  const absl::Status closed = (*file)->Close();
  if (s.ok()) s = closed;
  (void)env_->DeleteFile(probe);
  return s.ok() ? absl::OkStatus() : unwritable(s);
}

absl::Status Pserver::Start() {
  std::vector<std::string> ids = {kDefaultJobId};
  if (!options_.checkpoint_dir.empty()) {
    RETURN_IF_ERROR(CheckCheckpointDir());
    RETURN_IF_ERROR(MoveSingleJobLayout());
    std::vector<std::string> children;
    absl::Status s = env_->GetChildren(options_.checkpoint_dir, &children);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
    std::sort(children.begin(), children.end());
    // At most max_jobs are restored now; the others when a request names
    // them (once idle jobs are freed), so that a folder of many past jobs
    // never keeps a pserver from starting.
    int later = 0;
    for (const std::string& name : children) {
      if (name == kDefaultJobId || !ValidateJobId(name).ok()) continue;
      if (!IsJobFolder(JoinPath(options_.checkpoint_dir, name))) continue;
      if (static_cast<int>(ids.size()) < options_.max_jobs) {
        ids.push_back(name);
      } else {
        ++later;
      }
    }
    if (later > 0) {
      LOG(WARNING) << later << " more jobs have checkpoints in "
                   << options_.checkpoint_dir
                   << " than --max_jobs=" << options_.max_jobs
                   << " holds: each is restored when a "
                   << "request names it and a place is free";
    }
  }
  for (const std::string& id : ids) {
    auto job = FindOrAdd(id);
    if (!job.ok()) return job.status();
  }
  sweeper_ = std::thread([this] {
    while (!stop_sweeping_.WaitForNotificationWithTimeout(
        options_.sweep_interval)) {
      Sweep();
    }
  });
  return absl::OkStatus();
}

void Pserver::Sweep() {
  const absl::Time now = options_.store.clock->Now();
  std::vector<std::shared_ptr<JobSlot>> idle;
  for (const std::shared_ptr<JobSlot>& job : Slots()) {
    job->store->Sweep(now);
    const absl::Time used = absl::FromUnixNanos(job->last_used_ns.load());
    if (job->id != kDefaultJobId && now - used >= options_.job_retention) {
      idle.push_back(job);
    }
  }
  for (const std::shared_ptr<JobSlot>& job : idle) {
    {
      absl::MutexLock l(&jobs_mu_);
      // A request may have named it since.
      const absl::Time used = absl::FromUnixNanos(job->last_used_ns.load());
      if (options_.store.clock->Now() - used < options_.job_retention) {
        continue;
      }
      jobs_.erase(job->id);
      // Until its final checkpoint is on disk, a request for it waits
      // (FindOrAdd): made again any earlier, the job would miss it.
      closing_.insert(job->id);
    }
    job->store->CancelAllWaiters(
        absl::UnavailableError(absl::StrCat("job ", job->id, " was freed")));
    FinalCheckpoint(*job);
    {
      absl::MutexLock l(&jobs_mu_);
      closing_.erase(job->id);
    }
    LogCounters(*job);
    LOG(INFO) << "job " << job->id << " freed: no request named it for "
              << absl::FormatDuration(options_.job_retention)
              << " (--job_retention)";
  }
}

void Pserver::BeginShutdown() {
  {
    absl::MutexLock l(&stop_mu_);
    if (!stop_sweeping_.HasBeenNotified()) stop_sweeping_.Notify();
  }
  for (const std::shared_ptr<JobSlot>& job : Slots()) {
    job->store->CancelAllWaiters(
        absl::UnavailableError("pserver is shutting down"));
    // Pushes waiting on other pservers give up.
    if (ReplicaSet* r = job->handler->replication().replicas()) r->Stop();
  }
}

void Pserver::Stop() {
  {
    absl::MutexLock l(&stop_mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  BeginShutdown();
  if (sweeper_.joinable()) sweeper_.join();
  for (const std::shared_ptr<JobSlot>& job : Slots()) {
    FinalCheckpoint(*job);
    LogCounters(*job);
  }
}

void Pserver::FinalCheckpoint(JobSlot& job) {
  ParameterStore& store = *job.store;
  if (job.checkpointer == nullptr || !store.ready()) return;
  const auto v = store.Versions();
  const bool sync = store.job().mode() == SYNC;
  if (sync && v.min != v.max) {
    LOG(WARNING) << "job " << job.id
                 << ": no final checkpoint: stopped in the middle of step "
                 << v.min << " (blocks at versions " << v.min << " to " << v.max
                 << "); the newest complete checkpoint stays";
    return;
  }
  StoreSnapshots(&store).CallOffSaves("the job's end");
  // A write before it that failed was logged when it did.
  absl::Status previous;
  absl::Status begun = StoreSnapshots(&store).SaveTo(
      job.checkpointer.get(), sync ? v.min : v.max, &previous);
  if (!begun.ok()) {
    LOG(WARNING) << "job " << job.id << ": no final checkpoint: " << begun;
    return;
  }
  absl::Status s = job.checkpointer->Flush();
  if (s.ok()) LOG(INFO) << "job " << job.id << ": final checkpoint written";
}

void Pserver::LogCounters(const JobSlot& job) {
  const ParameterStore& store = *job.store;
  if (!store.ready() && job.id != kDefaultJobId) return;
  const auto c = store.counters();
  LOG(INFO) << "job " << job.id << ": " << c.pushes << " pushes, " << c.pulls
            << " pulls, " << c.block_updates << " block updates, "
            << c.rejected_requests << " rejected requests, " << c.pull_timeouts
            << " pull time-outs, " << c.dropped_trainers
            << " trainers dropped, " << c.rejoined_trainers << " rejoined, "
            << c.late_block_pushes << " late block pushes dropped, "
            << c.rollbacks << " rollbacks";
  for (const auto& t : store.SparseStats()) {
    LOG(INFO)
        << "job " << job.id << ": sparse table " << t.name << ": "
        << t.counters.rows << " rows (" << t.memory_bytes / (1 << 20) << " MiB"
        << (t.counters.rows > 0
                ? absl::StrCat(", ", t.memory_bytes / t.counters.rows,
                               " bytes a row")
                : "")
        << (t.storage != SparseTableOptions::FLOAT32
                ? absl::StrCat(", ",
                               SparseTableOptions::RowStorage_Name(t.storage))
                : "")
        << ")"
        << (t.counters.on_disk
                ? absl::StrCat(", ", t.counters.disk_rows, " on disk (",
                               t.counters.spilled_rows, " written there, ",
                               t.counters.loaded_rows, " read back, ",
                               t.counters.disk_errors, " disk errors)")
                : "")
        << ", " << t.counters.created << " created, " << t.counters.evicted_full
        << " evicted to make room (of at most " << t.counters.max_rows
        << " rows; 0: no limit), " << t.counters.expired << " expired, "
        << t.counters.pending_keys << " keys awaiting admission, "
        << t.counters.dropped_updates << " updates dropped before admission, "
        << t.counters.refused_rows << " rows refused for want of room";
  }
}

}  // namespace shardps
