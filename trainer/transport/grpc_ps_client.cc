#include "trainer/transport/grpc_ps_client.h"

#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/job_id.h"
#include "common/grpc/grpc_credentials.h"
#include "common/grpc/grpc_keepalive.h"
#include "common/grpc/grpc_status.h"
#include "common/grpc/grpc_wire.h"
#include "common/transport/wire_limits.h"
#include "glog/logging.h"

namespace shardps {

struct GrpcPsClient::Call {
  PsRpc rpc;
  const google::protobuf::Message* req;  // or, already serialized:
  std::shared_ptr<const grpc::ByteBuffer> raw_req;
  google::protobuf::Message* resp;
  StatusCallback done;
  std::shared_ptr<grpc::ClientContext> ctx;
  int64_t epoch = 0;  // GrpcPsClient::cancel_epoch_ when it started
  absl::Time start;
  absl::Time last_log = absl::InfinitePast();
  absl::Duration backoff;
  int attempt = 0;
};

std::unique_ptr<GrpcPsClient> GrpcPsClient::Create(
    const std::string& address, RpcOptions options, RetryTimer* timer,
    const TransportSecurity& security) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  // Reconnect quickly to a restarted pserver.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  if (options.keepalive > absl::ZeroDuration()) {
    AddKeepaliveArgs(options.keepalive, &args);
  }
  AddChannelSecurityArgs(security, &args);
  auto channel =
      grpc::CreateCustomChannel(address, ChannelCredentialsFor(security), args);
  return std::make_unique<GrpcPsClient>(address, std::move(channel), options,
                                        timer, security.auth_token);
}

GrpcPsClient::GrpcPsClient(std::string address,
                           std::shared_ptr<grpc::Channel> channel,
                           RpcOptions options, RetryTimer* timer,
                           std::string auth_token)
    : address_(std::move(address)),
      options_(options),
      timer_(timer),
      channel_(std::move(channel)),
      authorization_(auth_token.empty() ? "" : BearerMetadataValue(auth_token)),
      life_(std::make_shared<Life>()) {
  {
    Life* const f = life_.get();
    absl::WriterMutexLock l(&f->mu);
    f->client = this;
  }
  methods_.reserve(kNumPsRpcs);
  for (int i = 0; i < kNumPsRpcs; ++i) {
    const google::protobuf::MethodDescriptor& m =
        PsRpcMethod(static_cast<PsRpc>(i));
    paths_[i] = absl::StrCat("/", m.service()->full_name(), "/", m.name());
    methods_.emplace_back(paths_[i].c_str(),
                          grpc::internal::RpcMethod::NORMAL_RPC, channel_);
  }
}

GrpcPsClient::~GrpcPsClient() {
  {
    // No retry due later reaches this client; one running now ends first.
    Life* const f = life_.get();
    absl::WriterMutexLock l(&f->mu);
    f->client = nullptr;
  }
  CancelCalls();
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](int64_t* n) { return *n == 0; }, &unfinished_));
}

void GrpcPsClient::CallAsync(PsRpc rpc, const google::protobuf::Message& req,
                             google::protobuf::Message* resp,
                             StatusCallback done) {
  DCHECK(req.GetDescriptor() == PsRpcMethod(rpc).input_type());
  Start(rpc, &req, nullptr, resp, std::move(done));
}

void GrpcPsClient::PushDenseAsync(const DensePush& push, PushResponse* resp,
                                  StatusCallback done) {
  // Serialized once; a retry sends the same slices again.
  Start(PsRpc::kPush, nullptr,
        std::make_shared<const grpc::ByteBuffer>(SerializeDensePush(push)),
        resp, std::move(done));
}

void GrpcPsClient::Start(PsRpc rpc, const google::protobuf::Message* req,
                         std::shared_ptr<const grpc::ByteBuffer> raw_req,
                         google::protobuf::Message* resp, StatusCallback done) {
  DCHECK(resp->GetDescriptor() == PsRpcMethod(rpc).output_type());
  auto call = std::make_shared<Call>();
  call->rpc = rpc;
  call->req = req;
  call->raw_req = std::move(raw_req);
  call->resp = resp;
  call->done = std::move(done);
  call->start = absl::Now();
  call->backoff = options_.initial_backoff;
  {
    absl::MutexLock l(&mu_);
    call->epoch = cancel_epoch_;
    ++unfinished_;
  }
  Attempt(std::move(call));
}

void GrpcPsClient::CancelCalls() {
  std::vector<std::shared_ptr<grpc::ClientContext>> in_flight;
  std::vector<std::shared_ptr<Call>> waiting;
  {
    absl::MutexLock l(&mu_);
    ++cancel_epoch_;
    for (const auto& [call, ctx] : active_) in_flight.push_back(ctx);
    for (auto& [ptr, call] : waiting_) waiting.push_back(std::move(call));
    waiting_.clear();
  }
  // Outside the lock: gRPC may run a call's callback inside TryCancel, and
  // the callback takes mu_ (AttemptDone sees the epoch and ends the call).
  for (const auto& ctx : in_flight) ctx->TryCancel();
  // The calls waiting for a retry end now (their timer finds them gone).
  for (const auto& call : waiting) {
    Finish(call.get(),
           absl::CancelledError(absl::StrCat(
               PsRpcMethod(call->rpc).name(), " to pserver ", address_,
               ": cancelled (the trainer is stopping) "
               "after ",
               call->attempt, " attempt(s)")));
  }
}

