#include "pserver/service/grpc_service.h"

#include <memory>
#include <utility>

#include "base/job_id.h"
#include "common/transport/grpc_status.h"
#include "common/transport/grpc_wire.h"

namespace shardps {

std::string GrpcPsService::JobIdOf(grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kJobMetadataKey);
  if (it == md.end()) return std::string(kDefaultJobId);
  return std::string(it->second.data(), it->second.size());
}

CallContext GrpcPsService::ContextOf(grpc::CallbackServerContext* ctx,
                                     PsRpc rpc) {
  // The peer's address only where it is used (Register's log line):
  // gRPC builds the string anew on every call.
  return CallContext{JobIdOf(ctx),
                     rpc == PsRpc::kRegister ? ctx->peer() : std::string()};
}

grpc::ServerUnaryReactor* GrpcPsService::Bind(
    Dispatcher* dispatcher, grpc::CallbackServerContext* ctx, PsRpc rpc,
    const google::protobuf::Message& req, google::protobuf::Message* resp,
    std::function<void()> then) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  dispatcher->Call(rpc, ContextOf(ctx, rpc), req, resp,
                   [reactor, then = std::move(then)](absl::Status s) {
                     if (s.ok() && then) then();
                     reactor->Finish(ToGrpcStatus(s));
                   });
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::Bind(
    grpc::CallbackServerContext* ctx, PsRpc rpc,
    const google::protobuf::Message& req, google::protobuf::Message* resp,
    std::function<void()> then) {
  return Bind(&dispatcher_, ctx, rpc, req, resp, std::move(then));
}

// The unary calls: the dispatcher does the rest.
#define SHARDPS_BIND(Method, Request, Response)                               \
  grpc::ServerUnaryReactor* GrpcPsService::Method(                            \
      grpc::CallbackServerContext* ctx, const Request* req, Response* resp) { \
    return Bind(ctx, PsRpc::k##Method, *req, resp);                           \
  }
SHARDPS_BIND(InitJob, InitJobRequest, InitJobResponse)
SHARDPS_BIND(SetInitialValues, SetInitialValuesRequest,
             SetInitialValuesResponse)
SHARDPS_BIND(CommitInit, CommitInitRequest, CommitInitResponse)
SHARDPS_BIND(Register, RegisterRequest, RegisterResponse)
SHARDPS_BIND(GetStatus, GetStatusRequest, GetStatusResponse)
SHARDPS_BIND(Push, PushRequest, PushResponse)
SHARDPS_BIND(Heartbeat, HeartbeatRequest, HeartbeatResponse)
SHARDPS_BIND(Leave, LeaveRequest, LeaveResponse)
SHARDPS_BIND(Checkpoint, CheckpointRequest, CheckpointResponse)
SHARDPS_BIND(Rollback, RollbackRequest, RollbackResponse)
SHARDPS_BIND(ChangeView, ChangeViewRequest, ChangeViewResponse)
#undef SHARDPS_BIND

#define SHARDPS_BIND_PEER(Method, Request, Response)                          \
  grpc::ServerUnaryReactor* GrpcPsService::ReplicationService::Method(        \
      grpc::CallbackServerContext* ctx, const Request* req, Response* resp) { \
    return GrpcPsService::Bind(dispatcher_, ctx, PsRpc::k##Method, *req,      \
                               resp);                                         \
  }
SHARDPS_BIND_PEER(Forward, ForwardRequest, ForwardResponse)
SHARDPS_BIND_PEER(ViewPrepare, ViewPrepareRequest, ViewPrepareResponse)
SHARDPS_BIND_PEER(ViewAccept, ViewAcceptRequest, ViewAcceptResponse)
SHARDPS_BIND_PEER(ViewCommit, ViewCommitRequest, ViewCommitResponse)
SHARDPS_BIND_PEER(InstallUnit, InstallUnitRequest, InstallUnitResponse)
#undef SHARDPS_BIND_PEER

grpc::ServerUnaryReactor* GrpcPsService::Pull(grpc::CallbackServerContext* ctx,
                                              const grpc::ByteBuffer* raw_req,
                                              grpc::ByteBuffer* raw_resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // The request and reply live until gRPC has sent the reply's slices.
  struct Exchange {
    PullRequest req;
    PullResponse resp;
  };
  auto x = std::make_shared<Exchange>();
  if (absl::Status s = ParseByteBuffer(*raw_req, &x->req); !s.ok()) {
    dispatcher_.Refused(PsRpc::kPull, s, raw_req->Length());
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  dispatcher_.Call(PsRpc::kPull, ContextOf(ctx, PsRpc::kPull), x->req, &x->resp,
                   [reactor, x, raw_resp](absl::Status s) {
                     if (s.ok()) *raw_resp = SerializeAliasing(x->resp, x);
                     reactor->Finish(ToGrpcStatus(s));
                   });
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::OpenSharedMemory(
    grpc::CallbackServerContext* ctx, const SharedMemoryRequest* req,
    SharedMemoryResponse* resp) {
  return Bind(ctx, PsRpc::kOpenSharedMemory, *req, resp,
              [this, job_id = JobIdOf(ctx), req, resp] {
                if (!req->calls()) {
                  shared_calls_.Forget(job_id, req->trainer_id());
                  return;
                }
                // Pushes and pulls may then come through the region.
                auto job = dispatcher_.Job(job_id);
                absl::Status s = job.ok() ? shared_calls_.Serve(
                                                job_id, *job, req->trainer_id(),
                                                resp->region_id())
                                          : job.status();
                resp->set_calls(s.ok());
              });
}

}  // namespace shardps
