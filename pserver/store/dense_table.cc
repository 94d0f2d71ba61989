#include "pserver/store/dense_table.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "kernels/vector_ops.h"
#include "pserver/store/table_snapshot.h"

namespace shardps {

DenseTableBlock::DenseTableBlock(uint32_t table_id, uint32_t index,
                                 int64_t size, const std::string& table_name,
                                 const Optimizer* optimizer,
                                 const Membership* membership, int quorum)
    : BarrierUnit(table_id, index,
                  absl::StrCat("table ", table_name, " block ", index), "block",
                  membership, quorum),
      size_(size),
      optimizer_(optimizer),
      single_trainer_(membership->num_trainers() == 1) {}

void DenseTableBlock::SaveIfPending() {
  if (pending_save_ == nullptr) return;
  std::string record;
  record.reserve(24 + sizeof(float) * value.size() * (1 + slots.size()));
  AppendDenseRecord(&record, index(), barrier.version(), value, slots);
  pending_save_->Append(table_id(), record);
  pending_save_ = nullptr;
  saved_version_ = barrier.version();
}

void DenseTableBlock::SetInitialValue(absl::Span<const float> values) {
  SaveIfPending();
  value.assign(values.begin(), values.end());
  slots.assign(optimizer_->num_slots(),
               std::vector<float>(size_, optimizer_->initial_slot_value()));
  has_value = true;
}

void DenseTableBlock::Restore(int64_t version, std::vector<float> new_value,
                              std::vector<std::vector<float>> new_slots,
                              std::vector<WaiterPtr>* dropped) {
  SaveIfPending();
  value = std::move(new_value);
  slots = std::move(new_slots);
  has_value = true;
  accum_.clear();
  norms_step_ = -1;
  DisarmSave();  // an armed save waits for a version of the old timeline
  barrier.Reset(version, dropped);
  // Not known to be on disk as this checkpoint's base (a replica's install,
  // or a restore after which the next save is full anyway): the next delta
  // writes it.
  saved_version_ = -1;
}

std::optional<AppliedUpdate> DenseTableBlock::Apply(
    int64_t step, float scale, absl::Span<const float> grad, bool sync,
    float trust_ratio, bool record) {
  // A save in progress takes the block as it was before this step.
  SaveIfPending();
  std::optional<AppliedUpdate> u;
  if (record) u = UpdateRecord(step, sync);
  if (u.has_value()) {
    u->scales = {scale};
    u->grad.assign(grad.begin(), grad.end());
    u->trust_ratio = trust_ratio;
  }
  std::vector<absl::Span<float>> spans;
  spans.reserve(slots.size());
  for (auto& s : slots) spans.push_back(absl::MakeSpan(s));
  // A backup applying the same record refuses it alike.
  if (!optimizer_->ApplyIfFinite(step, barrier.version(), scale, grad,
                                 absl::MakeSpan(value), spans, trust_ratio)) {
    ++non_finite_updates;
    LOG_EVERY_T(WARNING, 10)
        << name() << ": the update of step " << step
        << " would make a value or optimizer state infinite or NaN (a huge "
           "gradient or learning rate); not applied, the step goes on "
           "(shardps_pserver_non_finite_updates_total counts them)";
  }
  return u;
}

void DenseTableBlock::Accumulate(const PushPayload& p, bool first) {
  if (single_trainer_) return;  // ApplyStep takes the push itself
  if (first) {
    accum_.assign(p.values.begin(), p.values.end());
  } else {
    AddInto(accum_.data(), p.values.data(), p.values.size());
  }
}

std::optional<AppliedUpdate> DenseTableBlock::ApplyStep(
    const PushPayload* last, std::vector<WaiterPtr>* ready) {
  const int64_t step = barrier.version();
  if (optimizer_->needs_table_norms()) {
    // LARS: the step waits for its table's norms (ApplyTrust).
    if (single_trainer_) {
      CHECK(last != nullptr) << "a one-trainer step completes with its push";
      accum_.assign(last->values.begin(), last->values.end());
      assembled_scale_ = 1.0f;
    } else {
      assembled_scale_ = 1.0f / barrier.num_done();
    }
    norms_ = Optimizer::Partials(assembled_scale_, accum_, value);
    norms_step_ = step;
    barrier.Assembled(ready);
    return std::nullopt;
  }
  std::optional<AppliedUpdate> u;
  if (single_trainer_) {
    CHECK(last != nullptr) << "a one-trainer step completes with its push";
    u = Apply(step, 1.0f, last->values, /*sync=*/true);
  } else {
    u = Apply(step, 1.0f / barrier.num_done(), accum_, /*sync=*/true);
  }
  barrier.Advance(ready);
  Reached();
  return u;
}

std::optional<AppliedUpdate> DenseTableBlock::ApplyNow(int64_t step,
                                                       const PushPayload& p) {
  std::optional<AppliedUpdate> u = Apply(step, 1.0f, p.values, /*sync=*/false);
  barrier.Bump();
  return u;
}

absl::Status DenseTableBlock::ApplyReplicated(const AppliedUpdate& update,
                                              std::vector<WaiterPtr>* ready) {
  RETURN_IF_ERROR(CheckReplicated(update));
  if (static_cast<int64_t>(update.grad.size()) != size_ ||
      update.scales.size() != 1 || !update.keys.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": a replicated update with ", update.grad.size(),
                     " values and ", update.scales.size(), " scales, for ",
                     size_, " values and 1 scale"));
  }
  if (optimizer_->needs_table_norms()) {
    if (!update.sync) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": an async replicated update of a LARS block"));
    }
    // The norms the primary gave out for this step, so that a trainer that
    // asks for them after a failover gets the same bits.
    norms_ = Optimizer::Partials(update.scales[0], update.grad, value);
    norms_step_ = update.step;
  } else if (update.trust_ratio != 1.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": a replicated update with trust ratio ",
                     update.trust_ratio, " for a block without LARS"));
  }
  Apply(update.step, update.scales[0], update.grad, update.sync,
        update.trust_ratio, /*record=*/false);
  if (update.sync) {
    barrier.Advance(ready);
    Reached();
  } else {
    barrier.Bump();
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> DenseTableBlock::NormsReady(int64_t step) const {
  if (!optimizer_->needs_table_norms()) return BarrierUnit::NormsReady(step);
  if (norms_step_ == step) return true;
  if (step == barrier.version() && !barrier.assembled()) return false;
  return absl::InvalidArgumentError(
      absl::StrCat(name(), ": no norms of step ", step,
                   " (the block is at version ", barrier.version(), ")"));
}

absl::StatusOr<bool> DenseTableBlock::CanApplyTrust(int64_t step) const {
  if (!optimizer_->needs_table_norms()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), " is not a LARS block: no trust ratio to apply"));
  }
  if (step == barrier.version() && barrier.assembled()) return true;
  // Applied already: here, or by the primary this backup took over from
  // (a trainer's norms sent again after a failover); nothing to do.
  if (step < barrier.version()) return true;
  return absl::FailedPreconditionError(absl::StrCat(
      name(), ": the trust ratio of step ", step, " came at version ",
      barrier.version(),
      barrier.assembled() ? " (assembled)" : " (step not assembled yet)"));
}

