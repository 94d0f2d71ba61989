#include "pserver/server/grpc_server.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/grpc/grpc_credentials.h"
#include "common/grpc/grpc_keepalive.h"
#include "common/launch/port_file.h"
#include "common/transport/wire_limits.h"
#include "glog/logging.h"
#include "grpcpp/health_check_service_interface.h"
#include "pserver/replication/grpc_replica_peer.h"

namespace shardps {
namespace {

constexpr size_t kTransportMemoryBytes = size_t{256} << 20;
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);
constexpr absl::Duration kMaxConnectionIdle = absl::Minutes(5);
constexpr int kMaxStreamsPerConnection = 4096;

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcPsServer>> GrpcPsServer::Create(
    GrpcServerOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port must be in [0, 65535], got ", options.port));
  }
  if (!options.pserver.replica_peers) {
    options.pserver.replica_peers =
        [security = options.security](
            const std::string& job_id, const std::string& address,
            absl::Duration lease) -> std::unique_ptr<ReplicaPeer> {
      GrpcReplicaPeer::Deadlines d;
      d.lease = lease;
      return GrpcReplicaPeer::Create(address, job_id, security, d);
    };
  }
  auto pserver = Pserver::Create(options.pserver);
  if (!pserver.ok()) return pserver.status();
  return std::unique_ptr<GrpcPsServer>(
      new GrpcPsServer(std::move(options), std::move(*pserver)));
}

namespace {

std::unique_ptr<RpcMetrics> MakeRpcMetrics(
    const GrpcServerOptions& options,
    const std::shared_ptr<prometheus::Registry>& registry) {
  if (options.monitoring.port < 0) return nullptr;
  return std::make_unique<RpcMetrics>(registry.get(),
                                      Dispatcher::MethodNames());
}

}  // namespace

GrpcPsServer::GrpcPsServer(GrpcServerOptions options,
                           std::unique_ptr<Pserver> pserver)
    : options_(std::move(options)),
      pserver_(std::move(pserver)),
      registry_(std::make_shared<prometheus::Registry>()),
      rpc_metrics_(MakeRpcMetrics(options_, registry_)),
      service_(pserver_.get(), rpc_metrics_.get()) {}

GrpcPsServer::~GrpcPsServer() { Shutdown(absl::ZeroDuration()); }

