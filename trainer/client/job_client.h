#ifndef SHARDPS_TRAINER_CLIENT_JOB_CLIENT_H_
#define SHARDPS_TRAINER_CLIENT_JOB_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/transport/ps_client_interface.h"
#include "proto/ps_service.pb.h"
#include "trainer/client/placement.h"
#include "trainer/transport/request_stamp.h"

namespace shardps {

// The trainer's side of a job's set-up, membership, checkpoints and recovery
// on every pserver at once (docs/wire_protocol.md, docs/fault_tolerance.md).
// Thread-compatible: one thread calls it at a time. `servers` (in --pservers
// order) and `stamp` must outlive it.
class JobClient {
 public:
  JobClient(std::vector<PsClientInterface*> servers, RequestStamp* stamp);

  // Registers this trainer with every pserver.
  absl::Status Register();
  // Chief only: sends the job spec and, per pserver, its blocks of `plan`
  // with their initial values (values[t] for table t), then marks the job
  // ready. A pserver that already holds the job (a restarted chief) keeps
  // its values.
  absl::Status InitJob(const JobSpec& job, const ChunkPlan& plan,
                       const std::vector<const float*>& initial_values);
  // Chief, replication: sends pserver `s` (restarted on its address) the
  // job and its blocks with InitJobRequest.rejoin; it takes their values
  // from the primaries by itself.
  absl::Status Rejoin(size_t s, const JobSpec& job, const ChunkPlan& plan);
  // Waits until every pserver reports the job ready, logging whom it waits
  // for every 10 s; DEADLINE_EXCEEDED after `timeout`. Then checks that the
  // pservers' job equals `expected` (FAILED_PRECONDITION naming the
  // difference otherwise).
  absl::Status WaitUntilReady(const JobSpec& expected, absl::Duration timeout);

  // Joins the job in two phases (RegisterRequest): returns the step this
  // trainer starts at, which every pserver now waits for.
  absl::StatusOr<int64_t> Join();
  // Leaves the barrier on every pserver.
  absl::Status Leave();
  // After the final evaluation: tells every pserver that this trainer has
  // finished and calls nothing more (LeaveRequest.finished; again to a
  // pserver that failed it), and waits until every one of the job's
  // `num_trainers` trainers has finished too, as any pserver reports it.
  // All pservers are asked at once, each again every `poll` once its last
  // call is answered: one that does not answer (stopped with its own
  // trainer, perhaps) holds up nothing. Logs whom it waits for every 30 s.
  // DEADLINE_EXCEEDED, naming them, after `timeout`; CANCELLED once *stop
  // (when given) is true. For a pserver in this trainer's pod or
  // allocation, which stops when the trainer exits while the others may
  // still need it.
  absl::Status FinishAndWait(int num_trainers, absl::Duration timeout,
                             const std::atomic<bool>* stop = nullptr,
                             absl::Duration poll = absl::Seconds(1));
  // Chief: every pserver writes a checkpoint of `step`. Each pserver whose
  // previous write failed adds "pserver ADDRESS: why" to *write_errors
  // (when given): the request was taken all the same.
  absl::Status Checkpoint(int64_t step,
                          std::vector<std::string>* write_errors = nullptr);
  // Chief, `--save_dir` (docs/saved_model.md): every row of sparse table
  // `table_id` on the pservers (ExportRows, a page at a time): keys
  // ascending, each once (a replicated table's backups hold copies), and
  // their values, dim floats each. Each pserver's rows must be at
  // `min_version` (sync: the job's last step).
  struct SparseRows {
    int dim = 0;
    std::vector<uint64_t> keys;
    std::vector<float> values;
  };
  absl::StatusOr<SparseRows> ReadSparseTable(uint32_t table_id,
                                             int64_t min_version);
  // Every pserver's status, in --pservers order.
  absl::StatusOr<std::vector<GetStatusResponse>> Statuses();
  // Every pserver rolls back to its checkpoint of `step` as `generation`.
  absl::Status Rollback(int64_t step, uint64_t generation);

  const std::vector<PsClientInterface*>& servers() const { return servers_; }

  // Replication (docs/replication.md): InitJob places each pserver's
  // blocks with those of the shards it backs and tells it the pserver
  // list; Register, Join, Leave, Checkpoint and Statuses skip the pservers
  // for which `live` is false (out of the agreed view).
  void set_replication(int replication, std::function<bool(int)> live) {
    replication_ = replication;
    live_ = std::move(live);
  }

 private:
  // The InitJob request of pserver s: its blocks of `plan` and those of
  // the shards it backs; *chunks gets those chunks.
  InitJobRequest InitRequest(
      size_t s, const JobSpec& job, const ChunkPlan& plan,
      std::vector<const std::vector<BlockPlacement>*>* chunks) const;
  // fn(s, done) on every live pserver at once (transfer.h).
  absl::Status OnLiveServers(
      const std::function<void(size_t, StatusCallback)>& fn);

  const std::vector<PsClientInterface*> servers_;
  RequestStamp* const stamp_;
  int replication_ = 1;
  std::function<bool(int)> live_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CLIENT_JOB_CLIENT_H_