std::optional<AppliedUpdate> DenseTableBlock::ApplyTrust(
    int64_t step, float trust_ratio, std::vector<WaiterPtr>* ready) {
  if (step != barrier.version()) return std::nullopt;  // applied already
  std::optional<AppliedUpdate> u =
      Apply(step, assembled_scale_, accum_, /*sync=*/true, trust_ratio);
  barrier.Advance(ready);
  Reached();
  return u;
}

void DenseTableBlock::Read(const PullTarget& target,
                           const PullSink& sink) const {
  // Held by a scoped lock either way: the sink may throw (bad_alloc), and
  // the block must not stay locked. Only a replicated unit waits for its
  // update in flight (the slow path); any other is always settled.
  if (!replicated()) {
    absl::MutexLock l(&mu);
    ReadLocked(target, sink);
    return;
  }
  absl::MutexLock l(&mu, absl::Condition(this, &BarrierUnit::settled));
  ReadLocked(target, sink);
}

void DenseTableBlock::ReadLocked(const PullTarget& target,
                                 const PullSink& sink) const {
  if (target.norms_out != nullptr) {
    target.norms_out[0] = norms_.weights;
    target.norms_out[1] = norms_.gradient;
    target.norms_out[2] = static_cast<double>(norms_step_);
    return;
  }
  sink(table_id(), index(), barrier.version(), value);
}

}  // namespace shardps
