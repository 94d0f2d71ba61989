#ifndef SHARDPS_PSERVER_PS_SERVICE_IMPL_H_
#define SHARDPS_PSERVER_PS_SERVICE_IMPL_H_

#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps_service.grpc.pb.h"
#include "pserver/checkpointer.h"
#include "pserver/parameter_store.h"
#include "pserver/request_dedup.h"

namespace shardps {

// The gRPC binding of ParameterStore: converts protos to spans and
// absl::Status to grpc::Status, and nothing else. Thread-safe.
class PsServiceImpl final : public ParameterServer::CallbackService {
 public:
  // `store` and `checkpointer` (null: no --checkpoint_dir) must outlive
  // this object.
  explicit PsServiceImpl(ParameterStore* store,
                         Checkpointer* checkpointer = nullptr)
      : store_(store), checkpointer_(checkpointer) {}

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
  ParameterStore* const store_;
  Checkpointer* const checkpointer_;
  absl::Mutex rollback_mu_;  // one rollback at a time
  RequestDedup dedup_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_PS_SERVICE_IMPL_H_
