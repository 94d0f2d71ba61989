#ifndef SHARDPS_PSERVER_STORE_STEP_STALENESS_GATE_H_
#define SHARDPS_PSERVER_STORE_STEP_STALENESS_GATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/ps_service.pb.h"
#include "pserver/store/step/membership.h"
#include "pserver/store/step/pull_waiters.h"

namespace shardps {

// ASYNC: each trainer's clock (the steps it has pushed) and the pulls that
// wait for the slowest live trainer (docs/design.md, "Asynchronous SGD"): a
// pull at step c waits while c minus the slowest clock exceeds max_staleness
// (stale-synchronous parallel; -1: never), and while the slowest clock is
// below the pull's min_clock (the end-of-training evaluation). In SYNC mode
// every pull passes. Thread-safe.
class StalenessGate {
 public:
  // `membership` must outlive the gate.
  StalenessGate(bool async, int max_staleness, const Membership* membership);

  // Whether `w` may go now; if not, holds it until it may. Lock-free when
  // nothing could hold it (SYNC; no bound and no min_clock).
  bool PassOrHold(const WaiterPtr& w);
  // Trainer k has pushed `step`: its clock moves to step + 1; the pulls
  // that may now go are handed to *ready.
  void Advance(int k, int64_t step, std::vector<WaiterPtr>* ready);
  // Hands to *ready the pulls that a membership change lets go.
  void Recheck(std::vector<WaiterPtr>* ready);
  // Why `w` waits here, or "" when it does not.
  std::string DescribeWait(const PullWaiter& w) const;

  int64_t clock(int k) const;
  // ASYNC: the lowest clock of the live trainers (0 when none is live), and
  // the highest of any trainer.
  int64_t SlowestLiveClock() const;
  int64_t FastestClock() const;
  // ASYNC: INVALID_ARGUMENT for a push of trainer k more than kMaxStepLead
  // steps past its clock; OK in SYNC mode (the barrier checks steps there).
  absl::Status CheckPushStep(int k, int64_t step) const;
  static constexpr int64_t kMaxStepLead = 1 << 16;
  // Checkpoints: every trainer's clock.
  void AddTo(CheckpointInfo* info) const;
  // Takes the clocks of a checkpoint (when it has one per trainer) and hands
  // every held pull to *dropped.
  void Restore(const CheckpointInfo& info, std::vector<WaiterPtr>* dropped);

 private:
  bool Passes(const PullWaiter& w) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Whether w's own_clock condition holds, or can no longer come to hold.
  bool HasOwnPushes(const PullWaiter& w) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void TakePassing(std::vector<WaiterPtr>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool async_;
  const int max_staleness_;
  const Membership* const membership_;
  mutable absl::Mutex mu_;
  std::vector<int64_t> clocks_ ABSL_GUARDED_BY(mu_);
  // Per trainer: restored from a checkpoint, no push of it applied since.
  std::vector<bool> restored_ ABSL_GUARDED_BY(mu_);
  std::vector<WaiterPtr> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_STEP_STALENESS_GATE_H_