void GrpcPsClient::Finish(Call* call, absl::Status s) {
  // This closure, and the Call it holds, may be destroyed on a gRPC thread
  // after `done` has let the owner destroy this client. Drop the context
  // (and its reference to the channel) now, while the client still holds
  // the channel: a channel released last on a gRPC callback thread can
  // abort gRPC 1.51 when it shuts its callback completion queue down.
  call->ctx.reset();
  StatusCallback done = std::move(call->done);
  done(std::move(s));
  absl::MutexLock l(&mu_);
  --unfinished_;
}

void GrpcPsClient::Retry(const std::shared_ptr<Call>& call) {
  {
    absl::MutexLock l(&mu_);
    if (waiting_.erase(call.get()) == 0) return;  // ended by the destructor
  }
  Attempt(call);
}

void GrpcPsClient::Attempt(std::shared_ptr<Call> call) {
  auto ctx = std::make_shared<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(options_.attempt_deadline));
  // No wait_for_ready: while a pserver is down a call fails at once with
  // UNAVAILABLE, and the retry loop below logs whom it waits for.
  ctx->set_wait_for_ready(false);
  if (!authorization_.empty()) {
    ctx->AddMetadata(kAuthorizationMetadataKey, authorization_);
  }
  if (!options_.job_id.empty()) {
    ctx->AddMetadata(kJobMetadataKey, options_.job_id);
  }
  bool cancelled;
  {
    // Registered before the call starts: a TryCancel before the start
    // cancels it as it starts.
    absl::MutexLock l(&mu_);
    cancelled = call->epoch != cancel_epoch_;
    if (!cancelled) {
      call->ctx = ctx;
      active_[call.get()] = std::move(ctx);
    }
  }
  if (cancelled) {
    Finish(call.get(),
           absl::CancelledError(absl::StrCat(
               PsRpcMethod(call->rpc).name(), " to pserver ", address_,
               ": cancelled (the trainer is stopping) after ", call->attempt,
               " attempt(s)")));
    return;
  }
  ++call->attempt;
  auto on_done = [this, call](grpc::Status gs) {
    AttemptDone(call, FromGrpcStatus(gs));
  };
  if (call->raw_req != nullptr) {
    grpc::internal::CallbackUnaryCall<
        grpc::ByteBuffer, google::protobuf::Message, grpc::ByteBuffer,
        google::protobuf::MessageLite>(
        channel_.get(), methods_[static_cast<int>(call->rpc)], call->ctx.get(),
        call->raw_req.get(), call->resp, std::move(on_done));
    return;
  }
  grpc::internal::CallbackUnaryCall<
      google::protobuf::Message, google::protobuf::Message,
      google::protobuf::MessageLite, google::protobuf::MessageLite>(
      channel_.get(), methods_[static_cast<int>(call->rpc)], call->ctx.get(),
      call->req, call->resp, std::move(on_done));
}

void GrpcPsClient::AttemptDone(std::shared_ptr<Call> call, absl::Status s) {
  bool cancelled;
  {
    absl::MutexLock l(&mu_);
    active_.erase(call.get());
    cancelled = call->epoch != cancel_epoch_;
  }
  const bool transient = s.code() == absl::StatusCode::kUnavailable ||
                         s.code() == absl::StatusCode::kDeadlineExceeded;
  const absl::Time now = absl::Now();
  if (cancelled && !s.ok()) {
    s = absl::CancelledError(absl::StrCat(
        "cancelled (the trainer is stopping); last: ", s.message()));
  } else if (transient && now - call->start < options_.retry_budget) {
    if (now - call->last_log >= absl::Seconds(10)) {
      call->last_log = now;
      LOG(WARNING) << PsRpcMethod(call->rpc).name() << " to pserver "
                   << address_ << ": " << s.message() << " ("
                   << absl::StatusCodeToString(s.code())
                   << "); waiting for it, retry " << call->attempt << ", "
                   << absl::FormatDuration(now - call->start) << " so far";
    }
    static thread_local std::mt19937 rng(std::random_device{}());
    const double jitter = std::uniform_real_distribution<>(0.5, 1.0)(rng);
    const absl::Duration wait = call->backoff * jitter;
    call->backoff = std::min(call->backoff * 2, options_.max_backoff);
    call->resp->Clear();
    bool waits;
    {
      absl::MutexLock l(&mu_);
      // CancelCalls (or the destructor) since the check above: it ends now.
      waits = call->epoch == cancel_epoch_;
      if (waits) waiting_[call.get()] = call;
    }
    if (waits) {
      timer_->Schedule(now + wait, [life = life_, call] {
        Life* const f = life.get();
        absl::ReaderMutexLock l(&f->mu);
        if (f->client != nullptr) f->client->Retry(call);
      });
      return;
    }
    s = absl::CancelledError(absl::StrCat(
        "cancelled (the trainer is stopping); last: ", s.message()));
  }
  if (!s.ok()) {
    s = absl::Status(s.code(),
                     absl::StrCat(PsRpcMethod(call->rpc).name(), " to pserver ",
                                  address_, ": ", s.message()));
  }
  Finish(call.get(), std::move(s));
}

}  // namespace shardps
