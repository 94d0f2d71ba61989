#ifndef SHARDPS_TRAINER_TRANSPORT_GRPC_PS_CLIENT_H_
#define SHARDPS_TRAINER_TRANSPORT_GRPC_PS_CLIENT_H_

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transport/ps_client_interface.h"
#include "common/transport/transport_security.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"  // serializes any Message
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/client_callback.h"
#include "trainer/transport/retry_timer.h"

namespace shardps {

struct RpcOptions {
  // Deadline of one attempt. Pulls may wait on the pserver for a sync step
  // (the pserver answers by itself after its --max_pull_wait_s), so this is
  // longer. Default: 60 s.
  absl::Duration attempt_deadline = absl::Seconds(60);
  // Total time a call keeps retrying UNAVAILABLE and DEADLINE_EXCEEDED.
  // Default: 10 min.
  absl::Duration retry_budget = absl::Minutes(10);
  // Back-off between attempts: doubles from initial to max, with jitter.
  // Defaults: 50 ms and 5 s.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(5);
  // When positive: the channel pings the pserver every second, idle or
  // waiting, and drops the connection (failing its calls UNAVAILABLE) when
  // a ping or data goes unanswered this long, so that a pserver cut off or
  // paused is noticed within it rather than at a call's deadline
  // (common/grpc/grpc_keepalive.h). Default: 0 (no pings).
  absl::Duration keepalive = absl::ZeroDuration();
  // The job every call names (`shardps-job` metadata, base/job_id.h).
  // Empty: none, which the pserver takes as the default job.
  std::string job_id;
};

// PsClientInterface over a gRPC channel, with retries. Thread-safe. Every
// call's `done` runs once; the destructor ends the calls still in flight or
// waiting to be retried (CANCELLED) and returns once each `done` has run,
// so a `done` must not destroy its client itself.
class GrpcPsClient final : public PsClientInterface {
 public:
  // Connects to `address` (host:port), over TLS when `security` has it,
  // sending its token with every call. `timer` schedules retries and must
  // outlive this object.
  static std::unique_ptr<GrpcPsClient> Create(
      const std::string& address, RpcOptions options, RetryTimer* timer,
      const TransportSecurity& security = TransportSecurity());
  // For tests: a client over an existing channel.
  GrpcPsClient(std::string address, std::shared_ptr<grpc::Channel> channel,
               RpcOptions options, RetryTimer* timer,
               std::string auth_token = "");

  ~GrpcPsClient() override;

  const std::string& address() const override { return address_; }
  void CancelCalls() override;

  void CallAsync(PsRpc rpc, const google::protobuf::Message& req,
                 google::protobuf::Message* resp, StatusCallback done) override;
  // Sends the values from where `push` points (common/grpc/grpc_wire.h).
  void PushDenseAsync(const DensePush& push, PushResponse* resp,
                      StatusCallback done) override;

 private:
  struct Call;
  void Start(PsRpc rpc, const google::protobuf::Message* req,
             std::shared_ptr<const grpc::ByteBuffer> raw_req,
             google::protobuf::Message* resp, StatusCallback done);
  void Attempt(std::shared_ptr<Call> call);
  // The timer's turn for `call`, unless the destructor ended it first.
  void Retry(const std::shared_ptr<Call>& call);
  // An attempt of `call` ended with `s`: retried after a back-off while the
  // pserver is unreachable within the retry budget, else finished.
  void AttemptDone(std::shared_ptr<Call> call, absl::Status s);
  // Ends `call` with `s` (its `done`), having let go of its context.
  void Finish(Call* call, absl::Status s);

  // What the retry timer's closures reach this client through: null once
  // the destructor has begun, so that a retry due later touches nothing.
  struct Life {
    absl::Mutex mu;
    GrpcPsClient* client ABSL_GUARDED_BY(mu);
  };

  const std::string address_;
  const RpcOptions options_;
  RetryTimer* const timer_;
  std::shared_ptr<grpc::Channel> channel_;
  // "Bearer <token>", or empty for no authorization metadata.
  const std::string authorization_;
  // "/shardps.ParameterServer/Push" for PsRpc::kPush, and each method
  // registered with the channel once, as a generated stub does; every call
  // goes through the same path with the messages as their base class,
  // serialized as the generated stub would.
  std::array<std::string, kNumPsRpcs> paths_;
  std::vector<grpc::internal::RpcMethod> methods_;

  absl::Mutex mu_;
  // CancelCalls' count: a call started before the last one ends CANCELLED.
  int64_t cancel_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // The contexts of the attempts in flight, for CancelCalls (shared, so
  // that TryCancel never meets a context its call has let go).
  absl::flat_hash_map<Call*, std::shared_ptr<grpc::ClientContext>> active_
      ABSL_GUARDED_BY(mu_);
  // The calls waiting on the timer for their next attempt.
  absl::flat_hash_map<Call*, std::shared_ptr<Call>> waiting_
      ABSL_GUARDED_BY(mu_);
  // Calls started whose `done` has not returned yet.
  int64_t unfinished_ ABSL_GUARDED_BY(mu_) = 0;
  const std::shared_ptr<Life> life_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_TRANSPORT_GRPC_PS_CLIENT_H_
