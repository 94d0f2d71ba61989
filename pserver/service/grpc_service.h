#ifndef SHARDPS_PSERVER_SERVICE_GRPC_SERVICE_H_
#define SHARDPS_PSERVER_SERVICE_GRPC_SERVICE_H_

#include <atomic>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps_service.grpc.pb.h"
#include "pserver/service/blocking_pool.h"
#include "pserver/service/pserver.h"
#include "pserver/service/pserver_metrics.h"
#include "pserver/service/request_handler.h"
#include "pserver/service/shared_call_binding.h"

namespace shardps {

// The gRPC binding of RequestHandler: each RPC is forwarded as it is to the
// handler of the job its `shardps-job` metadata names (base/job_id.h),
// and the answer's absl::Status becomes the grpc::Status
// (common/transport/grpc_status.h). Each finished call is reported to
// RpcMetrics when there is one. Until SetServing(true) every call is answered
// UNAVAILABLE (the pserver is loading its checkpoints). Thread-safe.
// Pulls are served raw: the reply's values go to gRPC as slices over the
// reply itself (common/transport/grpc_wire.h), not copied again into a buffer.
class GrpcPsService final : public ParameterServer::WithRawCallbackMethod_Pull<
                                ParameterServer::CallbackService> {
 public:
  // `jobs` must outlive this object.
  // `jobs` and `metrics` (null: none) must outlive this object.
  explicit GrpcPsService(JobDirectory* jobs, RpcMetrics* metrics = nullptr)
      : jobs_(jobs), metrics_(metrics), shared_calls_(metrics) {}

  // The RPC names, as RpcMetrics labels them.
  static std::vector<std::string> MethodNames();
  // Whether calls are served (true once the pserver has started).
  void SetServing(bool serving) { serving_.store(serving); }

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

 private:
  // Answers with what `handle` returns for the call's job, and reports the
  // call of `method`.
  template <typename Request, typename Response, typename Handle>
  grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx,
                                  const char* method, const Request& req,
                                  const Response* resp, Handle handle);
  static bool Replicated(RequestHandler& h);
  // Reply, on `pool` when `blocking` says the job's call may wait on
  // other pservers or on blocks held meanwhile (replication); answered
  // RESOURCE_EXHAUSTED when the pool's queue is full.
  template <typename Request, typename Response, typename Handle,
            typename Blocking>
  grpc::ServerUnaryReactor* ReplyMaybeLater(grpc::CallbackServerContext* ctx,
                                            const char* method,
                                            const Request* req, Response* resp,
                                            Handle handle, Blocking blocking,
                                            BlockingPool* pool);
  // The handler of the job the call names, UNAVAILABLE before serving.
  absl::StatusOr<std::shared_ptr<RequestHandler>> JobOf(
      grpc::CallbackServerContext* ctx) const;
  // The job id the call names (the default job when none).
  static std::string JobIdOf(grpc::CallbackServerContext* ctx);
  void Record(const char* method, const absl::Status& s, absl::Time start,
              size_t request_bytes, size_t response_bytes);

  JobDirectory* const jobs_;
  RpcMetrics* const metrics_;
  std::atomic<bool> serving_{true};
  // The calls of trainers' shared regions (OpenSharedMemory with `calls`).
  SharedCallBinding shared_calls_;
  // A replicated job's calls from trainers (a push waits on other
  // pservers; the rest may wait on blocks it holds), and those from other
  // pservers, apart: a call between pservers never queues behind a push.
  BlockingPool blocking_{64, size_t{64} << 20};
  BlockingPool peer_pool_{16, size_t{64} << 20};
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVICE_GRPC_SERVICE_H_