absl::Status GrpcPsServer::Start() {
  if (options_.monitoring.port >= 0) {
    auto monitoring = MonitoringServer::Start(
        options_.monitoring,
        {registry_, std::make_shared<PserverCollector>(pserver_.get())});
    if (!monitoring.ok()) return monitoring.status();
    monitoring_ = *std::move(monitoring);
  }
  if (absl::Status s = BuildServer(); !s.ok()) return s;
  if (absl::Status s = StartTcpLane(); !s.ok()) {
    server_->Shutdown();
    server_->Wait();
    server_.reset();
    return s;
  }
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (absl::Status s = pserver_->Start(); !s.ok()) {
    server_->Shutdown();
    server_->Wait();
    server_.reset();
    return s;
  }
  service_.SetServing(true);
  health->SetServingStatus(true);
  LOG(INFO) << "pserver serving on " << options_.host << ":" << port_ << " ("
            << DescribeTransportSecurity(options_.security)
            << "; jobs may hold "
            << (options_.pserver.store.max_memory_bytes >> 20) << " MiB)";
  if (options_.security.authority == nullptr &&
      options_.security.auth_token.empty()) {
    LOG(WARNING) << "no --auth_token_file: any client that can reach "
                 << options_.host << ":" << port_
                 << " can change this pserver's jobs (docs/security.md)";
  }
  if (!options_.port_file.empty()) {
    absl::Status s = WritePortFile(options_.port_file, port_, "--port_file");
    if (!s.ok()) {
      server_->Shutdown();
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status GrpcPsServer::BuildServer() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string addr = absl::StrCat(options_.host, ":", options_.port);
  builder.AddListeningPort(addr, ServerCredentialsFor(options_.security),
                           &port_);
  // gRPC sets SO_REUSEPORT by default, which would let a second pserver
  // share this port and split the trainers' connections between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  // Trainers and pservers of a replicated job ping to notice a cut link.
  AllowKeepalivePings(&builder);
  // Connections a flood leaves open are closed: one that has not finished
  // its TLS and HTTP/2 handshake after kHandshakeTimeout, one without a
  // call for kMaxConnectionIdle (a trainer's channel reconnects by
  // itself). A connection carries at most kMaxStreamsPerConnection calls
  // at once; a trainer's further calls wait on its side.
  builder.AddChannelArgument(
      GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
      static_cast<int>(absl::ToInt64Milliseconds(kHandshakeTimeout)));
  builder.AddChannelArgument(
      GRPC_ARG_MAX_CONNECTION_IDLE_MS,
      static_cast<int>(absl::ToInt64Milliseconds(kMaxConnectionIdle)));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             kMaxStreamsPerConnection);
  // What gRPC may hold for requests being received and answers being sent,
  // whoever sends them: beyond it, connections stop reading until memory is
  // freed (a bound on the pserver's memory past --max_memory_mb).
  grpc::ResourceQuota quota("shardps-pserver");
  quota.Resize(kTransportMemoryBytes);
  builder.SetResourceQuota(quota);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  service_.SetServing(false);
  builder.RegisterService(&service_);
  builder.RegisterService(service_.replication_service());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", addr,
                     " (is the port in use, or the address not local?)"));
  }
  // Until the checkpoints are loaded: NOT_SERVING, for the whole server
  // ("") and for the service by name.
  server_->GetHealthCheckService()->SetServingStatus(false);
  LOG(INFO) << "pserver bound to " << options_.host << ":" << port_
            << "; loading checkpoints";
  return absl::OkStatus();
}

absl::Status GrpcPsServer::StartTcpLane() {
  if (!options_.tcp_lane) {
    service_.SetTcpLane(nullptr,
                        "it is off on this pserver (--tcp_lane=false)");
    return absl::OkStatus();
  }
  if (options_.security.tls()) {
    service_.SetTcpLane(nullptr,
                        "this pserver uses TLS, whose encryption the lane "
                        "would bypass; values stay in gRPC");
    return absl::OkStatus();
  }
  TcpLaneServer::Options o;
  o.host = options_.host;
  o.port = options_.tcp_lane_port;
  o.spin = options_.tcp_lane_spin;
  auto lane =
      TcpLaneServer::Start(service_.dispatcher(), pserver_->memory_budget(), o);
  if (!lane.ok()) {
    return absl::Status(lane.status().code(),
                        absl::StrCat(lane.status().message(),
                                     " (--tcp_lane_port; --tcp_lane=false "
                                     "turns the lane off)"));
  }
  tcp_lane_ = *std::move(lane);
  service_.SetTcpLane(tcp_lane_.get(), "");
  LOG(INFO) << "TCP lane for dense values on " << options_.host << ":"
            << tcp_lane_->port();
  return absl::OkStatus();
}

void GrpcPsServer::Wait() { done_.WaitForNotification(); }

void GrpcPsServer::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock l(&shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  pserver_->BeginShutdown();
  // Its calls in progress are answered (waiting pulls were, just above).
  if (tcp_lane_ != nullptr) tcp_lane_->Stop();
  if (server_ != nullptr) {
    // NOT_SERVING from now on, so that probes and load balancers stop
    // sending here while calls drain.
    server_->GetHealthCheckService()->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(grace));
    server_->Wait();
  }
  pserver_->Stop();
  done_.Notify();
}

std::shared_ptr<grpc::Channel> GrpcPsServer::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  return server_->InProcessChannel(args);
}

}  // namespace shardps
