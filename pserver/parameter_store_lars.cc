// ParameterStore: LARS's table norms (docs/tuning.md, "LARS"). A LARS
// block holds its assembled sync step until the trainers have summed every
// block's squared norms (PullNorms from each pserver) and sent back the
// table's norms (ApplyTrust).
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "pserver/dense_table.h"
#include "pserver/parameter_store.h"

namespace shardps {

void ParameterStore::PullNorms(int trainer_id, int64_t step,
                               absl::Span<const BlockId> blocks, double* out,
                               PullDone done, uint64_t generation) {
  absl::Status st = CheckReadyAndTrainer(trainer_id);
  if (st.ok() && !sync_) {
    st = absl::InvalidArgumentError(
        "a pull of LARS norms in an ASYNC job (LARS needs SYNC)");
  }
  if (st.ok() && (step < 0 || step == INT64_MAX || blocks.empty())) {
    st = absl::InvalidArgumentError(
        "a pull of LARS norms needs a step >= 0 and at least one block");
  }
  if (st.ok()) st = membership_->CheckGeneration("pull", generation);
  auto w = std::make_shared<PullWaiter>();
  if (st.ok()) st = AddBlockTargets(blocks, out, w.get());
  w->trainer_id = trainer_id;
  w->norms_step = step;
  // What DescribeWait reports: the pushes of `step` that are missing.
  w->min_version = st.ok() ? step + 1 : 0;  // step < INT64_MAX when ok
  Admit(std::move(st), w, std::move(done), generation);
}

absl::Status ParameterStore::ApplyTrust(int trainer_id, int64_t step,
                                        uint32_t table_id, double weights_norm,
                                        double gradient_norm,
                                        uint64_t generation) {
  absl::Status st = CheckReadyAndTrainer(trainer_id);
  if (st.ok() && table_id >= tables_->num_tables()) {
    st = absl::NotFoundError(absl::StrCat("no table ", table_id));
  }
  if (st.ok() && (!std::isfinite(weights_norm) || weights_norm < 0 ||
                  !std::isfinite(gradient_norm) || gradient_norm < 0)) {
    st = absl::InvalidArgumentError(
        absl::StrCat("LARS norms must be finite and >= 0, got ", weights_norm,
                     " and ", gradient_norm));
  }
  std::vector<BarrierUnit*> units;
  if (st.ok()) {
    for (DenseTableBlock* b : tables_->blocks()) {
      if (b->table_id() == table_id) units.push_back(b);
    }
    if (units.empty()) {
      st = absl::NotFoundError(absl::StrCat("no block of table ",
                                            tables_->spec(table_id).name(),
                                            " is held here"));
    }
  }
  std::vector<WaiterPtr> ready;
  if (st.ok()) {
    absl::ReaderMutexLock g(&gate_);
    st = membership_->CheckGeneration("push", generation);
    if (st.ok()) {
      UnitLocks locks(units);
      // All or nothing: every block must be able to take the ratio.
      for (BarrierUnit* u : units) {
        u->mu.AssertHeld();
        st = CheckServes(*u);
        if (st.ok()) {
          st = static_cast<DenseTableBlock*>(u)->CanApplyTrust(step).status();
        }
        if (!st.ok()) break;
      }
      if (st.ok()) {
        const float ratio = tables_->optimizer(table_id).TrustRatio(
            weights_norm, gradient_norm);
        for (BarrierUnit* u : units) {
          u->mu.AssertHeld();
          static_cast<DenseTableBlock*>(u)->ApplyTrust(step, ratio, &ready);
        }
      }
    }
  }
  if (!st.ok()) {
    ++rejected_;
    return st;
  }
  ++pushes_;
  ReleaseAll(ready);
  return absl::OkStatus();
}

}  // namespace shardps
