#ifndef SHARDPS_PSERVER_SERVER_GRPC_SERVICE_H_
#define SHARDPS_PSERVER_SERVER_GRPC_SERVICE_H_

#include <functional>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps_service.grpc.pb.h"
#include "proto/replication.grpc.pb.h"
#include "pserver/server/dispatcher.h"
#include "pserver/server/pserver.h"
#include "pserver/server/pserver_metrics.h"
#include "pserver/server/reply_gate.h"
#include "pserver/server/shared_call_binding.h"
#include "pserver/server/tcp_lane_server.h"
#include "pserver/service/request_handler.h"

namespace shardps {

// The gRPC binding of the pserver: each RPC is handed as it is to the
// Dispatcher (dispatcher.h), naming the job its `shardps-job` metadata names
// (base/job_id.h), and the answer's absl::Status becomes the grpc::Status
// (common/grpc/grpc_status.h). Pulls are served raw: the reply's
// values go to gRPC as slices over the reply itself
// (common/grpc/grpc_wire.h), not copied again into a buffer, and
// start only while the replies not yet read stay under a bound
// (ReplyGate). An
// OpenSharedMemory that asks for calls starts serving them through the
// region (SharedCallBinding). The calls between pservers are a service of
// their own (replication_service()), on the same dispatcher. Thread-safe.
class GrpcPsService final : public ParameterServer::WithRawCallbackMethod_Pull<
                                ParameterServer::CallbackService> {
  using Base = ParameterServer::WithRawCallbackMethod_Pull<
      ParameterServer::CallbackService>;

 public:
  // Pulls' replies the pserver holds before their clients read them, and
  // the pulls that may wait for room beyond that (ReplyGate). Counted
  // besides --max_memory_mb (docs/security.md, "Limits").
  static constexpr int64_t kMaxUnreadReplyBytes = int64_t{128} << 20;
  // One job's share of them: the others always keep 32 MiB.
  static constexpr int64_t kMaxUnreadReplyBytesPerJob = int64_t{96} << 20;
  static constexpr size_t kMaxPullsWaitingForReplies = 65536;

  // `jobs` and `metrics` (null: none) must outlive this object.
  explicit GrpcPsService(JobDirectory* jobs, RpcMetrics* metrics = nullptr)
      : dispatcher_(jobs, metrics), shared_calls_(&dispatcher_) {}

  // Whether calls are served (true once the pserver has started).
  void SetServing(bool serving) { dispatcher_.SetServing(serving); }
  // The calls between pservers (proto/replication.proto), through the same
  // dispatcher: register it on the same server.
  grpc::Service* replication_service() { return &replication_; }

  // One method a call of the list (common/transport/ps_calls.h), each
  // handed to the dispatcher (Answer). Pull is served raw (the ByteBuffer
  // overload below, which gRPC registers for it); the typed Pull the list
  // makes answers the same way if a server ever registers it.
#define SHARDPS_GRPC_METHOD(Name, Request, Response)                 \
  grpc::ServerUnaryReactor* Name(grpc::CallbackServerContext* ctx,   \
                                 const Request* req, Response* resp) \
      override {                                                     \
    return Answer(ctx, PsRpc::k##Name, req, resp);                   \
  }
  SHARDPS_PS_CALLS(SHARDPS_GRPC_METHOD)
#undef SHARDPS_GRPC_METHOD
  // The base's other Pulls (the synchronous one gRPC disables) stay
  // visible beside the two above.
  using Base::Pull;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;

  // The lane OpenTcpLane issues tickets of (it must outlive this object or
  // be replaced first), or null and why there is none. Call before serving.
  void SetTcpLane(TcpLaneServer* lane, std::string why_none) {
    tcp_lane_ = lane;
    why_no_tcp_lane_ = std::move(why_none);
  }
  // Where every transport's calls go (the TCP lane's too).
  Dispatcher* dispatcher() { return &dispatcher_; }

 private:
  // Hands call `rpc` to `dispatcher` and finishes it with its answer,
  // after `then` (OK answers only) when given.
  static grpc::ServerUnaryReactor* Bind(Dispatcher* dispatcher,
                                        grpc::CallbackServerContext* ctx,
                                        PsRpc rpc,
                                        const google::protobuf::Message& req,
                                        google::protobuf::Message* resp,
                                        std::function<void()> then = nullptr);
  grpc::ServerUnaryReactor* Bind(grpc::CallbackServerContext* ctx, PsRpc rpc,
                                 const google::protobuf::Message& req,
                                 google::protobuf::Message* resp,
                                 std::function<void()> then = nullptr);
  // A call's answer: the dispatcher's, but for the calls whose binding does
  // more (the overloads below).
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, PsRpc rpc,
                                   const Request* req, Response* resp) {
    return Bind(ctx, rpc, *req, resp);
  }
  // Only a trainer on this host gets a region; one that asks for calls is
  // then served through the region's slots (SharedCallBinding).
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, PsRpc rpc,
                                   const SharedMemoryRequest* req,
                                   SharedMemoryResponse* resp);
  // Issues a ticket of the TCP lane (SetTcpLane) to a trainer the job's
  // handler accepts; FAILED_PRECONDITION, with the reason, without a lane.
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, PsRpc rpc,
                                   const TcpLaneRequest* req,
                                   TcpLaneResponse* resp);
  // The job id the call names (the default job when none).
  static std::string JobIdOf(grpc::CallbackServerContext* ctx);
  // What the dispatcher is told of call `rpc` besides its messages.
  static CallContext ContextOf(grpc::CallbackServerContext* ctx, PsRpc rpc);

  // The Replication service's calls, handed to the same dispatcher.
  class ReplicationService final : public Replication::CallbackService {
   public:
    explicit ReplicationService(Dispatcher* dispatcher)
        : dispatcher_(dispatcher) {}
#define SHARDPS_GRPC_PEER_METHOD(Name, Request, Response)                     \
  grpc::ServerUnaryReactor* Name(grpc::CallbackServerContext* ctx,            \
                                 const Request* req, Response* resp)          \
      override {                                                              \
    return GrpcPsService::Bind(dispatcher_, ctx, PsRpc::k##Name, *req, resp); \
  }
    SHARDPS_REPLICATION_CALLS(SHARDPS_GRPC_PEER_METHOD)
#undef SHARDPS_GRPC_PEER_METHOD

   private:
    Dispatcher* const dispatcher_;
  };

  Dispatcher dispatcher_;
  // Pulls' replies not yet read by their clients (reply_gate.h).
  ReplyGate replies_{kMaxUnreadReplyBytes, kMaxUnreadReplyBytesPerJob,
                     kMaxPullsWaitingForReplies};
  ReplicationService replication_{&dispatcher_};
  // The calls of trainers' shared regions (OpenSharedMemory with `calls`).
  SharedCallBinding shared_calls_;
  TcpLaneServer* tcp_lane_ = nullptr;
  std::string why_no_tcp_lane_ = "the pserver has not started it";
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVER_GRPC_SERVICE_H_
