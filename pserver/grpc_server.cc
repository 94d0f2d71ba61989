#include "pserver/grpc_server.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/grpc_credentials.h"
#include "common/wire_limits.h"
#include "glog/logging.h"
#include "grpcpp/health_check_service_interface.h"

namespace shardps {
namespace {

constexpr size_t kTransportMemoryBytes = size_t{256} << 20;

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << port << "\n";
    f.flush();
    if (!f) {
      return absl::PermissionDeniedError(
          absl::StrCat("--port_file: cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("--port_file: cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcPsServer>> GrpcPsServer::Create(
    GrpcServerOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port must be in [0, 65535], got ", options.port));
  }
  auto pserver = Pserver::Create(options.pserver);
  if (!pserver.ok()) return pserver.status();
  return std::unique_ptr<GrpcPsServer>(
      new GrpcPsServer(std::move(options), std::move(*pserver)));
}

GrpcPsServer::GrpcPsServer(GrpcServerOptions options,
                           std::unique_ptr<Pserver> pserver)
    : options_(std::move(options)),
      pserver_(std::move(pserver)),
      service_(pserver_.get()) {}

GrpcPsServer::~GrpcPsServer() { Shutdown(absl::ZeroDuration()); }

absl::Status GrpcPsServer::Start() {
  if (absl::Status s = pserver_->Start(); !s.ok()) return s;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string addr = absl::StrCat(options_.host, ":", options_.port);
  builder.AddListeningPort(addr, ServerCredentialsFor(options_.security),
                           &port_);
  // gRPC sets SO_REUSEPORT by default, which would let a second pserver
  // share this port and split the trainers' connections between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  // What gRPC may hold for requests being received and answers being sent,
  // whoever sends them: beyond it, connections stop reading until memory is
  // freed (a bound on the pserver's memory past --max_memory_mb).
  grpc::ResourceQuota quota("shardps-pserver");
  quota.Resize(kTransportMemoryBytes);
  builder.SetResourceQuota(quota);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", addr,
                     " (is the port in use, or the address not local?)"));
  }
  LOG(INFO) << "pserver listening on " << options_.host << ":" << port_ << " ("
            << DescribeTransportSecurity(options_.security)
            << "; jobs may hold "
            << (options_.pserver.store.max_memory_bytes >> 20) << " MiB)";
  if (options_.security.auth_token.empty()) {
    LOG(WARNING) << "no --auth_token_file: any client that can reach "
                 << options_.host << ":" << port_
                 << " can change this pserver's jobs (docs/security.md)";
  }
  if (!options_.port_file.empty()) {
    absl::Status s = WritePortFile(options_.port_file, port_);
    if (!s.ok()) {
      server_->Shutdown();
      return s;
    }
  }
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
  if (server_ != nullptr) {
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
