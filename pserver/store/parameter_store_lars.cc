// ParameterStore: LARS's table norms (docs/tuning.md, "LARS"). A LARS
// block holds its assembled sync step until the trainers have summed every
// block's squared norms (PullNorms from each pserver) and sent back the
// table's norms (ApplyTrust).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "pserver/store/dense_table.h"
#include "pserver/store/parameter_store.h"

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

absl::Status ParameterStore::TrustUnits(
    absl::Span<const TableNorm> tables,
    std::vector<std::vector<BarrierUnit*>>* units) const {
  absl::Status st;
  for (size_t i = 0; st.ok() && i < tables.size(); ++i) {
    const TableNorm& t = tables[i];
    if (t.table_id >= tables_->num_tables()) {
      st = absl::NotFoundError(absl::StrCat("no table ", t.table_id));
      break;
    }
    if (!std::isfinite(t.weights) || t.weights < 0 ||
        !std::isfinite(t.gradient) || t.gradient < 0) {
      st = absl::InvalidArgumentError(absl::StrCat(
          "LARS norms must be finite and >= 0, got ", t.weights, " and ",
          t.gradient, " for table ", tables_->spec(t.table_id).name()));
      break;
    }
    for (size_t j = 0; j < i; ++j) {
      if (tables[j].table_id == t.table_id) {
        st = absl::InvalidArgumentError(
            absl::StrCat("table ", tables_->spec(t.table_id).name(),
                         " has two norms in one push"));
      }
    }
    if (t.blocks.empty()) {
      for (DenseTableBlock* b : tables_->blocks()) {
        if (b->table_id() == t.table_id) (*units)[i].push_back(b);
      }
    }
    for (size_t k = 0; st.ok() && k < t.blocks.size(); ++k) {
      absl::StatusOr<DenseTableBlock*> b =
          tables_->FindBlock(t.table_id, t.blocks[k]);
      if (!b.ok()) {
        st = b.status();
      } else if (std::find((*units)[i].begin(), (*units)[i].end(), *b) !=
                 (*units)[i].end()) {
        st = absl::InvalidArgumentError(
            absl::StrCat("table ", tables_->spec(t.table_id).name(), " block ",
                         t.blocks[k], " is named twice in one push"));
      } else {
        (*units)[i].push_back(*b);
      }
    }
    if (st.ok() && (*units)[i].empty()) {
      st = absl::NotFoundError(absl::StrCat("no block of table ",
                                            tables_->spec(t.table_id).name(),
                                            " is held here"));
    }
  }
  return st;
}

absl::Status ParameterStore::ApplyTrust(int trainer_id, int64_t step,
                                        absl::Span<const TableNorm> tables,
                                        uint64_t generation) {
  absl::Status st = CheckReadyAndTrainer(trainer_id);
  // Each table's blocks held here, in the order of `tables`.
  std::vector<std::vector<BarrierUnit*>> units(tables.size());
  if (st.ok()) st = TrustUnits(tables, &units);
  std::vector<WaiterPtr> ready;
  if (st.ok()) {
    absl::ReaderMutexLock g(&gate_);
    st = membership_->CheckGeneration("push", generation);
    if (st.ok()) {
      std::vector<BarrierUnit*> all;
      for (const auto& u : units) all.insert(all.end(), u.begin(), u.end());
      // UnitLocks takes them in (table, block) order.
      std::sort(all.begin(), all.end(),
                [](const BarrierUnit* a, const BarrierUnit* b) {
                  return std::make_pair(a->table_id(), a->index()) <
                         std::make_pair(b->table_id(), b->index());
                });
      UnitLocks locks(all);
      // All or nothing: every block of every table must take its ratio.
      for (BarrierUnit* u : all) {
        u->mu.AssertHeld();
        st = CheckServes(*u);
        if (st.ok()) {
          st = static_cast<DenseTableBlock*>(u)->CanApplyTrust(step).status();
        }
        if (!st.ok()) break;
      }
      // Replicated: the steps applied go to the backups (with the ratio)
      // before the blocks' locks are released.
      UpdateCollector collect;
      for (size_t i = 0; st.ok() && i < tables.size(); ++i) {
        const float ratio =
            tables_->optimizer(tables[i].table_id)
                .TrustRatio(tables[i].weights, tables[i].gradient);
        for (BarrierUnit* u : units[i]) {
          u->mu.AssertHeld();
          static_cast<DenseTableBlock*>(u)->ApplyTrust(step, ratio, &ready);
        }
      }
      if (st.ok()) st = ForwardCollected(collect, -1, 0, 0);
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
