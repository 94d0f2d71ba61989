#ifndef SHARDPS_PSERVER_SERVICE_REQUEST_HANDLER_H_
#define SHARDPS_PSERVER_SERVICE_REQUEST_HANDLER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "common/transport/dense_value_lane.h"
#include "compression/pull_delta.h"
#include "proto/ps_service.pb.h"
#include "pserver/checkpoint/checkpointer.h"
#include "pserver/checkpoint/start_restore.h"
#include "pserver/service/replication_handler.h"
#include "pserver/service/request_dedup.h"
#include "pserver/service/shared_regions.h"
#include "pserver/store/parameter_store.h"

namespace shardps {

// The pserver's service on its wire messages, without gRPC
// (docs/wire_protocol.md): it validates and decodes every request (value
// encodings, keys, trainer ids), answers a retried push as the first one was
// answered (RequestDedup), runs the checkpoint and rollback protocol
// (RecoverFromCheckpoint), and calls the store; a replicated job's calls
// go to its ReplicationHandler. The gRPC binding
// (grpc_service.h) and the trainers' in-process client only forward to it.
// Every method answers with the status the wire carries. Thread-safe.
class RequestHandler {
 public:
  // `store` must outlive the handler; `checkpointer` is null without
  // --checkpoint_dir and must outlive the handler otherwise. `clock` gives
  // the time of registrations and heartbeats.
  RequestHandler(ParameterStore* store, Checkpointer* checkpointer,
                 const Clock* clock = Clock::Real());

  RequestHandler(const RequestHandler&) = delete;
  RequestHandler& operator=(const RequestHandler&) = delete;

  absl::Status InitJob(const InitJobRequest& req, InitJobResponse* resp);
  absl::Status SetInitialValues(const SetInitialValuesRequest& req,
                                SetInitialValuesResponse* resp);
  absl::Status CommitInit(const CommitInitRequest& req,
                          CommitInitResponse* resp);
  // `peer` names the caller in the log.
  absl::Status Register(const RegisterRequest& req, RegisterResponse* resp,
                        absl::string_view peer);
  absl::Status GetStatus(const GetStatusRequest& req, GetStatusResponse* resp);
  // Answers through `done`, at once or later on another thread (a pull that
  // waits for a step); `req` may go when Pull returns, `resp` must stay
  // alive until `done`. With `lane` (a request naming a shared region, its
  // binding resolved it: SharedRegions::Lane), the dense values are
  // written there, at the offsets the request names, not in the reply.
  void Pull(const PullRequest& req, PullResponse* resp,
            std::function<void(absl::Status)> done,
            std::shared_ptr<const DenseValueLane> lane = nullptr);
  // With `lane`, the dense values are read from there, as Pull.
  absl::Status Push(const PushRequest& req, PushResponse* resp,
                    const DenseValueLane* lane = nullptr);
  // Checks that `req.trainer_id()` may have a TCP lane (docs/
  // wire_protocol.md, "TCP lane"): FAILED_PRECONDITION before the job is
  // ready and for a replicated job (its shards move between pservers),
  // INVALID_ARGUMENT for a trainer id outside the job, the store's answer
  // to a stale incarnation. The transport that serves the lane fills
  // `resp` (GrpcPsService).
  absl::Status OpenTcpLane(const TcpLaneRequest& req, TcpLaneResponse* resp);
  absl::Status Heartbeat(const HeartbeatRequest& req, HeartbeatResponse* resp);
  absl::Status Leave(const LeaveRequest& req, LeaveResponse* resp);
  absl::Status Checkpoint(const CheckpointRequest& req,
                          CheckpointResponse* resp);
  absl::Status Rollback(const RollbackRequest& req, RollbackResponse* resp);
  // `trainer --save_dir`: a page of a sparse table's rows held here
  // (ExportRowsPage), for the chief only (PERMISSION_DENIED), in its
  // generation.
  absl::Status ExportRows(const ExportRowsRequest& req,
                          ExportRowsResponse* resp);
  // --restore_from: configured by the Pserver before the first request.
  StartRestore& start_restore() { return restorer_; }
  // The calls of replicated jobs (docs/replication.md).
  ReplicationHandler& replication() { return replication_; }
  const ReplicationHandler& replication() const { return replication_; }

  // The job's shared regions with trainers on this host (docs/
  // wire_protocol.md, "Shared memory"), for the bindings: the call table
  // serves OpenSharedMemory from them and resolves the region a pull or
  // push names into the lane it hands Pull and Push.
  SharedRegions& shared_regions() { return shared_regions_; }

  // The store it serves (tests).
  ParameterStore* store_for_testing() { return store_; }

 private:
  // Pull after its try: calls `done` on every path but a throw.
  void StartPull(const PullRequest& req, PullResponse* resp,
                 std::function<void(absl::Status)>& done,
                 std::shared_ptr<const DenseValueLane> lane);
  // Rollback's parts: whether its caller may ask (a --checkpoint_dir, a
  // trainer of the job, its incarnation); a trainer other than the chief
  // wakes the chief's waiting pulls; whether the asked generation may
  // follow this pserver's.
  absl::Status CheckRollbackCaller(const RollbackRequest& req) const;
  void AskChiefToRollBack(const RollbackRequest& req);
  absl::Status CheckRollbackGeneration(const RollbackRequest& req) const;
  // Where a pull's dense blocks go in its lane (request_handler.cc,
  // LanePullTargets).
  using LaneOffsets =
      absl::flat_hash_map<std::pair<uint32_t, uint32_t>, uint64_t>;
  // A compressed pull (encoding THRESHOLD): what the trainer holds of
  // each block it asks for.
  using HeldBlocks = absl::flat_hash_map<std::pair<uint32_t, uint32_t>,
                                         PullDeltaDecoder::Held>;
  // Where a pull's dense blocks go: into `lane`, compressed (THRESHOLD:
  // pull_deltas_; an error goes to *failed) or encoded into `resp`.
  PullSink DenseSink(const PullRequest& req, PullResponse* resp,
                     std::shared_ptr<const DenseValueLane> lane,
                     LaneOffsets offsets, std::shared_ptr<absl::Status> failed);
  // A push's payload for the store, decoded (dense or sparse).
  absl::Status PushDense(const PushRequest& req, PushResponse* resp,
                         const DenseValueLane* lane);
  absl::Status PushSparse(const PushRequest& req);
  // LARS (request_handler_lars.cc): a pull of blocks' norms, and a push of
  // tables' norms.
  void PullNorms(const PullRequest& req, PullResponse* resp,
                 std::function<void(absl::Status)>& done);
  absl::Status PushTableNorms(const PushRequest& req);

  ParameterStore* const store_;
  Checkpointer* const checkpointer_;
  const Clock* const clock_;
  // One rollback at a time; a checkpoint waits for it, so that a snapshot
  // of the abandoned timeline is never saved after the rollback discarded
  // its checkpoints. Taken before the store's locks.
  absl::Mutex rollback_mu_;
  RequestDedup dedup_;
  SharedRegions shared_regions_;
  ReplicationHandler replication_;
  StartRestore restorer_;
  // The shadows of compressed pulls (docs/compression.md).
  PullDeltaEncoder pull_deltas_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVICE_REQUEST_HANDLER_H_
