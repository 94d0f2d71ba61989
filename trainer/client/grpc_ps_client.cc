#include "trainer/client/grpc_ps_client.h"

#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/wire_limits.h"
#include "glog/logging.h"

namespace shardps {

template <typename Req, typename Resp>
struct GrpcPsClient::Call {
  const char* name;
  const Req* req;
  Resp* resp;
  StatusCallback done;
  std::unique_ptr<grpc::ClientContext> ctx;
  absl::Time start;
  absl::Time last_log = absl::InfinitePast();
  absl::Duration backoff;
  int attempt = 0;
};

std::unique_ptr<GrpcPsClient> GrpcPsClient::Create(const std::string& address,
                                                   RpcOptions options,
                                                   RetryTimer* timer) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  // Reconnect quickly to a restarted pserver.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  auto channel = grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args);
  return std::make_unique<GrpcPsClient>(address, std::move(channel), options,
                                        timer);
}

GrpcPsClient::GrpcPsClient(std::string address,
                           std::shared_ptr<grpc::Channel> channel,
                           RpcOptions options, RetryTimer* timer)
    : address_(std::move(address)),
      options_(options),
      timer_(timer),
      channel_(std::move(channel)),
      stub_(ParameterServer::NewStub(channel_)) {}

template <typename Req, typename Resp, typename Method>
void GrpcPsClient::Start(const char* name, Method method, const Req& req,
                         Resp* resp, StatusCallback done) {
  auto call = std::make_shared<Call<Req, Resp>>();
  call->name = name;
  call->req = &req;
  call->resp = resp;
  call->done = std::move(done);
  call->start = absl::Now();
  call->backoff = options_.initial_backoff;
  Attempt(std::move(call), method);
}

template <typename Req, typename Resp, typename Method>
void GrpcPsClient::Attempt(std::shared_ptr<Call<Req, Resp>> call,
                           Method method) {
  call->ctx = std::make_unique<grpc::ClientContext>();
  call->ctx->set_deadline(
      std::chrono::system_clock::now() +
      absl::ToChronoMilliseconds(options_.attempt_deadline));
  // No wait_for_ready: while a pserver is down a call fails at once with
  // UNAVAILABLE, and the retry loop below logs whom it waits for.
  call->ctx->set_wait_for_ready(false);
  ++call->attempt;
  auto on_done = [this, call, method](grpc::Status gs) {
    absl::Status s = FromGrpcStatus(gs);
    const bool transient = s.code() == absl::StatusCode::kUnavailable ||
                           s.code() == absl::StatusCode::kDeadlineExceeded;
    const absl::Time now = absl::Now();
    if (transient && now - call->start < options_.retry_budget) {
      if (now - call->last_log >= absl::Seconds(10)) {
        call->last_log = now;
        LOG(WARNING) << call->name << " to pserver " << address_ << ": "
                     << s.message() << " ("
                     << absl::StatusCodeToString(s.code())
                     << "); waiting for it, retry " << call->attempt << ", "
                     << absl::FormatDuration(now - call->start) << " so far";
      }
      static thread_local std::mt19937 rng(std::random_device{}());
      const double jitter = std::uniform_real_distribution<>(0.5, 1.0)(rng);
      const absl::Duration wait = call->backoff * jitter;
      call->backoff = std::min(call->backoff * 2, options_.max_backoff);
      call->resp->Clear();
      timer_->Schedule(now + wait,
                       [this, call, method] { Attempt(call, method); });
      return;
    }
    if (!s.ok()) {
      s = absl::Status(s.code(), absl::StrCat(call->name, " to pserver ",
                                              address_, ": ", s.message()));
    }
    // This closure, and the Call it holds, may be destroyed on a gRPC thread
    // after `done` has let the owner destroy this client. Drop the context
    // (and its reference to the channel) now, while the client still holds
    // the channel: a channel released last on a gRPC callback thread can
    // abort gRPC 1.51 when it shuts its callback completion queue down.
    call->ctx.reset();
    StatusCallback done = std::move(call->done);
    done(std::move(s));
  };
  method(call->ctx.get(), call->req, call->resp, std::move(on_done));
}

void GrpcPsClient::InitJobAsync(const InitJobRequest& req,
                                InitJobResponse* resp, StatusCallback done) {
  Start(
      "InitJob",
      [this](grpc::ClientContext* ctx, const InitJobRequest* r,
             InitJobResponse* o, std::function<void(grpc::Status)> cb) {
        stub_->async()->InitJob(ctx, r, o, std::move(cb));
      },
      req, resp, std::move(done));
}

