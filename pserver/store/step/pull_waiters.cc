#include "pserver/store/step/pull_waiters.h"

namespace shardps {

PullWaiters::~PullWaiters() {
  Close(absl::UnavailableError("pserver is shutting down"));
}

void PullWaiters::Start(const WaiterPtr& w) {
  if (w->pending.fetch_sub(1) == 1) {
    Complete(w);  // the fast path: nothing to wait for, no registry lock
  } else {
    Watch(w);
  }
}

void PullWaiters::Watch(const WaiterPtr& w) {
  bool closed = false;
  {
    absl::MutexLock l(&mu_);
    closed = closed_;
    if (!closed) {
      watched_.insert(w);
      w->watched.store(true);
      count_.store(watched_.size(), std::memory_order_relaxed);
    }
  }
  if (closed) {
    Finish(w, absl::UnavailableError("pserver is shutting down"));
  } else if (w->finished.load()) {
    // Answered between the holds and the insert: Complete may not have
    // seen `watched`, so remove it here.
    Unwatch(w);
  }
}

void PullWaiters::Release(const WaiterPtr& w) {
  if (w->pending.fetch_sub(1) == 1) Complete(w);
}

void PullWaiters::Complete(const WaiterPtr& w) {
  if (w->finished.exchange(true)) return;
  for (const PullTarget& t : w->targets) t.unit->Read(t, w->sink);
  // Replicated: the read waited for the units' updates in flight; a
  // forward that failed fenced this pserver, and a newer view moved the
  // shard, before the update settled. Either way what was read may be a
  // version no backup holds: not answered (docs/replication.md, "Faults").
  absl::Status st;
  UpdateForwarder* f = forwarder_->load(std::memory_order_acquire);
  for (size_t i = 0; f != nullptr && st.ok() && i < w->targets.size(); ++i) {
    const BarrierUnit* u = w->targets[i].unit;
    st = f->CheckServes(u->table_id(), u->index());
  }
  if (w->watched.load()) Unwatch(w);
  Answer(w, std::move(st));
}

void PullWaiters::Finish(const WaiterPtr& w, absl::Status status) {
  if (w->finished.exchange(true)) return;
  if (w->watched.load()) Unwatch(w);
  Answer(w, std::move(status));
}

void PullWaiters::Answer(const WaiterPtr& w, absl::Status status) {
  // The callbacks go with the answer: what they hold (the caller's reply,
  // the job) must not live on in a waiter that a barrier still lists.
  PullDone done = std::move(w->done);
  w->done = nullptr;
  w->sink = nullptr;
  done(std::move(status), clock_->Now() - w->start);
}

void PullWaiters::Unwatch(const WaiterPtr& w) {
  absl::MutexLock l(&mu_);
  watched_.erase(w);
  count_.store(watched_.size(), std::memory_order_relaxed);
}

void PullWaiters::Scan(absl::Time now, absl::Duration max_wait,
                       absl::Duration report_after,
                       std::vector<WaiterPtr>* expired,
                       std::vector<WaiterPtr>* to_report) {
  absl::MutexLock l(&mu_);
  for (const WaiterPtr& w : watched_) {
    if (w->finished.load()) continue;
    if (now - w->start >= max_wait) {
      expired->push_back(w);
    } else if (now - w->start >= report_after && !w->reported.exchange(true)) {
      to_report->push_back(w);
    }
  }
}

void PullWaiters::Close(const absl::Status& status) {
  std::vector<WaiterPtr> all;
  {
    absl::MutexLock l(&mu_);
    closed_ = true;
    all.assign(watched_.begin(), watched_.end());
  }
  for (const WaiterPtr& w : all) Finish(w, status);
}

void PullWaiters::Interrupt(const absl::Status& status) {
  std::vector<WaiterPtr> all;
  {
    absl::MutexLock l(&mu_);
    all.assign(watched_.begin(), watched_.end());
  }
  for (const WaiterPtr& w : all) Finish(w, status);
}

void PullWaiters::RecheckServes() {
  UpdateForwarder* f = forwarder_->load(std::memory_order_acquire);
  if (f == nullptr) return;
  std::vector<std::pair<WaiterPtr, absl::Status>> refused;
  {
    absl::MutexLock l(&mu_);
    for (const WaiterPtr& w : watched_) {
      if (w->finished.load()) continue;
      for (const PullTarget& t : w->targets) {
        absl::Status st = f->CheckServes(t.unit->table_id(), t.unit->index());
        if (!st.ok()) {
          refused.emplace_back(w, std::move(st));
          break;
        }
      }
    }
  }
  for (auto& [w, st] : refused) Finish(w, std::move(st));
}

bool PullWaiters::WaitForSize(size_t n, absl::Duration timeout) const {
  struct Args {
    const absl::flat_hash_set<WaiterPtr>* watched;
    size_t n;
  } args{&watched_, n};
  absl::MutexLock l(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Args* a) { return a->watched->size() >= a->n; }, &args),
      timeout);
}

size_t PullWaiters::size() const {
  return count_.load(std::memory_order_relaxed);
}

}  // namespace shardps
