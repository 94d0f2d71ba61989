#ifndef SHARDPS_PSERVER_STORE_STEP_PULL_WAITERS_H_
#define SHARDPS_PSERVER_STORE_STEP_PULL_WAITERS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "pserver/store/step/step_barrier.h"
#include "pserver/store/step/update_forwarder.h"

namespace shardps {

// Called once when a pull ends: OK after every unit was read.
using PullDone =
    std::function<void(absl::Status status, absl::Duration waited)>;

// A pull that has not been answered yet. `pending` counts what it still
// waits for: one per unit below min_version (held by that unit's barrier),
// one for the staleness gate (held by StalenessGate), and one held by the
// pull itself while it registers the others. Whoever releases the last
// unit answers it.
struct PullWaiter {
  int trainer_id = 0;
  int64_t min_version = 0;
  int64_t step = 0;
  int64_t min_clock = 0;
  int64_t own_clock = 0;    // this trainer's pushes wanted applied (ASYNC)
  int64_t norms_step = -1;  // >= 0: a pull of LARS norms of that step
  std::vector<PullTarget> targets;
  PullSink sink;
  PullDone done;
  absl::Time start;
  std::atomic<int> pending{0};
  std::atomic<bool> finished{false};
  std::atomic<bool> watched{false};   // in PullWaiters' set
  std::atomic<bool> reported{false};  // its wait was logged
};

// The pulls that wait, for answering, time-outs, reports and shutdown. A
// pull that can be answered at once never takes this registry's lock.
// Thread-safe.
class PullWaiters {
 public:
  // `forwarder`: the job's replication, once set (null inside: none);
  // a pull is answered only if this pserver still serves every unit it
  // read, checked after the read (which waits for updates in flight).
  PullWaiters(const Clock* clock,
              const std::atomic<UpdateForwarder*>* forwarder)
      : clock_(clock), forwarder_(forwarder) {}
  // Answers every watched pull with UNAVAILABLE.
  ~PullWaiters();

  // Ends the registration of `w` (drops the hold it had on itself): answers
  // it when nothing else holds it; otherwise watches it, or, after Close(),
  // answers it UNAVAILABLE.
  void Start(const WaiterPtr& w);
  // Releases one unit of what `w` waits for; the last one answers it: every
  // target is read into the pull, then `done` runs with OK.
  void Release(const WaiterPtr& w);
  // Answers `w` with `status` unless it was answered already.
  void Finish(const WaiterPtr& w, absl::Status status);

  // The watched pulls that have waited `max_wait` as of `now`, and those
  // that have waited `report_after` and were not reported yet (marked
  // reported now).
  void Scan(absl::Time now, absl::Duration max_wait,
            absl::Duration report_after, std::vector<WaiterPtr>* expired,
            std::vector<WaiterPtr>* to_report);
  // Answers every watched pull with `status`, and every later one with
  // UNAVAILABLE (shutdown).
  void Close(const absl::Status& status);
  // Answers every pull watched now with `status`; later ones wait as usual.
  void Interrupt(const absl::Status& status);
  // Replicated: answers every waiting pull that reads a unit this pserver
  // does not serve any more (a newer view moved its shard, or this
  // pserver is fenced) with the forwarder's refusal, so that the trainer
  // sends it to the new primary at once rather than after
  // --max_pull_wait_s. Call without the units' locks.
  void RecheckServes();

  // Pulls waiting now (takes no lock).
  size_t size() const;
  // Blocks until at least `n` pulls wait, or `timeout` passes; returns
  // whether they do (tests wait for a pull to be held).
  bool WaitForSize(size_t n, absl::Duration timeout) const;

 private:
  void Complete(const WaiterPtr& w);
  // Runs w->done once, after dropping the waiter's callbacks.
  void Answer(const WaiterPtr& w, absl::Status status);
  void Watch(const WaiterPtr& w);
  void Unwatch(const WaiterPtr& w);

  const Clock* const clock_;
  const std::atomic<UpdateForwarder*>* const forwarder_;
  mutable absl::Mutex mu_;
  absl::flat_hash_set<WaiterPtr> watched_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<size_t> count_{0};  // watched_.size()
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_STEP_PULL_WAITERS_H_
