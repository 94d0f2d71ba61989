#include "pserver/pserver.h"

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "pserver/recovery.h"

namespace shardps {

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
  return std::unique_ptr<Pserver>(new Pserver(std::move(options)));
}

Pserver::Pserver(PserverOptions options)
    : options_(std::move(options)),
      store_(options_.store),
      checkpointer_(
          options_.checkpoint_dir.empty()
              ? nullptr
              : std::make_unique<Checkpointer>(
                    options_.env != nullptr ? options_.env : Env::Default(),
                    options_.checkpoint_dir, options_.keep_checkpoints)),
      handler_(&store_, checkpointer_.get(), options_.store.clock) {}

Pserver::~Pserver() { Stop(); }

absl::Status Pserver::Start() {
  if (checkpointer_ != nullptr) {
    const absl::Time t0 = absl::Now();
    auto step =
        RecoverFromCheckpoint(checkpointer_.get(), &store_, RecoveryTarget{});
    if (step.ok()) {
      LOG(INFO) << "restored step " << *step << " from "
                << options_.checkpoint_dir << " in "
                << absl::FormatDuration(
                       absl::Trunc(absl::Now() - t0, absl::Milliseconds(1)));
    } else if (absl::IsNotFound(step.status())) {
      LOG(INFO) << "no checkpoint in " << options_.checkpoint_dir
                << ": waiting for the chief to start the job";
    } else {
      return step.status();
    }
  }
  sweeper_ = std::thread([this] {
    while (!stop_sweeping_.WaitForNotificationWithTimeout(
        options_.sweep_interval)) {
      store_.Sweep(options_.store.clock->Now());
    }
  });
  return absl::OkStatus();
}

void Pserver::BeginShutdown() {
  {
    absl::MutexLock l(&stop_mu_);
    if (!stop_sweeping_.HasBeenNotified()) stop_sweeping_.Notify();
  }
  store_.CancelAllWaiters(absl::UnavailableError("pserver is shutting down"));
}

void Pserver::Stop() {
  {
    absl::MutexLock l(&stop_mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  BeginShutdown();
  if (sweeper_.joinable()) sweeper_.join();
  FinalCheckpoint();
  LogCounters();
}

void Pserver::FinalCheckpoint() {
  if (checkpointer_ == nullptr || !store_.ready()) return;
  const auto v = store_.Versions();
  const bool sync = store_.job().mode() == SYNC;
  if (sync && v.min != v.max) {
    LOG(WARNING) << "no final checkpoint: stopped in the middle of step "
                 << v.min << " (blocks at versions " << v.min << " to " << v.max
                 << "); the newest complete checkpoint stays";
    return;
  }
  auto snap = store_.Snapshot(sync ? v.min : v.max);
  if (!snap.ok()) {
    LOG(WARNING) << "no final checkpoint: " << snap.status();
    return;
  }
  checkpointer_->Save(std::move(*snap));
  absl::Status s = checkpointer_->Flush();
  if (s.ok()) LOG(INFO) << "final checkpoint written";
}

void Pserver::LogCounters() const {
  const auto c = store_.counters();
  LOG(INFO) << "pserver stopped: " << c.pushes << " pushes, " << c.pulls
            << " pulls, " << c.block_updates << " block updates, "
            << c.rejected_requests << " rejected requests, " << c.pull_timeouts
            << " pull time-outs, " << c.dropped_trainers
            << " trainers dropped, " << c.rejoined_trainers << " rejoined, "
            << c.late_block_pushes << " late block pushes dropped, "
            << c.rollbacks << " rollbacks";
  for (const auto& t : store_.SparseStats()) {
    LOG(INFO) << "sparse table " << t.name << ": " << t.counters.rows
              << " rows (" << t.memory_bytes / (1 << 20) << " MiB), "
              << t.counters.created << " created, " << t.counters.evicted
              << " evicted, " << t.counters.pending_keys
              << " keys awaiting admission, " << t.counters.dropped_updates
              << " updates dropped before admission";
  }
}

}  // namespace shardps
