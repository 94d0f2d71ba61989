#include "pserver/store/step/step_barrier.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "pserver/store/step/pull_waiters.h"

namespace shardps {

StepBarrier::StepBarrier(std::string unit, const char* noun,
                         const Membership* membership, int quorum)
    : unit_(std::move(unit)),
      noun_(noun),
      membership_(membership),
      quorum_(quorum),
      expected_(membership->num_trainers(), 0),
      received_(membership->num_trainers(), 0),
      done_(membership->num_trainers(), 0) {}

absl::StatusOr<StepBarrier::Admission> StepBarrier::Admit(
    int k, int64_t step, int32_t num_chunks) const {
  if (step < version_ && quorum_ > 0) return Admission::kLate;
  if (step < version_) {
    return absl::FailedPreconditionError(
        absl::StrCat("push for step ", step, " of ", unit_,
                     " refused: that step was already applied (the ", noun_,
                     " is at version ", version_, ")"));
  }
  if (step > version_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "push for step ", step, " of ", unit_, " refused: the ", noun_,
        " is still at step ", version_, " (pull with min_version first)"));
  }
  if (expected_[k] != 0 && expected_[k] != num_chunks) {
    return absl::InvalidArgumentError(
        absl::StrCat(unit_, ": trainer ", k, " announced ", expected_[k],
                     " chunks for step ", step, ", now ", num_chunks));
  }
  return Admission::kApply;
}

StepBarrier::Received StepBarrier::Receive(int k, int32_t num_chunks) {
  if (expected_[k] != 0 && received_[k] >= expected_[k]) {
    return {Arrival::kDuplicate, false};
  }
  const bool first = num_received_ == 0;
  ++num_received_;
  expected_[k] = num_chunks;
  if (++received_[k] < expected_[k]) return {Arrival::kPartial, first};
  done_[k] = 1;
  ++num_done_;
  return {Arrival::kTrainerDone, first};
}

bool StepBarrier::Complete() const {
  if (num_done_ == 0 || assembled_) return false;
  if (quorum_ > 0 && num_done_ >= quorum_) return true;
  for (int k = 0; k < num_trainers(); ++k) {
    if (!done_[k] && membership_->Required(k, version_)) return false;
  }
  return true;
}

void StepBarrier::Advance(std::vector<WaiterPtr>* ready) {
  ++version_;
  assembled_ = false;
  std::fill(expected_.begin(), expected_.end(), 0);
  std::fill(received_.begin(), received_.end(), 0);
  std::fill(done_.begin(), done_.end(), 0);
  num_done_ = 0;
  num_received_ = 0;
  auto keep = std::partition(held_.begin(), held_.end(), [this](const auto& p) {
    return p.first > version_;
  });
  for (auto it = keep; it != held_.end(); ++it) {
    ready->push_back(std::move(it->second));
  }
  held_.erase(keep, held_.end());
}

void StepBarrier::Hold(int64_t min_version, WaiterPtr w) {
  // Pulls answered meanwhile (timed out) are let go here, so that a unit
  // that stays at one version does not collect them.
  held_.erase(
      std::remove_if(held_.begin(), held_.end(),
                     [](const auto& p) { return p.second->finished.load(); }),
      held_.end());
  held_.emplace_back(min_version, std::move(w));
}

void StepBarrier::Assembled(std::vector<WaiterPtr>* ready) {
  assembled_ = true;
  for (WaiterPtr& w : held_for_assembly_) ready->push_back(std::move(w));
  held_for_assembly_.clear();
}

void StepBarrier::HoldForAssembly(WaiterPtr w) {
  held_for_assembly_.erase(
      std::remove_if(held_for_assembly_.begin(), held_for_assembly_.end(),
                     [](const WaiterPtr& p) { return p->finished.load(); }),
      held_for_assembly_.end());
  held_for_assembly_.push_back(std::move(w));
}

void StepBarrier::Reset(int64_t version, std::vector<WaiterPtr>* dropped) {
  version_ = version;
  assembled_ = false;
  for (WaiterPtr& w : held_for_assembly_) dropped->push_back(std::move(w));
  held_for_assembly_.clear();
  std::fill(expected_.begin(), expected_.end(), 0);
  std::fill(received_.begin(), received_.end(), 0);
  std::fill(done_.begin(), done_.end(), 0);
  num_done_ = 0;
  num_received_ = 0;
  for (auto& [v, w] : held_) dropped->push_back(std::move(w));
  held_.clear();
}

void StepBarrier::AppendMissing(std::vector<int>* missing) const {
  for (int k = 0; k < num_trainers(); ++k) {
    if (!membership_->Required(k, version_) || done_[k]) continue;
    if (std::find(missing->begin(), missing->end(), k) == missing->end()) {
      missing->push_back(k);
    }
  }
}

UnitLocks::UnitLocks(absl::Span<BarrierUnit* const> units)
    ABSL_NO_THREAD_SAFETY_ANALYSIS : units_(units) {
  // One at a time, each settled before the next is taken: a unit held here
  // is never one whose update another thread still has to settle.
  for (const BarrierUnit* u : units_) {
    if (u->replicated()) {
      u->mu.LockWhen(absl::Condition(u, &BarrierUnit::settled));
    } else {
      u->mu.Lock();
    }
  }
}

UnitLocks::~UnitLocks() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (auto it = units_.rbegin(); it != units_.rend(); ++it) {
    (*it)->mu.Unlock();
  }
}

std::optional<AppliedUpdate> BarrierUnit::UpdateRecord(int64_t step,
                                                       bool sync) {
  if (!replicated_.load()) return std::nullopt;
  ++in_flight_;
  AppliedUpdate u;
  u.table_id = table_id_;
  u.block = index_;
  u.step = step;
  u.version = barrier.version();
  u.sync = sync;
  return u;
}

void BarrierUnit::ArmSave(int64_t version, SaveSink* sink, bool delta) {
  CHECK_LT(barrier.version(), version) << name_ << ": armed at its version";
  armed_sink_ = sink;
  armed_version_ = version;
  armed_delta_ = delta;
  save_called_off_ = false;
}

void BarrierUnit::Reached() {
  if (armed_sink_ == nullptr || barrier.version() != armed_version_) return;
  MarkForSave(armed_sink_, armed_delta_);
  armed_sink_ = nullptr;
}

void BarrierUnit::Settle() {
  absl::MutexLock l(&mu);
  CHECK_GT(in_flight_, 0) << name_ << ": settled with no update in flight";
  --in_flight_;
}

absl::Status BarrierUnit::CheckReplicated(const AppliedUpdate& update) const {
  if (update.table_id != table_id_ || update.block != index_) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": a replicated update of table id ",
                     update.table_id, " unit ", update.block));
  }
  if (update.version != barrier.version()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, " is at version ", barrier.version(),
                     "; a replicated update of version ", update.version,
                     " does not follow it"));
  }
  return absl::OkStatus();
}

}  // namespace shardps
