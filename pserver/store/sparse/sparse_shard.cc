// SparseShard: a sparse table as a barrier unit.
#include "pserver/store/sparse/sparse_shard.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "pserver/store/sparse/sparse_table.h"

namespace shardps {

SparseShard::SparseShard(uint32_t table_id, const TableSpec& spec,
                         const Optimizer* optimizer,
                         const Membership* membership, int quorum,
                         MemoryBudget* budget, uint32_t shard, bool sharded,
                         int64_t memory_share, std::unique_ptr<RowStore> store)
    : BarrierUnit(
          table_id, shard,
          sharded ? absl::StrCat("sparse table ", spec.name(), " shard ", shard)
                  : absl::StrCat("sparse table ", spec.name()),
          "table", membership, quorum),
      name_(spec.name()),
      options_(spec.sparse()),
      optimizer_(optimizer),
      rows_(spec.sparse(), optimizer, SparseTable::kDefaultStripes, budget,
            memory_share, /*clock=*/nullptr, std::move(store)) {}

absl::Status SparseShard::Verify(absl::string_view blob) const {
  if (rows_.on_disk()) return SparseTableBlob::Check(rows_, blob);
  // Deserialize empties the table it fails on: load into a scratch one.
  SparseTable scratch(options_, optimizer_, /*num_stripes=*/1);
  return scratch.Deserialize(blob);
}

void SparseShard::Accumulate(const PushPayload& p, bool first) {
  rows_.Accumulate(p.keys, p.values);
}

std::optional<AppliedUpdate> SparseShard::ApplyStep(
    const PushPayload* last, std::vector<WaiterPtr>* ready) {
  const int64_t version = barrier.version();
  std::optional<AppliedUpdate> u = UpdateRecord(version, /*sync=*/true);
  rows_.ApplyAccumulated(version, barrier.num_done(),
                         u.has_value() ? &*u : nullptr);
  barrier.Advance(ready);
  if (ExpiryDue(barrier.version(), /*sync=*/true)) {
    Expire(barrier.version(), u.has_value() ? &u->expired : nullptr);
  }
  Reached();
  return u;
}

std::optional<AppliedUpdate> SparseShard::ApplyNow(int64_t step,
                                                   const PushPayload& p) {
  std::optional<AppliedUpdate> u = UpdateRecord(step, /*sync=*/false);
  if (u.has_value()) {
    u->job_step = p.job_step;
    u->keys.assign(p.keys.begin(), p.keys.end());
    u->scales = {1.0f};
    u->grad.assign(p.values.begin(), p.values.end());
  }
  const float one[] = {1.0f};
  rows_.Apply(step, p.keys, p.values, one,
              u.has_value() ? &u->evicted_full : nullptr);
  barrier.Bump();
  // Paced by the slowest live trainer, not by this push's step: one
  // client's step cannot expire the others' rows.
  if (ExpiryDue(p.job_step, /*sync=*/false)) {
    Expire(p.job_step, u.has_value() ? &u->expired : nullptr);
  }
  return u;
}

bool SparseShard::ExpiryDue(int64_t step, bool sync) {
  if (!rows_.policy().PassDue(step, last_expiry_step_, sync)) return false;
  last_expiry_step_ = step;
  return true;
}

absl::Status SparseShard::ApplyReplicated(const AppliedUpdate& update,
                                          std::vector<WaiterPtr>* ready) {
  RETURN_IF_ERROR(CheckReplicated(update));
  const size_t n = update.keys.size();
  if (update.grad.size() != n * static_cast<size_t>(rows_.dim()) ||
      (update.scales.size() != 1 && update.scales.size() != n)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": a replicated update of ", n, " keys with ",
                     update.grad.size(), " gradient values and ",
                     update.scales.size(), " scales (dim ", rows_.dim(), ")"));
  }
  // The primary's evictions, not this pserver's own: the same rows go.
  rows_.DropRows(update.evicted_full, /*full=*/true);
  rows_.Apply(update.step, update.keys, update.grad, update.scales,
              /*evicted_full=*/nullptr, /*evict_when_full=*/false);
  int64_t step = update.job_step;
  if (update.sync) {
    barrier.Advance(ready);
    step = barrier.version();
  } else {
    barrier.Bump();
  }
  if (ExpiryDue(step, update.sync)) {
    rows_.DropRows(update.expired, /*full=*/false);
    rows_.ForgetSightings(step);
  }
  if (update.sync) Reached();
  return absl::OkStatus();
}

void SparseShard::Expire(int64_t step, std::vector<uint64_t>* expired) {
  const int64_t n = rows_.Expire(step, expired);
  if (n > 0) {
    VLOG(1) << "sparse table " << name_ << ": " << n << " rows expired at step "
            << step;
  }
}

void SparseShard::Read(const PullTarget& target, const PullSink& sink) const {
  if (!replicated()) {
    rows_.Read(target.keys, target.out);
    return;
  }
  // Once no update is in flight, and none starts while the rows are read.
  mu.ReaderLockWhen(absl::Condition(this, &BarrierUnit::settled));
  rows_.Read(target.keys, target.out);
  mu.ReaderUnlock();
}

}  // namespace shardps
