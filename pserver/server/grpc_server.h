#ifndef SHARDPS_PSERVER_SERVER_GRPC_SERVER_H_
#define SHARDPS_PSERVER_SERVER_GRPC_SERVER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/launch/address.h"
#include "common/monitoring/monitoring.h"
#include "common/transport/transport_security.h"
#include "grpcpp/grpcpp.h"
#include "pserver/server/grpc_service.h"
#include "pserver/server/pserver.h"
#include "pserver/server/tcp_lane_server.h"

namespace shardps {

struct GrpcServerOptions {
  // Address to listen on. Default: all interfaces.
  std::string host = "0.0.0.0";
  // TCP port; 0 binds a free one (see GrpcPsServer::port()). Default: 7164.
  int port = kDefaultPort;
  // Written with the bound port once the server serves (temporary file,
  // then rename). Default: none.
  std::string port_file;
  // Token and TLS (docs/security.md). Default: none, with a warning.
  TransportSecurity security;
  // The TCP lane for trainers' dense values (docs/wire_protocol.md, "TCP
  // lane"): on unless false, and never with TLS (values would bypass its
  // encryption); `tcp_lane_port` 0 binds a free port on `host`;
  // `tcp_lane_spin`: TcpLaneServer::Options::spin.
  bool tcp_lane = true;
  int tcp_lane_port = 0;
  absl::Duration tcp_lane_spin = tcp_lane::kDefaultSpin;
  // The pserver behind the port.
  PserverOptions pserver;
  // Prometheus metrics (docs/monitoring.md). Default: none.
  MonitoringOptions monitoring;
};

// A Pserver served over gRPC (the ParameterServer service, with gRPC's
// health service), and its metrics over HTTP when asked. Create, Start,
// then Wait until Shutdown is called (from a signal handler thread, say).
// Thread-safe.
class GrpcPsServer {
 public:
  // INVALID_ARGUMENT for a port outside [0, 65535] and the Pserver's
  // errors.
  static absl::StatusOr<std::unique_ptr<GrpcPsServer>> Create(
      GrpcServerOptions options);
  ~GrpcPsServer();

  // Serves /metrics (with options.monitoring), binds the port with the
  // health service answering NOT_SERVING and every call UNAVAILABLE, starts
  // the Pserver (loading each job's newest checkpoint), then serves
  // (health SERVING) and writes the port file.
  absl::Status Start();
  // Blocks until Shutdown() has completed.
  void Wait();
  // Answers waiting pulls UNAVAILABLE, finishes in-flight calls (up to
  // `grace`), then stops the Pserver (final checkpoint). Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(5));

  int port() const { return port_; }
  // The TCP lane; null without one (tests).
  TcpLaneServer* tcp_lane() { return tcp_lane_.get(); }
  // The TCP lane's port; 0 without one.
  int tcp_lane_port() const {
    return tcp_lane_ != nullptr ? tcp_lane_->port() : 0;
  }
  // The bound /metrics port; 0 without monitoring.
  int monitoring_port() const {
    return monitoring_ != nullptr ? monitoring_->port() : 0;
  }
  Pserver* pserver() { return pserver_.get(); }
  ParameterStore* store() { return pserver_->store(); }
  // A channel to this server within the process (tests).
  std::shared_ptr<grpc::Channel> InProcessChannel();

 private:
  GrpcPsServer(GrpcServerOptions options, std::unique_ptr<Pserver> pserver);

  // Builds the gRPC server, not yet serving calls; binds port_.
  absl::Status BuildServer();
  // Starts the TCP lane where the options allow one.
  absl::Status StartTcpLane();

  const GrpcServerOptions options_;
  std::unique_ptr<Pserver> pserver_;
  // Made when monitoring is on; before service_, which reports to it.
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<RpcMetrics> rpc_metrics_;
  GrpcPsService service_;
  std::unique_ptr<MonitoringServer> monitoring_;
  // Null without a TCP lane. Stopped before service_ goes (it dispatches
  // through it).
  std::unique_ptr<TcpLaneServer> tcp_lane_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  absl::Notification done_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVER_GRPC_SERVER_H_
