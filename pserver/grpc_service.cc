#include "pserver/grpc_service.h"

#include "common/grpc_status.h"

namespace shardps {
namespace {

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx,
                                const absl::Status& s) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* GrpcPsService::InitJob(
    grpc::CallbackServerContext* ctx, const InitJobRequest* req,
    InitJobResponse* resp) {
  return Reply(ctx, handler_->InitJob(*req, resp));
}

grpc::ServerUnaryReactor* GrpcPsService::SetInitialValues(
    grpc::CallbackServerContext* ctx, const SetInitialValuesRequest* req,
    SetInitialValuesResponse* resp) {
  return Reply(ctx, handler_->SetInitialValues(*req, resp));
}

grpc::ServerUnaryReactor* GrpcPsService::CommitInit(
    grpc::CallbackServerContext* ctx, const CommitInitRequest* req,
    CommitInitResponse* resp) {
  return Reply(ctx, handler_->CommitInit(*req, resp));
}

grpc::ServerUnaryReactor* GrpcPsService::Register(
    grpc::CallbackServerContext* ctx, const RegisterRequest* req,
    RegisterResponse* resp) {
  return Reply(ctx, handler_->Register(*req, resp, ctx->peer()));
}

grpc::ServerUnaryReactor* GrpcPsService::GetStatus(
    grpc::CallbackServerContext* ctx, const GetStatusRequest* req,
    GetStatusResponse* resp) {
  return Reply(ctx, handler_->GetStatus(*req, resp));
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
  return Reply(ctx, handler_->Push(*req, resp));
}

grpc::ServerUnaryReactor* GrpcPsService::Heartbeat(
    grpc::CallbackServerContext* ctx, const HeartbeatRequest* req,
    HeartbeatResponse* resp) {
  return Reply(ctx, handler_->Heartbeat(*req, resp));
}

grpc::ServerUnaryReactor* GrpcPsService::Leave(grpc::CallbackServerContext* ctx,
                                               const LeaveRequest* req,
                                               LeaveResponse* resp) {
  return Reply(ctx, handler_->Leave(*req, resp));
}

grpc::ServerUnaryReactor* GrpcPsService::Checkpoint(
    grpc::CallbackServerContext* ctx, const CheckpointRequest* req,
    CheckpointResponse* resp) {
  return Reply(ctx, handler_->Checkpoint(*req, resp));
}

grpc::ServerUnaryReactor* GrpcPsService::Rollback(
    grpc::CallbackServerContext* ctx, const RollbackRequest* req,
    RollbackResponse* resp) {
  return Reply(ctx, handler_->Rollback(*req, resp));
}

}  // namespace shardps
