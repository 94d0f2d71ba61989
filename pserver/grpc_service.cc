#include "pserver/grpc_service.h"

#include "common/grpc_status.h"
#include "common/job_id.h"

namespace shardps {
namespace {

// The handler of the job the call names in its metadata (the default job
// when it names none).
absl::StatusOr<std::shared_ptr<RequestHandler>> JobOf(
    JobDirectory* jobs, grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kJobMetadataKey);
  if (it == md.end()) return jobs->Job(kDefaultJobId);
  return jobs->Job(absl::string_view(it->second.data(), it->second.size()));
}

}  // namespace

template <typename Handle>
grpc::ServerUnaryReactor* GrpcPsService::Reply(grpc::CallbackServerContext* ctx,
                                               Handle handle) {
  // An allocation that fails in a handler is RESOURCE_EXHAUSTED (the
  // handler leaves nothing half-done), not an exception for gRPC, which
  // would answer UNIMPLEMENTED.
  absl::Status s;
  try {
    auto job = JobOf(jobs_, ctx);
    s = job.ok() ? handle(**job) : job.status();
  } catch (const std::bad_alloc&) {
    s = absl::ResourceExhaustedError(
        "the pserver is out of memory (see --max_memory_mb)");
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::InitJob(
    grpc::CallbackServerContext* ctx, const InitJobRequest* req,
    InitJobResponse* resp) {
  return Reply(ctx, [&](RequestHandler& h) { return h.InitJob(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::SetInitialValues(
    grpc::CallbackServerContext* ctx, const SetInitialValuesRequest* req,
    SetInitialValuesResponse* resp) {
  return Reply(
      ctx, [&](RequestHandler& h) { return h.SetInitialValues(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::CommitInit(
    grpc::CallbackServerContext* ctx, const CommitInitRequest* req,
    CommitInitResponse* resp) {
  return Reply(ctx,
               [&](RequestHandler& h) { return h.CommitInit(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::Register(
    grpc::CallbackServerContext* ctx, const RegisterRequest* req,
    RegisterResponse* resp) {
  return Reply(ctx, [&](RequestHandler& h) {
    return h.Register(*req, resp, ctx->peer());
  });
}

grpc::ServerUnaryReactor* GrpcPsService::GetStatus(
    grpc::CallbackServerContext* ctx, const GetStatusRequest* req,
    GetStatusResponse* resp) {
  return Reply(ctx, [&](RequestHandler& h) { return h.GetStatus(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::Pull(grpc::CallbackServerContext* ctx,
                                              const PullRequest* req,
                                              PullResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto job = JobOf(jobs_, ctx);
  if (!job.ok()) {
    reactor->Finish(ToGrpcStatus(job.status()));
    return reactor;
  }
  // The answer may come later: the job stays until it does.
  RequestHandler* h = job->get();
  h->Pull(*req, resp, [reactor, job = *std::move(job)](absl::Status s) {
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::Push(grpc::CallbackServerContext* ctx,
                                              const PushRequest* req,
                                              PushResponse* resp) {
  return Reply(ctx, [&](RequestHandler& h) { return h.Push(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::Heartbeat(
    grpc::CallbackServerContext* ctx, const HeartbeatRequest* req,
    HeartbeatResponse* resp) {
  return Reply(ctx, [&](RequestHandler& h) { return h.Heartbeat(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::Leave(grpc::CallbackServerContext* ctx,
                                               const LeaveRequest* req,
                                               LeaveResponse* resp) {
  return Reply(ctx, [&](RequestHandler& h) { return h.Leave(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::Checkpoint(
    grpc::CallbackServerContext* ctx, const CheckpointRequest* req,
    CheckpointResponse* resp) {
  return Reply(ctx,
               [&](RequestHandler& h) { return h.Checkpoint(*req, resp); });
}

grpc::ServerUnaryReactor* GrpcPsService::Rollback(
    grpc::CallbackServerContext* ctx, const RollbackRequest* req,
    RollbackResponse* resp) {
  return Reply(ctx, [&](RequestHandler& h) { return h.Rollback(*req, resp); });
}

}  // namespace shardps
