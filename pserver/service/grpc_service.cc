#include "pserver/service/grpc_service.h"

#include "absl/strings/str_cat.h"
#include "base/job_id.h"
#include "common/transport/grpc_status.h"
#include "common/transport/grpc_wire.h"

namespace shardps {
std::vector<std::string> GrpcPsService::MethodNames() {
  return {"InitJob",    "SetInitialValues", "CommitInit",
          "Register",   "GetStatus",        "Pull",
          "Push",       "Heartbeat",        "Leave",
          "Checkpoint", "Rollback",         "OpenSharedMemory",
          "ChangeView", "Forward",          "ViewPrepare",
          "ViewAccept", "ViewCommit",       "InstallUnit"};
}

// The handler of the job the call names in its metadata (the default job
// when it names none).
absl::StatusOr<std::shared_ptr<RequestHandler>> GrpcPsService::JobOf(
    grpc::CallbackServerContext* ctx) const {
  if (!serving_.load()) {
    return absl::UnavailableError(
        "the pserver is starting (loading its checkpoints)");
  }
  return jobs_->Job(JobIdOf(ctx));
}

std::string GrpcPsService::JobIdOf(grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kJobMetadataKey);
  if (it == md.end()) return std::string(kDefaultJobId);
  return std::string(it->second.data(), it->second.size());
}

void GrpcPsService::Record(const char* method, const absl::Status& s,
                           absl::Time start, size_t request_bytes,
                           size_t response_bytes) {
  if (metrics_ == nullptr) return;
  metrics_->Record(method, s.code(), absl::Now() - start, request_bytes,
                   s.ok() ? response_bytes : 0);
}

