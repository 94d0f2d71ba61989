#ifndef SHARDPS_TRAINER_CLIENT_GRPC_PS_CLIENT_H_
#define SHARDPS_TRAINER_CLIENT_GRPC_PS_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps_service.grpc.pb.h"
#include "trainer/client/ps_client_interface.h"
#include "trainer/client/retry_timer.h"

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
};

// PsClientInterface over a gRPC channel, with retries. Thread-safe.
class GrpcPsClient final : public PsClientInterface {
 public:
  // Connects to `address` (host:port). `timer` schedules retries and must
  // outlive this object.
  static std::unique_ptr<GrpcPsClient> Create(const std::string& address,
                                              RpcOptions options,
                                              RetryTimer* timer);
  // For tests: a client over an existing channel.
  GrpcPsClient(std::string address, std::shared_ptr<grpc::Channel> channel,
               RpcOptions options, RetryTimer* timer);

  const std::string& address() const override { return address_; }

  void InitJobAsync(const InitJobRequest& req, InitJobResponse* resp,
                    StatusCallback done) override;
  void SetInitialValuesAsync(const SetInitialValuesRequest& req,
                             SetInitialValuesResponse* resp,
                             StatusCallback done) override;
  void CommitInitAsync(const CommitInitRequest& req, CommitInitResponse* resp,
                       StatusCallback done) override;
  void RegisterAsync(const RegisterRequest& req, RegisterResponse* resp,
                     StatusCallback done) override;
  void GetStatusAsync(const GetStatusRequest& req, GetStatusResponse* resp,
                      StatusCallback done) override;
  void PullAsync(const PullRequest& req, PullResponse* resp,
                 StatusCallback done) override;
  void PushAsync(const PushRequest& req, PushResponse* resp,
                 StatusCallback done) override;
  void HeartbeatAsync(const HeartbeatRequest& req, HeartbeatResponse* resp,
                      StatusCallback done) override;
  void LeaveAsync(const LeaveRequest& req, LeaveResponse* resp,
                  StatusCallback done) override;
  void CheckpointAsync(const CheckpointRequest& req, CheckpointResponse* resp,
                       StatusCallback done) override;
  void RollbackAsync(const RollbackRequest& req, RollbackResponse* resp,
                     StatusCallback done) override;

 private:
  template <typename Req, typename Resp>
  struct Call;
  template <typename Req, typename Resp, typename Method>
  void Start(const char* name, Method method, const Req& req, Resp* resp,
             StatusCallback done);
  template <typename Req, typename Resp, typename Method>
  void Attempt(std::shared_ptr<Call<Req, Resp>> call, Method method);

  const std::string address_;
  const RpcOptions options_;
  RetryTimer* const timer_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CLIENT_GRPC_PS_CLIENT_H_
