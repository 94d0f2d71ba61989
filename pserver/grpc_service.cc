#include "pserver/grpc_service.h"

#include "common/grpc_status.h"

namespace shardps {
namespace {

// Answers with what `handle` returns. An allocation that fails in a
// handler is RESOURCE_EXHAUSTED (the handler leaves nothing half-done), not
// an exception for gRPC, which would answer UNIMPLEMENTED.
template <typename Handle>
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx,
                                Handle handle) {
  absl::Status s;
  try {
    s = handle();
  } catch (const std::bad_alloc&) {
    s = absl::ResourceExhaustedError(
        "the pserver is out of memory (see --max_memory_mb)");
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* GrpcPsService::InitJob(
    grpc::CallbackServerContext* ctx, const InitJobRequest* req,
    InitJobResponse* resp) {
  return Reply(ctx, [&] { return handler_->InitJob(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::SetInitialValues(
    grpc::CallbackServerContext* ctx, const SetInitialValuesRequest* req,
    SetInitialValuesResponse* resp) {
  return Reply(ctx, [&] { return handler_->SetInitialValues(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::CommitInit(
    grpc::CallbackServerContext* ctx, const CommitInitRequest* req,
    CommitInitResponse* resp) {
  return Reply(ctx, [&] { return handler_->CommitInit(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::Register(
    grpc::CallbackServerContext* ctx, const RegisterRequest* req,
    RegisterResponse* resp) {
  return Reply(ctx,
               [&] { return handler_->Register(*req, resp, ctx->peer()); });
}

grpc::ServerUnaryReactor* GrpcPsService::GetStatus(
    grpc::CallbackServerContext* ctx, const GetStatusRequest* req,
    GetStatusResponse* resp) {
  return Reply(ctx, [&] { return handler_->GetStatus(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::Pull(grpc::CallbackServerContext* ctx,
                                              const PullRequest* req,
                                              PullResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  handler_->Pull(*req, resp, [reactor](absl::Status s) {
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::Push(grpc::CallbackServerContext* ctx,
                                              const PushRequest* req,
                                              PushResponse* resp) {
  return Reply(ctx, [&] { return handler_->Push(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::Heartbeat(
    grpc::CallbackServerContext* ctx, const HeartbeatRequest* req,
    HeartbeatResponse* resp) {
  return Reply(ctx, [&] { return handler_->Heartbeat(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::Leave(grpc::CallbackServerContext* ctx,
                                               const LeaveRequest* req,
                                               LeaveResponse* resp) {
  return Reply(ctx, [&] { return handler_->Leave(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::Checkpoint(
    grpc::CallbackServerContext* ctx, const CheckpointRequest* req,
    CheckpointResponse* resp) {
  return Reply(ctx, [&] { return handler_->Checkpoint(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::Rollback(
    grpc::CallbackServerContext* ctx, const RollbackRequest* req,
    RollbackResponse* resp) {
  return Reply(ctx, [&] { return handler_->Rollback(*req, resp); });
}

}  // namespace shardps
