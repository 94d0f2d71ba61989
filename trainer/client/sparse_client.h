#ifndef SHARDPS_TRAINER_CLIENT_SPARSE_CLIENT_H_
#define SHARDPS_TRAINER_CLIENT_SPARSE_CLIENT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/transport/ps_client_interface.h"
#include "trainer/client/transfer.h"
#include "trainer/transport/request_stamp.h"

namespace shardps {

// The rows of one sparse table that a pull wants or a push sends: distinct
// keys, and keys.size() * dim floats to fill (pull) or to send (push).
struct SparseTransfer {
  uint32_t table_id = 0;  // index in the job's tables
  int dim = 0;
  absl::Span<const uint64_t> keys;
  float* rows = nullptr;         // pulls: filled
  const float* grads = nullptr;  // pushes: sent
};

// The trainer's view of the sparse tables on all pservers: key k goes to
// pserver Mix64(k) % P, in calls of at most 4 MiB of keys and values
// (SplitKeys) that carry the rows of several tables together, all in flight
// at once. Thread-compatible: one thread calls it at a time. `servers` and
// `stamp` must outlive it.
class SparseClient {
 public:
  SparseClient(std::vector<PsClientInterface*> servers, RequestStamp* stamp);

  // Fills each transfer's rows once the tables have applied `min_version`
  // steps (sync). DATA_LOSS for a reply that does not match the request.
  absl::Status Pull(int64_t min_version, int64_t step,
                    const std::vector<SparseTransfer>& tables,
                    TransferStats* stats);
  // Pull, in flight: each transfer's rows are filled by the time the
  // returned transfer's Wait() returns (they must outlive it; the keys are
  // read before StartPull returns). A pull of a version not yet applied
  // waits on the pservers, so a sync trainer may send the next step's pull
  // before its push.
  std::unique_ptr<Transfer> StartPull(
      int64_t min_version, int64_t step,
      const std::vector<SparseTransfer>& tables);
  // Sends each transfer's grads for `step`; in sync mode every pserver gets
  // at least one (possibly empty) chunk of every table, with the chunk
  // count, so that it knows when this trainer's step is complete.
  absl::Status Push(int64_t step, bool sync,
                    const std::vector<SparseTransfer>& tables,
                    TransferStats* stats);

 private:
  const std::vector<PsClientInterface*> servers_;
  RequestStamp* const stamp_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CLIENT_SPARSE_CLIENT_H_
