// ParameterStore: reports (versions, counters, tables) and replication
// (docs/replication.md: the forwarder, and a backup's applied updates).
#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/storage/blob_io.h"
#include "glog/logging.h"
#include "pserver/store/parameter_store.h"

namespace shardps {

// --- Replication ---

void ParameterStore::set_forwarder(UpdateForwarder* forwarder) {
  CHECK(tables_ != nullptr) << "set_forwarder before InitJob";
  CHECK(forwarder_.load() == nullptr) << "set_forwarder twice";
  forwarder_.store(forwarder);
  for (BarrierUnit* u : tables_->units()) {
    absl::MutexLock l(&u->mu);
    u->set_update_sink([](AppliedUpdate a) { UpdateCollector::Add(a); });
  }
}

absl::Status ParameterStore::CheckServes(const BarrierUnit& unit) const {
  UpdateForwarder* f = forwarder_.load(std::memory_order_acquire);
  if (f == nullptr) return absl::OkStatus();
  return f->CheckServes(unit.table_id(), unit.index());
}

absl::Status ParameterStore::ForwardCollected(const UpdateCollector& c,
                                              int trainer_id,
                                              uint64_t request_id,
                                              int64_t step) {
  UpdateForwarder* f = forwarder_.load(std::memory_order_acquire);
  if (f == nullptr || c.updates().empty()) return absl::OkStatus();
  std::vector<PushRef> pushes;
  if (trainer_id >= 0) pushes.push_back(PushRef{trainer_id, request_id, step});
  return f->Forward(c.updates(), pushes);
}

void ParameterStore::ReplicatedPushes(const std::vector<PushRef>& pushes) {
  if (!ready() || sync_) return;
  std::vector<WaiterPtr> released;
  for (const PushRef& p : pushes) {
    if (p.trainer_id < 0 || p.trainer_id >= membership_->num_trainers() ||
        p.step < 0) {
      continue;
    }
    staleness_->Advance(p.trainer_id, p.step, &released);
  }
  ReleaseAll(released);
}

absl::StatusOr<BarrierUnit*> ParameterStore::FindUnit(uint32_t table_id,
                                                      uint32_t unit) const {
  if (table_id < static_cast<uint32_t>(job_.tables_size()) &&
      job_.tables(table_id).kind() == TableSpec::SPARSE) {
    return tables_->FindSparse(table_id, static_cast<int>(unit));
  }
  return tables_->FindBlock(table_id, unit);
}

absl::StatusOr<std::string> ParameterStore::UnitImageHeld(uint32_t table_id,
                                                          uint32_t unit) const {
  if (!ready()) return absl::FailedPreconditionError("job not ready");
  ASSIGN_OR_RETURN(BarrierUnit * u, FindUnit(table_id, unit));
  if (auto* b = dynamic_cast<DenseTableBlock*>(u)) {
    b->mu.AssertHeld();
    DenseBlobWriter w(1);
    w.Add(unit, b->barrier.version(), b->value, b->slots);
    return std::move(w).Finish();
  }
  auto* s = static_cast<SparseShard*>(u);
  s->mu.AssertHeld();
  std::string image;
  AppendPod(&image, s->barrier.version());
  s->rows().Serialize(&image);
  return image;
}

absl::Status ParameterStore::InstallUnit(uint32_t table_id, uint32_t unit,
                                         const std::string& image,
                                         uint64_t generation) {
  if (!ready()) return absl::FailedPreconditionError("job not ready");
  // Not under the gate, as ApplyReplicated.
  ASSIGN_OR_RETURN(BarrierUnit * u, FindUnit(table_id, unit));
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
    if (st.ok()) s->barrier.Reset(version, &dropped);
  }
  if (st.ok() && generation != membership_->generation()) {
    membership_->AdoptGeneration(generation);
  }
  ReleaseAll(dropped);
  return st;
}

absl::Status ParameterStore::ApplyReplicated(
    const std::vector<AppliedUpdate>& updates) {
  if (!ready()) {
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
      absl::StatusOr<BarrierUnit*> b = FindUnit(u.table_id, u.block);
      if (!b.ok()) {
        st = b.status();
        break;
      }
      BarrierUnit* unit = *b;
      absl::MutexLock l(&unit->mu);
      if (u.version < unit->barrier.version()) continue;  // held already
      UpdateCollector none;  // a backup forwards nothing
      st = unit->ApplyReplicated(u, &released);
      if (!st.ok()) break;
      ++updates_;
    }
  }
  ReleaseAll(released);
  return st;
}

// --- Reports ---

ParameterStore::VersionRange ParameterStore::Versions() const {
  if (!ready()) return VersionRange{};
  VersionRange r{INT64_MAX, 0};
  for (BarrierUnit* u : tables_->units()) {
    absl::MutexLock l(&u->mu);
    r.min = std::min(r.min, u->barrier.version());
    r.max = std::max(r.max, u->barrier.version());
  }
  if (r.min == INT64_MAX) r.min = 0;
  return r;
}

StoreCounters ParameterStore::counters() const {
  StoreCounters c;
  c.pushes = pushes_.load();
  c.block_updates = updates_.load();
  c.duplicate_block_pushes = duplicates_.load();
  c.rejected_requests = rejected_.load();
  c.pulls = pulls_.load();
  c.pull_timeouts = pull_timeouts_.load();
  c.late_block_pushes = late_.load();
  c.rollbacks = rollbacks_.load();
  if (ready()) {
    c.dropped_trainers = membership_->dropped();
    c.rejoined_trainers = membership_->rejoined();
  }
  return c;
}

std::vector<ParameterStore::SparseTableStats> ParameterStore::SparseStats()
    const {
  std::vector<SparseTableStats> out;
  if (!ready()) return out;
  for (const SparseShard* s : tables_->sparse()) {
    out.push_back(SparseTableStats{s->table_name(), s->rows().counters(),
                                   s->rows().MemoryBytes()});
  }
  return out;
}

std::vector<ParameterStore::TableProgress> ParameterStore::Progress() const {
  std::vector<TableProgress> out;
  if (!ready()) return out;
  absl::flat_hash_map<uint32_t, size_t> index;  // table id -> out[i]
  for (BarrierUnit* u : tables_->units()) {
    auto [it, added] = index.try_emplace(u->table_id(), out.size());
    if (added) {
      const TableSpec& spec = tables_->spec(u->table_id());
      out.push_back(
          TableProgress{spec.name(), spec.kind() == TableSpec::SPARSE, 0});
    }
    absl::MutexLock l(&u->mu);
    out[it->second].steps =
        std::max(out[it->second].steps, u->barrier.version());
  }
  return out;
}

int64_t ParameterStore::dense_bytes() const {
  return ready() ? tables_->bytes() : 0;
}

size_t ParameterStore::num_blocks() const {
  absl::MutexLock l(&init_mu_);
  return init_blocks_.size();
}

std::vector<float> ParameterStore::TEST_BlockValues(uint32_t table_id,
                                                    uint32_t block) const {
  if (!ready()) return {};
  auto b = tables_->FindBlock(table_id, block);
  if (!b.ok()) return {};
  absl::MutexLock l(&(*b)->mu);
  return (*b)->value;
}

int64_t ParameterStore::TEST_BlockVersion(uint32_t table_id,
                                          uint32_t block) const {
  if (!ready()) return -1;
  auto b = tables_->FindBlock(table_id, block);
  if (!b.ok()) return -1;
  absl::MutexLock l(&(*b)->mu);
  return (*b)->barrier.version();
}

}  // namespace shardps
