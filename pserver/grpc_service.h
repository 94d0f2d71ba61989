#ifndef SHARDPS_PSERVER_GRPC_SERVICE_H_
#define SHARDPS_PSERVER_GRPC_SERVICE_H_

#include "grpcpp/grpcpp.h"
#include "proto/ps_service.grpc.pb.h"
#include "pserver/pserver.h"
#include "pserver/request_handler.h"

namespace shardps {

// The gRPC binding of RequestHandler: each RPC is forwarded as it is to the
// handler of the job its `shardps-job` metadata names (common/job_id.h),
// and the answer's absl::Status becomes the grpc::Status
// (common/grpc_status.h). Nothing else. Thread-safe.
class GrpcPsService final : public ParameterServer::CallbackService {
 public:
  // `jobs` must outlive this object.
  explicit GrpcPsService(JobDirectory* jobs) : jobs_(jobs) {}

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
                                 const PullRequest* req,
                                 PullResponse* resp) override;
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

 private:
  // Answers with what `handle` returns for the call's job.
  template <typename Handle>
  grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx,
                                  Handle handle);

  JobDirectory* const jobs_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_GRPC_SERVICE_H_
