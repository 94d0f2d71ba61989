#ifndef SHARDPS_PSERVER_REPLICATION_GRPC_REPLICA_PEER_H_
#define SHARDPS_PSERVER_REPLICATION_GRPC_REPLICA_PEER_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/transport/transport_security.h"
#include "proto/replication.grpc.pb.h"
#include "pserver/replication/replica_set.h"

namespace shardps {

// ReplicaPeer over gRPC: another pserver's Forward and View* calls, in job
// `job_id`, with this pserver's token and TLS settings. A call that gets
// no answer within its deadline is DEADLINE_EXCEEDED; a pserver that is
// gone is UNAVAILABLE at once (no waiting for it to come back).
// Thread-safe.
class GrpcReplicaPeer : public ReplicaPeer {
 public:
  struct Deadlines {
    // A forward carries a step's update (the model's size): over a lossy
    // link it may take seconds. A silent peer fails it sooner, after
    // `lease` (HTTP/2 keepalive).
    absl::Duration forward = absl::Seconds(30);
    absl::Duration view = absl::Milliseconds(500);
    absl::Duration lease = absl::Seconds(4);
  };
  static std::unique_ptr<GrpcReplicaPeer> Create(
      const std::string& address, const std::string& job_id,
      const TransportSecurity& security, Deadlines deadlines);

  absl::StatusOr<ForwardResponse> Forward(const ForwardRequest& req) override;
  absl::Status Install(const InstallUnitRequest& req) override;
  absl::StatusOr<ViewAcceptor::PrepareReply> Prepare(
      int64_t number, const Ballot& ballot) override;
  absl::StatusOr<bool> Accept(int64_t number, const Ballot& ballot,
                              const View& view) override;
  absl::Status Commit(const View& view) override;
  absl::StatusOr<AcceptorState> Inspect() override;

 private:
  GrpcReplicaPeer(std::unique_ptr<Replication::Stub> stub, std::string job_id,
                  std::string token, Deadlines deadlines)
      : stub_(std::move(stub)),
        job_id_(std::move(job_id)),
        token_(std::move(token)),
        deadlines_(deadlines) {}
  void Prepare(grpc::ClientContext* ctx, absl::Duration deadline) const;

  const std::unique_ptr<Replication::Stub> stub_;
  const std::string job_id_;
  const std::string token_;
  const Deadlines deadlines_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_REPLICATION_GRPC_REPLICA_PEER_H_
