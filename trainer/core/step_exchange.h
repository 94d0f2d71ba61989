#ifndef SHARDPS_TRAINER_CORE_STEP_EXCHANGE_H_
#define SHARDPS_TRAINER_CORE_STEP_EXCHANGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "trainer/client/param_client.h"
#include "trainer/client/sparse_client.h"
#include "trainer/client/transfer.h"
#include "trainer/core/checkpoint_requester.h"
#include "trainer/core/update_sharing.h"

namespace shardps {

// Rows of a sparse table that the next step will read, fetched as a step
// ends (TrainingSession::EndStep).
struct SparseFetch {
  int table = 0;                    // index among the sparse tables
  absl::Span<const uint64_t> keys;  // distinct
  float* rows = nullptr;            // keys.size() * dim floats, filled
};

// What one step of a TrainingSession sends and fetches: the sparse
// gradients queued, dense tables pushed ahead of the step's end (backward
// hooks), and the end of the step: the chief's checkpoint request, the
// pushes, and the next step's dense values and sparse rows. Plain logic
// over the clients. Thread-compatible; the clients, `checkpoints` and
// `sharing` (null: no threshold compression) must outlive it.
class StepExchange {
 public:
  struct Tables {
    std::vector<std::string> dense_names;
    std::vector<bool> lars;  // per dense table; empty: none
    std::vector<std::string> sparse_names;
    std::vector<int> sparse_dims;
  };
  StepExchange(Tables tables, bool sync, ParamClient* params,
               SparseClient* sparse, CheckpointRequester* checkpoints,
               UpdateSharing* sharing);

  // Queues sparse table `table`'s gradient rows for `keys` (copied); again
  // for the same table adds to what is queued. INVALID_ARGUMENT for a
  // table that is not or a size that does not match.
  absl::Status QueueSparse(int table, absl::Span<const uint64_t> keys,
                           absl::Span<const float> grads);
  // The transfers of `fetch`; INVALID_ARGUMENT for a table that is not.
  absl::StatusOr<std::vector<SparseTransfer>> Fetches(
      const std::vector<SparseFetch>& fetch) const;
  // Pushes dense table `table`'s gradient for `step` now
  // (TrainingSession::PushDenseEarly). The first of a step's makes the
  // chief's checkpoint request. Errors of the transfer come at End.
  absl::Status PushDenseEarly(int64_t step, int table, const float* grad);
  // Ends `step`: the checkpoint request (unless an early push made it),
  // the queued sparse gradients, the dense tables not pushed early, the
  // next step's values into next_values (when not null) and rows of
  // `next_rows`. Returns the first error; the step's transfers are over
  // either way.
  absl::Status End(int64_t step, const std::vector<const float*>& grads,
                   const std::vector<float*>* next_values,
                   const std::vector<SparseTransfer>& next_rows,
                   TransferStats* push, TransferStats* pull);
  // Drops what is queued and waits for early pushes in flight (a job
  // rolled back).
  void Drop();

 private:
  int num_dense() const { return static_cast<int>(tables_.dense_names.size()); }
  // Sends the queued sparse gradients of `step`.
  absl::Status PushQueuedSparse(int64_t step, TransferStats* stats);
  // The dense push of `step` with the next values; `push` gets its bytes.
  absl::Status PushDense(int64_t step, const std::vector<const float*>& grads,
                         const std::vector<float*>* next_values,
                         TransferStats* push, TransferStats* pull);
  // Waits for the early pushes; their bytes go to `push`.
  absl::Status AwaitEarlyPushes(TransferStats* push);

  const Tables tables_;
  const bool sync_;
  ParamClient* const params_;
  SparseClient* const sparse_;
  CheckpointRequester* const checkpoints_;
  UpdateSharing* const sharing_;

  // Sparse gradients queued for this step, per sparse table.
  struct QueuedRows {
    std::vector<uint64_t> keys;
    std::vector<float> grads;
  };
  std::vector<QueuedRows> queued_;
  // This step's early pushes: the tables sent, the transfers in flight,
  // and the first error met before any was sent.
  std::vector<bool> sent_early_;
  std::vector<std::unique_ptr<Transfer>> early_;
  absl::Status early_error_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CORE_STEP_EXCHANGE_H_