void GrpcPsClient::SetInitialValuesAsync(const SetInitialValuesRequest& req,
                                         SetInitialValuesResponse* resp,
                                         StatusCallback done) {
  Start(
      "SetInitialValues",
      [this](grpc::ClientContext* ctx, const SetInitialValuesRequest* r,
             SetInitialValuesResponse* o,
             std::function<void(grpc::Status)> cb) {
        stub_->async()->SetInitialValues(ctx, r, o, std::move(cb));
      },
      req, resp, std::move(done));
}

void GrpcPsClient::CommitInitAsync(const CommitInitRequest& req,
                                   CommitInitResponse* resp,
                                   StatusCallback done) {
  Start(
      "CommitInit",
      [this](grpc::ClientContext* ctx, const CommitInitRequest* r,
             CommitInitResponse* o, std::function<void(grpc::Status)> cb) {
        stub_->async()->CommitInit(ctx, r, o, std::move(cb));
      },
      req, resp, std::move(done));
}

void GrpcPsClient::RegisterAsync(const RegisterRequest& req,
                                 RegisterResponse* resp, StatusCallback done) {
  Start(
      "Register",
      [this](grpc::ClientContext* ctx, const RegisterRequest* r,
             RegisterResponse* o, std::function<void(grpc::Status)> cb) {
        stub_->async()->Register(ctx, r, o, std::move(cb));
      },
      req, resp, std::move(done));
}

void GrpcPsClient::GetStatusAsync(const GetStatusRequest& req,
                                  GetStatusResponse* resp,
                                  StatusCallback done) {
  Start(
      "GetStatus",
      [this](grpc::ClientContext* ctx, const GetStatusRequest* r,
             GetStatusResponse* o, std::function<void(grpc::Status)> cb) {
        stub_->async()->GetStatus(ctx, r, o, std::move(cb));
      },
      req, resp, std::move(done));
}

void GrpcPsClient::PullAsync(const PullRequest& req, PullResponse* resp,
                             StatusCallback done) {
  Start(
      "Pull",
      [this](grpc::ClientContext* ctx, const PullRequest* r, PullResponse* o,
             std::function<void(grpc::Status)> cb) {
        stub_->async()->Pull(ctx, r, o, std::move(cb));
      },
      req, resp, std::move(done));
}

void GrpcPsClient::PushAsync(const PushRequest& req, PushResponse* resp,
                             StatusCallback done) {
  Start(
      "Push",
      [this](grpc::ClientContext* ctx, const PushRequest* r, PushResponse* o,
             std::function<void(grpc::Status)> cb) {
        stub_->async()->Push(ctx, r, o, std::move(cb));
      },
      req, resp, std::move(done));
}

void GrpcPsClient::HeartbeatAsync(const HeartbeatRequest& req,
                                  HeartbeatResponse* resp,
                                  StatusCallback done) {
  Start(
      "Heartbeat",
      [this](grpc::ClientContext* ctx, const HeartbeatRequest* r,
             HeartbeatResponse* o, std::function<void(grpc::Status)> cb) {
        stub_->async()->Heartbeat(ctx, r, o, std::move(cb));
      },
      req, resp, std::move(done));
}

void GrpcPsClient::LeaveAsync(const LeaveRequest& req, LeaveResponse* resp,
                              StatusCallback done) {
  Start(
      "Leave",
      [this](grpc::ClientContext* ctx, const LeaveRequest* r, LeaveResponse* o,
             std::function<void(grpc::Status)> cb) {
        stub_->async()->Leave(ctx, r, o, std::move(cb));
      },
      req, resp, std::move(done));
}

void GrpcPsClient::CheckpointAsync(const CheckpointRequest& req,
                                   CheckpointResponse* resp,
                                   StatusCallback done) {
  Start(
      "Checkpoint",
      [this](grpc::ClientContext* ctx, const CheckpointRequest* r,
             CheckpointResponse* o, std::function<void(grpc::Status)> cb) {
        stub_->async()->Checkpoint(ctx, r, o, std::move(cb));
      },
      req, resp, std::move(done));
}

void GrpcPsClient::RollbackAsync(const RollbackRequest& req,
                                 RollbackResponse* resp, StatusCallback done) {
  Start(
      "Rollback",
      [this](grpc::ClientContext* ctx, const RollbackRequest* r,
             RollbackResponse* o, std::function<void(grpc::Status)> cb) {
        stub_->async()->Rollback(ctx, r, o, std::move(cb));
      },
      req, resp, std::move(done));
}

}  // namespace shardps
