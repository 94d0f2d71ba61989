#include "pserver/store/step/staleness_gate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardps {

StalenessGate::StalenessGate(bool async, int max_staleness,
                             const Membership* membership)
    : async_(async),
      max_staleness_(max_staleness),
      membership_(membership),
      clocks_(membership->num_trainers(), 0),
      restored_(membership->num_trainers(), false) {}

bool StalenessGate::HasOwnPushes(const PullWaiter& w) const {
  const int64_t clock = clocks_[w.trainer_id];
  // A pull waits for the trainer's push sent just before it. A pserver
  // that lacks earlier pushes too (which the trainer saw acknowledged), or
  // was restored from a checkpoint since, lost them: waiting would never
  // end, and async mode takes the parameters as they are.
  return clock >= w.own_clock || clock + 1 < w.own_clock ||
         restored_[w.trainer_id];
}

bool StalenessGate::Passes(const PullWaiter& w) const {
  if (!async_) return true;
  // The slowest trainer still in the job (not dropped, not gone).
  int64_t slowest = INT64_MAX;
  for (int k = 0; k < membership_->num_trainers(); ++k) {
    if (membership_->Live(k)) slowest = std::min(slowest, clocks_[k]);
  }
  return (max_staleness_ < 0 || w.step - slowest <= max_staleness_) &&
         slowest >= w.min_clock && HasOwnPushes(w);
}

void StalenessGate::TakePassing(std::vector<WaiterPtr>* ready) {
  auto keep =
      std::partition(held_.begin(), held_.end(), [this](const WaiterPtr& w) {
        mu_.AssertHeld();
        return !Passes(*w);
      });
  ready->insert(ready->end(), keep, held_.end());
  held_.erase(keep, held_.end());
}

bool StalenessGate::PassOrHold(const WaiterPtr& w) {
  // SYNC, and ASYNC without a staleness bound or a clock to wait for, hold
  // nothing: the common pull takes no lock here.
  if (!async_ ||
      (max_staleness_ < 0 && w->min_clock <= 0 && w->own_clock <= 0)) {
    return true;
  }
  absl::MutexLock l(&mu_);
  if (Passes(*w)) return true;
  // Pulls answered meanwhile (timed out) are let go, as StepBarrier does.
  held_.erase(
      std::remove_if(held_.begin(), held_.end(),
                     [](const WaiterPtr& h) { return h->finished.load(); }),
      held_.end());
  held_.push_back(w);
  return false;
}

void StalenessGate::Advance(int k, int64_t step,
                            std::vector<WaiterPtr>* ready) {
  absl::MutexLock l(&mu_);
  clocks_[k] = std::max(clocks_[k], step + 1);
  restored_[k] = false;
  TakePassing(ready);
}

void StalenessGate::Recheck(std::vector<WaiterPtr>* ready) {
  absl::MutexLock l(&mu_);
  TakePassing(ready);
}

std::string StalenessGate::DescribeWait(const PullWaiter& w) const {
  absl::MutexLock l(&mu_);
  if (Passes(w)) return "";
  if (!HasOwnPushes(w)) {
    return absl::StrCat("trainer ", w.trainer_id, "'s own push of step ",
                        w.own_clock - 1);
  }
  std::vector<int> slow;
  const int s = max_staleness_;
  for (int k = 0; k < membership_->num_trainers(); ++k) {
    if (!membership_->Live(k)) continue;
    if ((s >= 0 && w.step - clocks_[k] > s) || clocks_[k] < w.min_clock) {
      slow.push_back(k);
    }
  }
  return absl::StrCat(
      w.min_clock > 0
          ? absl::StrCat("the end of step ", w.min_clock - 1)
          : absl::StrCat("staleness bound ", s, " at step ", w.step),
      ": waiting for trainer(s) ", absl::StrJoin(slow, ","));
}

int64_t StalenessGate::SlowestLiveClock() const {
  absl::MutexLock l(&mu_);
  int64_t slowest = INT64_MAX;
  for (int k = 0; k < membership_->num_trainers(); ++k) {
    if (membership_->Live(k)) slowest = std::min(slowest, clocks_[k]);
  }
  return slowest == INT64_MAX ? 0 : slowest;
}

int64_t StalenessGate::FastestClock() const {
  absl::MutexLock l(&mu_);
  int64_t fastest = 0;
  for (int64_t c : clocks_) fastest = std::max(fastest, c);
  return fastest;
}

absl::Status StalenessGate::CheckPushStep(int k, int64_t step) const {
  if (!async_) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  if (step > clocks_[k] + kMaxStepLead) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push for step ", step, " from trainer ", k, ": its pushes here have ",
        "reached step ", clocks_[k], ", and a trainer moves at most ",
        kMaxStepLead, " steps between two; refused"));
  }
  return absl::OkStatus();
}

int64_t StalenessGate::clock(int k) const {
  absl::MutexLock l(&mu_);
  return clocks_[k];
}

void StalenessGate::AddTo(CheckpointInfo* info) const {
  absl::MutexLock l(&mu_);
  for (int64_t v : clocks_) info->add_clocks(v);
}

void StalenessGate::Restore(const CheckpointInfo& info,
                            std::vector<WaiterPtr>* dropped) {
  absl::MutexLock l(&mu_);
  if (info.clocks_size() == static_cast<int>(clocks_.size())) {
    clocks_.assign(info.clocks().begin(), info.clocks().end());
  }
  restored_.assign(restored_.size(), true);
  dropped->insert(dropped->end(), held_.begin(), held_.end());
  held_.clear();
}

}  // namespace shardps
