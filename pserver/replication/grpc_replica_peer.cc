#include "pserver/replication/grpc_replica_peer.h"

#include <chrono>

#include "base/job_id.h"
#include "common/grpc/grpc_credentials.h"
#include "common/grpc/grpc_keepalive.h"
#include "common/grpc/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "pserver/replication/replication_wire.h"

namespace shardps {

std::unique_ptr<GrpcReplicaPeer> GrpcReplicaPeer::Create(
    const std::string& address, const std::string& job_id,
    const TransportSecurity& security, Deadlines deadlines) {
  grpc::ChannelArguments args;
  AddChannelSecurityArgs(security, &args);
  // Reconnect soon after the peer comes back (a restarted pserver).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
  // A peer silent for the lease (cut off, paused) fails the calls in
  // flight.
  AddKeepaliveArgs(deadlines.lease, &args);
  auto channel =
      grpc::CreateCustomChannel(address, ChannelCredentialsFor(security), args);
  return std::unique_ptr<GrpcReplicaPeer>(
      new GrpcReplicaPeer(Replication::NewStub(channel), job_id,
                          security.peer_call_token(), deadlines));
}

void GrpcReplicaPeer::Prepare(grpc::ClientContext* ctx,
                              absl::Duration deadline) const {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(deadline));
  if (!job_id_.empty()) ctx->AddMetadata(kJobMetadataKey, job_id_);
  if (!token_.empty()) {
    ctx->AddMetadata(kAuthorizationMetadataKey, BearerMetadataValue(token_));
  }
}

absl::StatusOr<ForwardResponse> GrpcReplicaPeer::Forward(
    const ForwardRequest& req) {
  grpc::ClientContext ctx;
  Prepare(&ctx, deadlines_.forward);
  ForwardResponse resp;
  grpc::Status s = stub_->Forward(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::Status GrpcReplicaPeer::Install(const InstallUnitRequest& req) {
  grpc::ClientContext ctx;
  Prepare(&ctx, deadlines_.forward);
  InstallUnitResponse resp;
  return FromGrpcStatus(stub_->InstallUnit(&ctx, req, &resp));
}

absl::StatusOr<ViewAcceptor::PrepareReply> GrpcReplicaPeer::Prepare(
    int64_t number, const Ballot& ballot) {
  grpc::ClientContext ctx;
  Prepare(&ctx, deadlines_.view);
  ViewPrepareRequest req;
  req.set_number(number);
  ToMessage(ballot, req.mutable_ballot());
  ViewPrepareResponse resp;
  grpc::Status s = stub_->ViewPrepare(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return FromMessage(resp);
}

absl::StatusOr<bool> GrpcReplicaPeer::Accept(int64_t number,
                                             const Ballot& ballot,
                                             const View& view) {
  grpc::ClientContext ctx;
  Prepare(&ctx, deadlines_.view);
  ViewAcceptRequest req;
  req.set_number(number);
  ToMessage(ballot, req.mutable_ballot());
  ToMessage(view, req.mutable_view());
  ViewAcceptResponse resp;
  grpc::Status s = stub_->ViewAccept(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp.accepted();
}

absl::Status GrpcReplicaPeer::Commit(const View& view) {
  grpc::ClientContext ctx;
  Prepare(&ctx, deadlines_.view);
  ViewCommitRequest req;
  ToMessage(view, req.mutable_view());
  ViewCommitResponse resp;
  return FromGrpcStatus(stub_->ViewCommit(&ctx, req, &resp));
}

absl::StatusOr<AcceptorState> GrpcReplicaPeer::Inspect() {
  grpc::ClientContext ctx;
  Prepare(&ctx, deadlines_.view);
  ViewPrepareResponse resp;
  grpc::Status s = stub_->ViewInspect(&ctx, ViewInspectRequest(), &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return StateOf(resp);
}

}  // namespace shardps
