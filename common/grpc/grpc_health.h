#ifndef SHARDPS_COMMON_GRPC_GRPC_HEALTH_H_
#define SHARDPS_COMMON_GRPC_GRPC_HEALTH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/transport/transport_security.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace shardps {

// gRPC's health service (grpc.health.v1) on a port of its own, for a
// process that serves nothing else over gRPC (the trainer's --health_port).
// It answers NOT_SERVING until SetServing(true). Plaintext. Thread-safe.
class GrpcHealthServer {
 public:
  // Binds host:port (0: a free one) and writes the port to `port_file`
  // (empty: none). UNAVAILABLE naming the address when it cannot listen.
  static absl::StatusOr<std::unique_ptr<GrpcHealthServer>> Start(
      const std::string& host, int port, const std::string& port_file);
  ~GrpcHealthServer();

  void SetServing(bool serving);
  int port() const { return port_; }

 private:
  struct Services;
  GrpcHealthServer();

  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// The answer of the health service at `address` for the whole server:
// "SERVING", "NOT_SERVING", ... UNAVAILABLE or DEADLINE_EXCEEDED when it
// does not answer within `timeout`.
absl::StatusOr<std::string> CheckHealth(const std::string& address,
                                        const TransportSecurity& security,
                                        absl::Duration timeout);

}  // namespace shardps

#endif  // SHARDPS_COMMON_GRPC_GRPC_HEALTH_H_