template <typename Request, typename Response, typename Handle>
grpc::ServerUnaryReactor* GrpcPsService::Reply(grpc::CallbackServerContext* ctx,
                                               const char* method,
                                               const Request& req,
                                               const Response* resp,
                                               Handle handle) {
  const absl::Time start = absl::Now();
  // An allocation that fails in a handler is RESOURCE_EXHAUSTED (the
  // handler leaves nothing half-done), not an exception for gRPC, which
  // would answer UNIMPLEMENTED.
  absl::Status s;
  try {
    auto job = JobOf(ctx);
    s = job.ok() ? handle(**job) : job.status();
  } catch (const std::bad_alloc&) {
    s = absl::ResourceExhaustedError(
        "the pserver is out of memory (see --max_memory_mb)");
  }
  Record(method, s, start, metrics_ ? req.ByteSizeLong() : 0,
         metrics_ ? resp->ByteSizeLong() : 0);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

namespace {

absl::Status PoolFull(const char* method) {
  return absl::ResourceExhaustedError(absl::StrCat(
      method,
      ": the pserver has 64 MiB of calls waiting for other pservers (a "
      "replicated job's pushes wait for their backups); retry"));
}

}  // namespace

// A replicated job's calls may wait on blocks held while their updates
// reach the backups (or on the gate behind such pushes): they run on the
// blocking pool, leaving gRPC's threads free for the health service and
// the calls between pservers.
bool GrpcPsService::Replicated(RequestHandler& h) {
  return h.replicas() != nullptr;
}

template <typename Request, typename Response, typename Handle,
          typename Blocking>
grpc::ServerUnaryReactor* GrpcPsService::ReplyMaybeLater(
    grpc::CallbackServerContext* ctx, const char* method, const Request* req,
    Response* resp, Handle handle, Blocking blocking, BlockingPool* pool) {
  auto job = JobOf(ctx);
  if (!job.ok() || !blocking(**job)) {
    return Reply(ctx, method, *req, resp, handle);
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto task = [this, reactor, method, req, resp, handle, job = *job,
               start = absl::Now()] {
    absl::Status s;
    try {
      s = handle(*job);
    } catch (const std::bad_alloc&) {
      s = absl::ResourceExhaustedError(
          "the pserver is out of memory (see --max_memory_mb)");
    }
    Record(method, s, start, metrics_ ? req->ByteSizeLong() : 0,
           metrics_ ? resp->ByteSizeLong() : 0);
    reactor->Finish(ToGrpcStatus(s));
  };
  if (!pool->TrySchedule(std::move(task), req->ByteSizeLong())) {
    reactor->Finish(ToGrpcStatus(PoolFull(method)));
  }
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::InitJob(
    grpc::CallbackServerContext* ctx, const InitJobRequest* req,
    InitJobResponse* resp) {
  return ReplyMaybeLater(
      ctx, "InitJob", req, resp,
      [req, resp](RequestHandler& h) { return h.InitJob(*req, resp); },
      Replicated, &blocking_);
}

grpc::ServerUnaryReactor* GrpcPsService::SetInitialValues(
    grpc::CallbackServerContext* ctx, const SetInitialValuesRequest* req,
    SetInitialValuesResponse* resp) {
  return ReplyMaybeLater(
      ctx, "SetInitialValues", req, resp,
      [req, resp](RequestHandler& h) { return h.SetInitialValues(*req, resp); },
      Replicated, &blocking_);
}

grpc::ServerUnaryReactor* GrpcPsService::CommitInit(
    grpc::CallbackServerContext* ctx, const CommitInitRequest* req,
    CommitInitResponse* resp) {
  return ReplyMaybeLater(
      ctx, "CommitInit", req, resp,
      [req, resp](RequestHandler& h) { return h.CommitInit(*req, resp); },
      Replicated, &blocking_);
}

grpc::ServerUnaryReactor* GrpcPsService::Register(
    grpc::CallbackServerContext* ctx, const RegisterRequest* req,
    RegisterResponse* resp) {
  return ReplyMaybeLater(
      ctx, "Register", req, resp,
      [req, resp, peer = ctx->peer()](RequestHandler& h) {
        return h.Register(*req, resp, peer);
      },
      Replicated, &blocking_);
}

grpc::ServerUnaryReactor* GrpcPsService::GetStatus(
    grpc::CallbackServerContext* ctx, const GetStatusRequest* req,
    GetStatusResponse* resp) {
  return ReplyMaybeLater(
      ctx, "GetStatus", req, resp,
      [req, resp](RequestHandler& h) { return h.GetStatus(*req, resp); },
      Replicated, &blocking_);
}

grpc::ServerUnaryReactor* GrpcPsService::Pull(grpc::CallbackServerContext* ctx,
                                              const grpc::ByteBuffer* raw_req,
                                              grpc::ByteBuffer* raw_resp) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // The request and reply live until gRPC has sent the reply's slices.
  struct Exchange {
    PullRequest req;
    PullResponse resp;
  };
  auto x = std::make_shared<Exchange>();
  absl::Status parsed = ParseByteBuffer(*raw_req, &x->req);
  auto job = parsed.ok() ? JobOf(ctx) : parsed;
  if (!job.ok()) {
    Record("Pull", job.status(), start, raw_req->Length(), 0);
    reactor->Finish(ToGrpcStatus(job.status()));
    return reactor;
  }
  // The answer may come later: the job stays until it does.
  RequestHandler* h = job->get();
  auto start_pull = [this, reactor, start, x, raw_resp, h, job = *job] {
    h->Pull(x->req, &x->resp,
            [this, reactor, start, x, raw_resp, job](absl::Status s) {
              if (s.ok()) *raw_resp = SerializeAliasing(x->resp, x);
              if (metrics_ != nullptr) {
                if (s.ok()) {
                  metrics_->RecordPullWait(
                      absl::Microseconds(x->resp.wait_micros()));
                }
                Record("Pull", s, start, x->req.ByteSizeLong(),
                       s.ok() ? raw_resp->Length() : 0);
              }
              reactor->Finish(ToGrpcStatus(s));
            });
  };
  if (h->replicas() == nullptr) {
    start_pull();
  } else if (!blocking_.TrySchedule(start_pull, raw_req->Length())) {
    // A replicated job's units stay locked while their updates reach the
    // backups: the pull waits for them on a thread of ours.
    reactor->Finish(ToGrpcStatus(PoolFull("Pull")));
  }
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::Push(grpc::CallbackServerContext* ctx,
                                              const PushRequest* req,
                                              PushResponse* resp) {
  return ReplyMaybeLater(
      ctx, "Push", req, resp,
      [req, resp](RequestHandler& h) { return h.Push(*req, resp); }, Replicated,
      &blocking_);
}

grpc::ServerUnaryReactor* GrpcPsService::Heartbeat(
    grpc::CallbackServerContext* ctx, const HeartbeatRequest* req,
    HeartbeatResponse* resp) {
  return ReplyMaybeLater(
      ctx, "Heartbeat", req, resp,
      [req, resp](RequestHandler& h) { return h.Heartbeat(*req, resp); },
      Replicated, &blocking_);
}

grpc::ServerUnaryReactor* GrpcPsService::Leave(grpc::CallbackServerContext* ctx,
                                               const LeaveRequest* req,
                                               LeaveResponse* resp) {
  return ReplyMaybeLater(
      ctx, "Leave", req, resp,
      [req, resp](RequestHandler& h) { return h.Leave(*req, resp); },
      Replicated, &blocking_);
}

grpc::ServerUnaryReactor* GrpcPsService::Checkpoint(
    grpc::CallbackServerContext* ctx, const CheckpointRequest* req,
    CheckpointResponse* resp) {
  return ReplyMaybeLater(
      ctx, "Checkpoint", req, resp,
      [req, resp](RequestHandler& h) { return h.Checkpoint(*req, resp); },
      Replicated, &blocking_);
}

grpc::ServerUnaryReactor* GrpcPsService::Rollback(
    grpc::CallbackServerContext* ctx, const RollbackRequest* req,
    RollbackResponse* resp) {
  return ReplyMaybeLater(
      ctx, "Rollback", req, resp,
      [req, resp](RequestHandler& h) { return h.Rollback(*req, resp); },
      Replicated, &blocking_);
}

grpc::ServerUnaryReactor* GrpcPsService::OpenSharedMemory(
    grpc::CallbackServerContext* ctx, const SharedMemoryRequest* req,
    SharedMemoryResponse* resp) {
  return Reply(ctx, "OpenSharedMemory", *req, resp, [&](RequestHandler& h) {
    absl::Status s = h.OpenSharedMemory(*req, resp);
    if (!s.ok()) return s;
    if (!req->calls()) {
      shared_calls_.Forget(JobIdOf(ctx), req->trainer_id());
      return s;
    }
    // Pushes and pulls may then come through the region (the handler is
    // the job's: JobOf found it).
    auto job = JobOf(ctx);
    if (job.ok()) {
      s = shared_calls_.Serve(JobIdOf(ctx), *job, req->trainer_id(),
                              resp->region_id());
    }
    resp->set_calls(job.ok() && s.ok());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GrpcPsService::ChangeView(
    grpc::CallbackServerContext* ctx, const ChangeViewRequest* req,
    ChangeViewResponse* resp) {
  return ReplyMaybeLater(
      ctx, "ChangeView", req, resp,
      [req, resp](RequestHandler& h) { return h.ChangeView(*req, resp); },
      [](RequestHandler&) { return true; }, &blocking_);
}

grpc::ServerUnaryReactor* GrpcPsService::Forward(
    grpc::CallbackServerContext* ctx, const ForwardRequest* req,
    ForwardResponse* resp) {
  return ReplyMaybeLater(
      ctx, "Forward", req, resp,
      [req, resp](RequestHandler& h) { return h.Forward(*req, resp); },
      Replicated, &peer_pool_);
}

grpc::ServerUnaryReactor* GrpcPsService::ViewPrepare(
    grpc::CallbackServerContext* ctx, const ViewPrepareRequest* req,
    ViewPrepareResponse* resp) {
  return ReplyMaybeLater(
      ctx, "ViewPrepare", req, resp,
      [req, resp](RequestHandler& h) { return h.ViewPrepare(*req, resp); },
      Replicated, &peer_pool_);
}

grpc::ServerUnaryReactor* GrpcPsService::ViewAccept(
    grpc::CallbackServerContext* ctx, const ViewAcceptRequest* req,
    ViewAcceptResponse* resp) {
  return ReplyMaybeLater(
      ctx, "ViewAccept", req, resp,
      [req, resp](RequestHandler& h) { return h.ViewAccept(*req, resp); },
      Replicated, &peer_pool_);
}

grpc::ServerUnaryReactor* GrpcPsService::ViewCommit(
    grpc::CallbackServerContext* ctx, const ViewCommitRequest* req,
    ViewCommitResponse* resp) {
  return ReplyMaybeLater(
      ctx, "ViewCommit", req, resp,
      [req, resp](RequestHandler& h) { return h.ViewCommit(*req, resp); },
      Replicated, &peer_pool_);
}

grpc::ServerUnaryReactor* GrpcPsService::InstallUnit(
    grpc::CallbackServerContext* ctx, const InstallUnitRequest* req,
    InstallUnitResponse* resp) {
  return ReplyMaybeLater(
      ctx, "InstallUnit", req, resp,
      [req, resp](RequestHandler& h) { return h.InstallUnit(*req, resp); },
      Replicated, &peer_pool_);
}

}  // namespace shardps
