#include "pserver/replication/replicated_units.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/storage/blob_io.h"
#include "glog/logging.h"
#include "pserver/store/dense_table.h"
#include "pserver/store/sparse/sparse_shard.h"
#include "pserver/store/table_snapshot.h"

namespace shardps {

void ReplicatedUnits::SetForwarder(UpdateForwarder* forwarder) {
  CHECK(state_->tables != nullptr) << "SetForwarder before InitJob";
  CHECK(state_->forwarder.load() == nullptr) << "SetForwarder twice";
  state_->forwarder.store(forwarder);
  for (BarrierUnit* u : state_->tables->units()) u->set_replicated();
}

absl::Status ReplicatedUnits::Apply(const std::vector<AppliedUpdate>& updates) {
  if (!state_->is_ready()) {
    return absl::FailedPreconditionError(
        "replicated updates for a job not initialised here");
  }
  std::vector<WaiterPtr> released;
  absl::Status st;
  {
    // Not under the gate: a checkpoint waiting for it on every pserver at
    // once, each behind a push that waits for its forward to the next,
    // would close a ring. The units are fixed once the job is ready; their
    // locks order this against a restore.
    for (const AppliedUpdate& u : updates) {
      absl::StatusOr<BarrierUnit*> b = state_->FindUnit(u.table_id, u.block);
      if (!b.ok()) {
        st = b.status();
        break;
      }
      BarrierUnit* unit = *b;
      absl::MutexLock l(&unit->mu);
      if (u.version < unit->barrier.version()) continue;  // held already
      st = unit->ApplyReplicated(u, &released);
      if (!st.ok()) break;
      ++state_->updates;
    }
  }
  state_->ReleaseAll(released);
  return st;
}

void ReplicatedUnits::AdvanceClocks(const std::vector<PushRef>& pushes) {
  if (!state_->is_ready() || state_->sync) return;
  std::vector<WaiterPtr> released;
  for (const PushRef& p : pushes) {
    if (p.trainer_id < 0 ||
        p.trainer_id >= state_->membership->num_trainers() || p.step < 0) {
      continue;
    }
    state_->staleness->Advance(p.trainer_id, p.step, &released);
  }
  state_->ReleaseAll(released);
}

absl::StatusOr<std::string> ReplicatedUnits::ImageHeld(uint32_t table_id,
                                                       uint32_t unit) const {
  if (!state_->is_ready()) {
    return absl::FailedPreconditionError("job not ready");
  }
  ASSIGN_OR_RETURN(BarrierUnit * u, state_->FindUnit(table_id, unit));
  if (auto* b = dynamic_cast<DenseTableBlock*>(u)) {
    absl::MutexLock l(&b->mu);
    DenseBlobWriter w(1);
    w.Add(unit, b->barrier.version(), b->value, b->slots);
    return std::move(w).Finish();
  }
  auto* s = static_cast<SparseShard*>(u);
  absl::MutexLock l(&s->mu);
  std::string image;
  AppendPod(&image, s->barrier.version());
  RETURN_IF_ERROR(s->rows().Serialize(&image));
  return image;
}

absl::Status ReplicatedUnits::Install(uint32_t table_id, uint32_t unit,
                                      const std::string& image,
                                      uint64_t generation) {
  if (!state_->is_ready()) {
    return absl::FailedPreconditionError("job not ready");
  }
  // Not under the gate, as ApplyReplicated.
  ASSIGN_OR_RETURN(BarrierUnit * u, state_->FindUnit(table_id, unit));
  std::vector<WaiterPtr> dropped;
  absl::Status st;
  if (auto* b = dynamic_cast<DenseTableBlock*>(u)) {
    int num_slots = 0;
    {
      absl::MutexLock l(&b->mu);
      num_slots = static_cast<int>(b->slots.size());
    }
    ASSIGN_OR_RETURN(std::vector<DenseBlockImage> images,
                     ParseDenseBlob(absl::StrCat("installed ", b->name()),
                                    image, {{unit, b->size()}}, num_slots));
    if (images.size() != 1) {
      return absl::DataLossError(absl::StrCat(b->name(), ": ", images.size(),
                                              " blocks installed, not 1"));
    }
    absl::MutexLock l(&b->mu);
    b->Restore(images[0].version, std::move(images[0].value),
               std::move(images[0].slots), &dropped);
  } else {
    auto* s = static_cast<SparseShard*>(u);
    BlobReader in(image);
    int64_t version = 0;
    if (!in.Get(&version) || version < 0) {
      return absl::DataLossError(absl::StrCat(s->name(), ": bad image"));
    }
    absl::MutexLock l(&s->mu);
    st =
        s->rows().Deserialize(absl::string_view(image).substr(sizeof(version)));
    if (st.ok()) {
      s->DisarmSave();
      s->barrier.Reset(version, &dropped);
    }
  }
  if (st.ok() && generation != state_->membership->generation()) {
    state_->membership->AdoptGeneration(generation);
  }
  state_->ReleaseAll(dropped);
  return st;
}

}  // namespace shardps
