#include "benchmarks/grpc_baseline.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/grpc/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps_service.grpc.pb.h"

namespace shardps {
namespace {

// The plain gRPC baseline: the service answers a push with OK, unread, and a
// pull with one DenseBlock holding a payload allocated once (copied into each
// reply, as any server that keeps its values must). Thread-safe.
class PlainGrpcService final : public ParameterServer::CallbackService {
 public:
  explicit PlainGrpcService(int64_t payload_bytes)
      : payload_(payload_bytes, '\x01') {}

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const PushRequest* req,
                                 PushResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const PullRequest* req,
                                 PullResponse* resp) override {
    resp->add_blocks()->set_values(payload_);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  const std::string payload_;
};

// gRPC's message limit for the baseline. ShardPS uses kMaxGrpcMessageBytes
// (64 MiB) and cuts transfers into 4 MiB chunks; the baseline sends the whole
// payload in one message, which for the 64 MiB payload is 64 MiB plus a few
// bytes of protobuf framing, so it needs a higher limit.
constexpr int kPlainGrpcMaxMessageBytes = 128 << 20;

}  // namespace

struct PlainGrpc::State {
  int64_t payload_bytes = 0;
  std::unique_ptr<PlainGrpcService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<ParameterServer::Stub> stub;
  PushRequest push_req;
  PushResponse push_resp;
  PullRequest pull_req;
  PullResponse pull_resp;

  ~State() {
    stub.reset();  // closes the channel, so Shutdown waits for no client
    if (server != nullptr) server->Shutdown();
  }
};

absl::StatusOr<std::unique_ptr<PlainGrpc>> PlainGrpc::Start(
    int64_t payload_bytes) {
  auto p = std::make_unique<State>();
  p->payload_bytes = payload_bytes;
  p->service = std::make_unique<PlainGrpcService>(payload_bytes);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // as GrpcPsServer
  builder.SetMaxReceiveMessageSize(kPlainGrpcMaxMessageBytes);
  builder.SetMaxSendMessageSize(kPlainGrpcMaxMessageBytes);
  builder.RegisterService(p->service.get());
  p->server = builder.BuildAndStart();
  if (p->server == nullptr || port == 0) {
    return absl::UnavailableError("cannot start the plain gRPC server");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kPlainGrpcMaxMessageBytes);
  args.SetMaxSendMessageSize(kPlainGrpcMaxMessageBytes);
  p->stub = ParameterServer::NewStub(
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                grpc::InsecureChannelCredentials(), args));
  p->push_req.add_blocks()->set_values(std::string(payload_bytes, '\x02'));
  p->pull_req.add_blocks();
  return std::unique_ptr<PlainGrpc>(new PlainGrpc(std::move(p)));
}

PlainGrpc::PlainGrpc(std::unique_ptr<State> state) : state_(std::move(state)) {}

PlainGrpc::~PlainGrpc() = default;

int64_t PlainGrpc::payload_bytes() const { return state_->payload_bytes; }

absl::Status PlainGrpc::Push() {
  grpc::ClientContext ctx;
  return FromGrpcStatus(
      state_->stub->Push(&ctx, state_->push_req, &state_->push_resp));
}

absl::Status PlainGrpc::Pull() {
  grpc::ClientContext ctx;
  absl::Status st = FromGrpcStatus(
      state_->stub->Pull(&ctx, state_->pull_req, &state_->pull_resp));
  if (st.ok() &&
      (state_->pull_resp.blocks_size() != 1 ||
       static_cast<int64_t>(state_->pull_resp.blocks(0).values().size()) !=
           state_->payload_bytes)) {
    return absl::DataLossError("pull reply has the wrong size");
  }
  return st;
}

int64_t PlainGrpc::push_wire_bytes() const {
  return static_cast<int64_t>(state_->push_req.ByteSizeLong());
}

int64_t PlainGrpc::pull_wire_bytes() const {
  return static_cast<int64_t>(state_->pull_resp.ByteSizeLong());
}

}  // namespace shardps
