#ifndef SHARDPS_PSERVER_SERVICE_GRPC_SERVICE_H_
#define SHARDPS_PSERVER_SERVICE_GRPC_SERVICE_H_

#include <functional>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps_service.grpc.pb.h"
#include "proto/replication.grpc.pb.h"
#include "pserver/service/dispatcher.h"
#include "pserver/service/pserver.h"
#include "pserver/service/pserver_metrics.h"
#include "pserver/service/reply_gate.h"
#include "pserver/service/request_handler.h"
#include "pserver/service/shared_call_binding.h"
#include "pserver/service/tcp_lane_server.h"

namespace shardps {

// The gRPC binding of the pserver: each RPC is handed as it is to the
// Dispatcher (dispatcher.h), naming the job its `shardps-job` metadata names
// (base/job_id.h), and the answer's absl::Status becomes the grpc::Status
// (common/transport/grpc_status.h). Pulls are served raw: the reply's
// values go to gRPC as slices over the reply itself
// (common/transport/grpc_wire.h), not copied again into a buffer, and
// start only while the replies not yet read stay under a bound
// (ReplyGate). An
// OpenSharedMemory that asks for calls starts serving them through the
// region (SharedCallBinding). The calls between pservers are a service of
// their own (replication_service()), on the same dispatcher. Thread-safe.
class GrpcPsService final : public ParameterServer::WithRawCallbackMethod_Pull<
                                ParameterServer::CallbackService> {
 public:
  // Pulls' replies the pserver holds before their clients read them, and
  // the pulls that may wait for room beyond that (ReplyGate). Counted
  // besides --max_memory_mb (docs/security.md, "Limits").
  static constexpr int64_t kMaxUnreadReplyBytes = int64_t{128} << 20;
  // One job's share of them: the others always keep 32 MiB.
  static constexpr int64_t kMaxUnreadReplyBytesPerJob = int64_t{96} << 20;
  static constexpr size_t kMaxPullsWaitingForReplies = 65536;

  // `jobs` and `metrics` (null: none) must outlive this object.
  explicit GrpcPsService(JobDirectory* jobs, RpcMetrics* metrics = nullptr)
      : dispatcher_(jobs, metrics), shared_calls_(&dispatcher_) {}

  // Whether calls are served (true once the pserver has started).
  void SetServing(bool serving) { dispatcher_.SetServing(serving); }
  // The calls between pservers (proto/replication.proto), through the same
  // dispatcher: register it on the same server.
  grpc::Service* replication_service() { return &replication_; }

  grpc::ServerUnaryReactor* InitJob(grpc::CallbackServerContext* ctx,
                                    const InitJobRequest* req,
                                    InitJobResponse* resp) override;
  grpc::ServerUnaryReactor* SetInitialValues(
      grpc::CallbackServerContext* ctx, const SetInitialValuesRequest* req,
      SetInitialValuesResponse* resp) override;
  grpc::ServerUnaryReactor* CommitInit(grpc::CallbackServerContext* ctx,
                                       const CommitInitRequest* req,
                                       CommitInitResponse* resp) override;
  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const RegisterRequest* req,
                                     RegisterResponse* resp) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx,
                                      const GetStatusRequest* req,
                                      GetStatusResponse* resp) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const PushRequest* req,
                                 PushResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const HeartbeatRequest* req,
                                      HeartbeatResponse* resp) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx,
                                  const LeaveRequest* req,
                                  LeaveResponse* resp) override;
  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* ctx,
                                       const CheckpointRequest* req,
                                       CheckpointResponse* resp) override;
  grpc::ServerUnaryReactor* Rollback(grpc::CallbackServerContext* ctx,
                                     const RollbackRequest* req,
                                     RollbackResponse* resp) override;
  grpc::ServerUnaryReactor* OpenSharedMemory(
      grpc::CallbackServerContext* ctx, const SharedMemoryRequest* req,
      SharedMemoryResponse* resp) override;
  grpc::ServerUnaryReactor* ChangeView(grpc::CallbackServerContext* ctx,
                                       const ChangeViewRequest* req,
                                       ChangeViewResponse* resp) override;
  grpc::ServerUnaryReactor* ExportRows(grpc::CallbackServerContext* ctx,
                                       const ExportRowsRequest* req,
                                       ExportRowsResponse* resp) override;
  // Issues a ticket of the TCP lane (SetTcpLane) to a trainer the job's
  // handler accepts; FAILED_PRECONDITION, with the reason, without a lane.
  grpc::ServerUnaryReactor* OpenTcpLane(grpc::CallbackServerContext* ctx,
                                        const TcpLaneRequest* req,
                                        TcpLaneResponse* resp) override;

  // The lane OpenTcpLane issues tickets of (it must outlive this object or
  // be replaced first), or null and why there is none. Call before serving.
  void SetTcpLane(TcpLaneServer* lane, std::string why_none) {
    tcp_lane_ = lane;
    why_no_tcp_lane_ = std::move(why_none);
  }
  // Where every transport's calls go (the TCP lane's too).
  Dispatcher* dispatcher() { return &dispatcher_; }

 private:
  // Hands call `rpc` to `dispatcher` and finishes it with its answer,
  // after `then` (OK answers only) when given.
  static grpc::ServerUnaryReactor* Bind(Dispatcher* dispatcher,
                                        grpc::CallbackServerContext* ctx,
                                        PsRpc rpc,
                                        const google::protobuf::Message& req,
                                        google::protobuf::Message* resp,
                                        std::function<void()> then = nullptr);
  grpc::ServerUnaryReactor* Bind(grpc::CallbackServerContext* ctx, PsRpc rpc,
                                 const google::protobuf::Message& req,
                                 google::protobuf::Message* resp,
                                 std::function<void()> then = nullptr);
  // The job id the call names (the default job when none).
  static std::string JobIdOf(grpc::CallbackServerContext* ctx);
  // What the dispatcher is told of call `rpc` besides its messages.
  static CallContext ContextOf(grpc::CallbackServerContext* ctx, PsRpc rpc);

  // The Replication service's calls, handed to the same dispatcher.
  class ReplicationService final : public Replication::CallbackService {
   public:
    explicit ReplicationService(Dispatcher* dispatcher)
        : dispatcher_(dispatcher) {}
    grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* ctx,
                                      const ForwardRequest* req,
                                      ForwardResponse* resp) override;
    grpc::ServerUnaryReactor* ViewPrepare(grpc::CallbackServerContext* ctx,
                                          const ViewPrepareRequest* req,
                                          ViewPrepareResponse* resp) override;
    grpc::ServerUnaryReactor* ViewAccept(grpc::CallbackServerContext* ctx,
                                         const ViewAcceptRequest* req,
                                         ViewAcceptResponse* resp) override;
    grpc::ServerUnaryReactor* ViewCommit(grpc::CallbackServerContext* ctx,
                                         const ViewCommitRequest* req,
                                         ViewCommitResponse* resp) override;
    grpc::ServerUnaryReactor* InstallUnit(grpc::CallbackServerContext* ctx,
                                          const InstallUnitRequest* req,
                                          InstallUnitResponse* resp) override;
    grpc::ServerUnaryReactor* ViewInspect(grpc::CallbackServerContext* ctx,
                                          const ViewInspectRequest* req,
                                          ViewPrepareResponse* resp) override;

   private:
    Dispatcher* const dispatcher_;
  };

  Dispatcher dispatcher_;
  // Pulls' replies not yet read by their clients (reply_gate.h).
  ReplyGate replies_{kMaxUnreadReplyBytes, kMaxUnreadReplyBytesPerJob,
                     kMaxPullsWaitingForReplies};
  ReplicationService replication_{&dispatcher_};
  // The calls of trainers' shared regions (OpenSharedMemory with `calls`).
  SharedCallBinding shared_calls_;
  TcpLaneServer* tcp_lane_ = nullptr;
  std::string why_no_tcp_lane_ = "the pserver has not started it";
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVICE_GRPC_SERVICE_H_
