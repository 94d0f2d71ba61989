#ifndef SHARDPS_PSERVER_STORE_TRUST_STEP_H_
#define SHARDPS_PSERVER_STORE_TRUST_STEP_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "pserver/store/store_state.h"

namespace shardps {

// LARS's table norms (docs/tuning.md, "LARS"), SYNC: a LARS block holds its
// assembled step until the trainers have summed every block's squared
// norms (ParameterStore::PullNorms from each pserver) and sent back the
// table's norms, which this part applies. Thread-safe.
class TrustStep {
 public:
  // `state` must outlive it.
  explicit TrustStep(StoreState* state) : state_(state) {}

  TrustStep(const TrustStep&) = delete;
  TrustStep& operator=(const TrustStep&) = delete;

  struct TableNorm {
    uint32_t table_id = 0;
    double weights = 0;   // the whole table's weights' norm
    double gradient = 0;  // and its gradient's
    // The blocks to apply, each held here once (NOT_FOUND, or
    // INVALID_ARGUMENT for one named twice); empty: every block of the
    // table held here.
    std::vector<uint32_t> blocks;
  };
  // With the norms of whole tables (the square roots of the sums over
  // every block of every pserver), applies step `step` to the tables'
  // blocks held here and answers the pulls of the next version; a
  // replicated job's updates reach the backups first. All or nothing: where
  // one table's blocks cannot take the ratio, no table's are changed. A
  // repeated call for the step applied is a no-op; INVALID_ARGUMENT for a
  // table without LARS, named twice, or norms that are negative or not
  // finite; FAILED_PRECONDITION for a step not assembled.
  absl::Status Apply(int trainer_id, int64_t step,
                     absl::Span<const TableNorm> tables,
                     uint64_t generation = kAnyGeneration);
  // One table's, every block of it held here (tests).
  absl::Status Apply(int trainer_id, int64_t step, uint32_t table_id,
                     double weights_norm, double gradient_norm,
                     uint64_t generation = kAnyGeneration) {
    const TableNorm t{table_id, weights_norm, gradient_norm, {}};
    return Apply(trainer_id, step, absl::MakeConstSpan(&t, 1), generation);
  }

 private:
  // The norms checked (known tables, finite, each table and block once,
  // some block held here) and each table's blocks held here, in the order
  // of `tables`, into *units.
  absl::Status Units(absl::Span<const TableNorm> tables,
                     std::vector<std::vector<BarrierUnit*>>* units) const;

  // Under the gate: the blocks' locks taken, every block checked, then the
  // step applied to all of them; the updates to forward go to *applied.
  absl::Status ApplyLocked(int64_t step, absl::Span<const TableNorm> tables,
                           const std::vector<std::vector<BarrierUnit*>>& units,
                           std::vector<WaiterPtr>* ready,
                           AppliedUpdates* applied)
      ABSL_SHARED_LOCKS_REQUIRED(state_->gate);

  StoreState* const state_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_TRUST_STEP_H_
