#ifndef SHARDPS_PSERVER_STORE_DENSE_TABLE_H_
#define SHARDPS_PSERVER_STORE_DENSE_TABLE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "optimizer/optimizer.h"
#include "pserver/store/step/step_barrier.h"

namespace shardps {

// One block of a dense table held on this pserver (docs/design.md, "Tables and
// placement"): its values and optimizer state, the gradients accumulated
// for the sync step being assembled, and that step's barrier. Every field
// is guarded by `mu`. Thread-safe.
class DenseTableBlock final : public BarrierUnit {
 public:
  // `optimizer` and `membership` must outlive the block. `num_trainers` ==
  // 1 applies each push as it is, without a copy into the accumulator.
  DenseTableBlock(uint32_t table_id, uint32_t index, int64_t size,
                  const std::string& table_name, const Optimizer* optimizer,
                  const Membership* membership, int quorum);

  int64_t size() const { return size_; }

  // The chief's initial values (size() floats); optimizer state starts at
  // its initial value.
  void SetInitialValue(absl::Span<const float> values)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // A checkpoint's values, state and version; forgets the step being
  // assembled and hands its held pulls to *dropped.
  void Restore(int64_t version, std::vector<float> value,
               std::vector<std::vector<float>> slots,
               std::vector<WaiterPtr>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Adds the push's gradient into the step's sum (the step's first push
  // replaces it); nothing with one trainer.
  void Accumulate(const PushPayload& p, bool first) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Applies the mean of the step's gradients (with one trainer, `last`'s).
  std::optional<AppliedUpdate> ApplyStep(const PushPayload* last,
                                         std::vector<WaiterPtr>* ready) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Applies an ASYNC push's gradient as it is.
  std::optional<AppliedUpdate> ApplyNow(int64_t step,
                                        const PushPayload& p) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Hands the whole block and its version to `sink`, or, for a norms pull,
  // writes its squared norms to target.norms_out; takes `mu` once the
  // block is settled.
  void Read(const PullTarget& target, const PullSink& sink) const override;
  void ReadLocked(const PullTarget& target, const PullSink& sink) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // LARS (Optimizer::needs_table_norms): ApplyStep keeps the step's mean
  // gradient and its squared norms (with the weights'), and the step waits
  // for ApplyTrust.
  absl::StatusOr<bool> NormsReady(int64_t step) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Whether ApplyTrust(step) may apply (the step is assembled) or has (an
  // earlier step); FAILED_PRECONDITION, saying "not assembled yet", when
  // the step's pushes are still coming.
  absl::StatusOr<bool> CanApplyTrust(int64_t step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Applies the assembled step with the table's trust ratio and advances
  // the barrier, handing the pulls it releases to *ready; nothing when the
  // step was applied already. REQUIRES: CanApplyTrust(step) is true.
  // Returns the update as ApplyStep.
  std::optional<AppliedUpdate> ApplyTrust(int64_t step, float trust_ratio,
                                          std::vector<WaiterPtr>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // A backup's block (BarrierUnit::ApplyReplicated): one gradient of the
  // block's size, one scale; LARS: the primary's trust ratio, and the
  // step's norms kept as the primary's (NormsReady answers them).
  absl::Status ApplyReplicated(const AppliedUpdate& update,
                               std::vector<WaiterPtr>* ready) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Streaming saves (BarrierUnit::MarkForSave): the next change, or
  // SaveIfPending, writes the block to `sink` first (whole, delta or not).
  void MarkForSave(SaveSink* sink, bool delta) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    pending_save_ = sink;
  }
  // Writes the block's DSN1 record to the pending save, if any.
  void SaveIfPending() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The version the last save wrote; -1 before one, and after a restore.
  // A delta writes the block only when it has moved since.
  int64_t saved_version() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return saved_version_;
  }

  bool has_value ABSL_GUARDED_BY(mu) = false;
  std::vector<float> value ABSL_GUARDED_BY(mu);
  std::vector<std::vector<float>> slots ABSL_GUARDED_BY(mu);

 private:
  // One optimizer application at the barrier's version, which then moves;
  // with `record`, the update as UpdateRecord makes it (`sync`: a sync step
  // or an async push).
  std::optional<AppliedUpdate> Apply(int64_t step, float scale,
                                     absl::Span<const float> grad, bool sync,
                                     float trust_ratio = 1.0f,
                                     bool record = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  const int64_t size_;
  const Optimizer* const optimizer_;
  SaveSink* pending_save_ ABSL_GUARDED_BY(mu) = nullptr;
  int64_t saved_version_ ABSL_GUARDED_BY(mu) = -1;
  const bool single_trainer_;
  std::vector<float> accum_ ABSL_GUARDED_BY(mu);
  // LARS: the assembled step's gradient scale (1 / trainers), and the
  // squared norms of the step `norms_step_` (-1: none).
  float assembled_scale_ ABSL_GUARDED_BY(mu) = 1.0f;
  int64_t norms_step_ ABSL_GUARDED_BY(mu) = -1;
  Optimizer::SquaredNorms norms_ ABSL_GUARDED_BY(mu);
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_DENSE_TABLE_H_
