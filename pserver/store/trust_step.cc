#include "pserver/store/trust_step.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "pserver/store/dense_table.h"

namespace shardps {

absl::Status TrustStep::Units(
    absl::Span<const TableNorm> tables,
    std::vector<std::vector<BarrierUnit*>>* units) const {
  absl::Status st;
  for (size_t i = 0; st.ok() && i < tables.size(); ++i) {
    const TableNorm& t = tables[i];
    if (t.table_id >= state_->tables->num_tables()) {
      st = absl::NotFoundError(absl::StrCat("no table ", t.table_id));
      break;
    }
    if (!std::isfinite(t.weights) || t.weights < 0 ||
        !std::isfinite(t.gradient) || t.gradient < 0) {
      st = absl::InvalidArgumentError(absl::StrCat(
          "LARS norms must be finite and >= 0, got ", t.weights, " and ",
          t.gradient, " for table ", state_->tables->spec(t.table_id).name()));
      break;
    }
    for (size_t j = 0; j < i; ++j) {
      if (tables[j].table_id == t.table_id) {
        st = absl::InvalidArgumentError(
            absl::StrCat("table ", state_->tables->spec(t.table_id).name(),
                         " has two norms in one push"));
      }
    }
    if (t.blocks.empty()) {
      for (DenseTableBlock* b : state_->tables->blocks()) {
        if (b->table_id() == t.table_id) (*units)[i].push_back(b);
      }
    }
    for (size_t k = 0; st.ok() && k < t.blocks.size(); ++k) {
      absl::StatusOr<DenseTableBlock*> b =
          state_->tables->FindBlock(t.table_id, t.blocks[k]);
      if (!b.ok()) {
        st = b.status();
      } else if (std::find((*units)[i].begin(), (*units)[i].end(), *b) !=
                 (*units)[i].end()) {
        st = absl::InvalidArgumentError(absl::StrCat(
            "table ", state_->tables->spec(t.table_id).name(), " block ",
            t.blocks[k], " is named twice in one push"));
      } else {
        (*units)[i].push_back(*b);
      }
    }
    if (st.ok() && (*units)[i].empty()) {
      st = absl::NotFoundError(absl::StrCat(
          "no block of table ", state_->tables->spec(t.table_id).name(),
          " is held here"));
    }
  }
  return st;
}

absl::Status TrustStep::Apply(int trainer_id, int64_t step,
                              absl::Span<const TableNorm> tables,
                              uint64_t generation) {
  absl::Status st = state_->CheckReadyAndTrainer(trainer_id);
  // Each table's blocks held here, in the order of `tables`.
  std::vector<std::vector<BarrierUnit*>> units(tables.size());
  if (st.ok()) st = Units(tables, &units);
  std::vector<WaiterPtr> ready;
  if (st.ok()) {
    absl::ReaderMutexLock g(&state_->gate);
    st = state_->membership->CheckGeneration("push", generation);
    AppliedUpdates applied;
    if (st.ok()) st = ApplyLocked(step, tables, units, &ready, &applied);
    // Replicated: the steps applied (with the ratio) reach the backups
    // before the pulls they released are answered.
    const absl::Status forwarded = state_->Forward(applied, -1, 0, 0);
    if (st.ok()) st = forwarded;
  }
  if (!st.ok()) {
    ++state_->rejected;
    return st;
  }
  ++state_->pushes;
  state_->ReleaseAll(ready);
  return absl::OkStatus();
}

absl::Status TrustStep::ApplyLocked(
    int64_t step, absl::Span<const TableNorm> tables,
    const std::vector<std::vector<BarrierUnit*>>& units,
    std::vector<WaiterPtr>* ready, AppliedUpdates* applied) {
  std::vector<BarrierUnit*> all;
  for (const auto& u : units) all.insert(all.end(), u.begin(), u.end());
  // UnitLocks takes them in (table, block) order.
  std::sort(all.begin(), all.end(),
            [](const BarrierUnit* a, const BarrierUnit* b) {
              return a->LockedBefore(*b);
            });
  UnitLocks locks(all);
  // All or nothing: every block of every table must take its ratio.
  for (BarrierUnit* u : all) {
    u->mu.AssertHeld();
    RETURN_IF_ERROR(state_->CheckServes(*u));
    RETURN_IF_ERROR(
        static_cast<DenseTableBlock*>(u)->CanApplyTrust(step).status());
  }
  for (size_t i = 0; i < tables.size(); ++i) {
    const float ratio = state_->tables->optimizer(tables[i].table_id)
                            .TrustRatio(tables[i].weights, tables[i].gradient);
    for (BarrierUnit* u : units[i]) {
      u->mu.AssertHeld();
      applied->Add(
          u, static_cast<DenseTableBlock*>(u)->ApplyTrust(step, ratio, ready));
    }
  }
  return absl::OkStatus();
}

}  // namespace shardps
