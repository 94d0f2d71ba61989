#ifndef SHARDPS_PSERVER_PS_SERVICE_IMPL_H_
#define SHARDPS_PSERVER_PS_SERVICE_IMPL_H_

#include "grpcpp/grpcpp.h"
#include "proto/ps_service.grpc.pb.h"
#include "pserver/parameter_store.h"
#include "pserver/request_dedup.h"

namespace shardps {

// The gRPC binding of ParameterStore: converts protos to spans and
// absl::Status to grpc::Status, and nothing else. Thread-safe.
class PsServiceImpl final : public ParameterServer::CallbackService {
 public:
  // `store` must outlive this object.
  explicit PsServiceImpl(ParameterStore* store) : store_(store) {}

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

 private:
  ParameterStore* const store_;
  RequestDedup dedup_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_PS_SERVICE_IMPL_H_
