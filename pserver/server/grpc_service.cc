#include "pserver/server/grpc_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/job_id.h"
#include "common/auth/peer_host.h"
#include "common/grpc/grpc_credentials.h"
#include "common/grpc/grpc_status.h"
#include "common/grpc/grpc_wire.h"

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
  CallContext c;
  c.job_id = JobIdOf(ctx);
  if (rpc == PsRpc::kRegister) c.peer = ctx->peer();
  if (static_cast<int>(rpc) >= kFirstReplicationRpc) {
    std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
    if (auth != nullptr) {
      for (const grpc::string_ref& v :
           auth->FindPropertyValues(kPeerIdentityProperty)) {
        c.peer_identity.assign(v.data(), v.size());
      }
    }
  }
  return c;
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

grpc::ServerUnaryReactor* GrpcPsService::Pull(grpc::CallbackServerContext* ctx,
                                              const grpc::ByteBuffer* raw_req,
                                              grpc::ByteBuffer* raw_resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // The request and reply live until gRPC has sent the reply's slices; the
  // reply's bytes are held in replies_ until then.
  struct Exchange {
    Exchange(ReplyGate* g, std::string j) : gate(g), job(std::move(j)) {}
    ~Exchange() {
      if (held > 0) gate->Release(job, held);
    }
    ReplyGate* const gate;
    const std::string job;
    int64_t held = 0;
    PullRequest req;
    PullResponse resp;
  };
  CallContext context = ContextOf(ctx, PsRpc::kPull);
  auto x = std::make_shared<Exchange>(&replies_, context.job_id);
  if (absl::Status s = ParseByteBuffer(*raw_req, &x->req); !s.ok()) {
    dispatcher_.Refused(PsRpc::kPull, s, raw_req->Length());
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  auto start = [this, reactor, x, raw_resp,
                context = std::move(context)]() mutable {
    dispatcher_.Call(PsRpc::kPull, context, x->req, &x->resp,
                     [reactor, x, raw_resp](absl::Status s) {
                       if (s.ok()) {
                         *raw_resp = SerializeAliasing(x->resp, x);
                         x->held = raw_resp->Length();
                         x->gate->Hold(x->job, x->held);
                       }
                       reactor->Finish(ToGrpcStatus(s));
                     });
  };
  if (!replies_.Admit(x->job, std::move(start))) {
    const absl::Status s = absl::ResourceExhaustedError(
        absl::StrCat("more than ", kMaxPullsWaitingForReplies,
                     " pulls wait for earlier replies to be read (",
                     replies_.held() >> 20, " MiB of replies not yet read)"));
    dispatcher_.Refused(PsRpc::kPull, s, raw_req->Length());
    reactor->Finish(ToGrpcStatus(s));
  }
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::Answer(
    grpc::CallbackServerContext* ctx, PsRpc rpc, const SharedMemoryRequest* req,
    SharedMemoryResponse* resp) {
  // A region is mapped by process id and descriptor: only a trainer on this
  // host can use one, so no other caller gets a memfd, a mapping or a
  // thread of this pserver's.
  if (!PeerIsOnThisHost(ctx->peer())) {
    const absl::Status s = absl::PermissionDeniedError(absl::StrCat(
        "shared memory is for trainers on this pserver's host; this call "
        "came from ",
        ctx->peer()));
    dispatcher_.Refused(rpc, s, req->ByteSizeLong());
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  return Bind(ctx, rpc, *req, resp, [this, job_id = JobIdOf(ctx), req, resp] {
    if (!req->calls()) {
      shared_calls_.Forget(job_id, req->trainer_id());
      return;
    }
    // Pushes and pulls may then come through the region.
    auto job = dispatcher_.Job(job_id, JobAccess::kIfKnown);
    absl::Status s = job.ok()
                         ? shared_calls_.Serve(job_id, *job, req->trainer_id(),
                                               resp->region_id())
                         : job.status();
    resp->set_calls(s.ok());
  });
}

grpc::ServerUnaryReactor* GrpcPsService::Answer(
    grpc::CallbackServerContext* ctx, PsRpc rpc, const TcpLaneRequest* req,
    TcpLaneResponse* resp) {
  if (tcp_lane_ == nullptr) {
    const absl::Status s = absl::FailedPreconditionError(
        absl::StrCat("TCP lane: ", why_no_tcp_lane_));
    dispatcher_.Refused(rpc, s, req->ByteSizeLong());
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  return Bind(ctx, rpc, *req, resp, [this, job_id = JobIdOf(ctx), req, resp] {
    auto job = dispatcher_.Job(job_id, JobAccess::kIfKnown);
    if (!job.ok()) return;  // ended meanwhile: no ticket
    resp->set_port(static_cast<uint32_t>(tcp_lane_->port()));
    resp->set_ticket(tcp_lane_->Issue(job_id, *job, req->trainer_id()));
  });
}

}  // namespace shardps
