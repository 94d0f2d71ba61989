#include "pserver/server.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "grpcpp/health_check_service_interface.h"

namespace shardps {
namespace {

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

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Create(
    PsServerOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port must be in [0, 65535], got ", options.port));
  }
  if (options.store.num_trainers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_gradient_servers must be >= 0, got ",
                     options.store.num_trainers));
  }
  return std::unique_ptr<PsServer>(new PsServer(std::move(options)));
}

PsServer::PsServer(PsServerOptions options)
    : options_(std::move(options)), store_(options_.store), service_(&store_) {}

PsServer::~PsServer() {
  Shutdown(absl::ZeroDuration());
  if (sweeper_.joinable()) sweeper_.join();
}

absl::Status PsServer::Start() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string addr = absl::StrCat(options_.host, ":", options_.port);
  builder.AddListeningPort(addr, grpc::InsecureServerCredentials(), &port_);
  // gRPC sets SO_REUSEPORT by default, which would let a second pserver
  // share this port and split the trainers' connections between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", addr,
                     " (is the port in use, or the address not local?)"));
  }
  LOG(INFO) << "pserver listening on " << options_.host << ":" << port_;
  if (!options_.port_file.empty()) {
    absl::Status s = WritePortFile(options_.port_file, port_);
    if (!s.ok()) {
      server_->Shutdown();
      return s;
    }
  }
  sweeper_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(options_.sweep_interval)) {
      store_.Sweep(absl::Now());
    }
  });
  return absl::OkStatus();
}

void PsServer::Wait() { done_.WaitForNotification(); }

void PsServer::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock l(&shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (!stop_.HasBeenNotified()) stop_.Notify();
  store_.CancelAllWaiters(absl::UnavailableError("pserver is shutting down"));
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(grace));
    server_->Wait();
  }
  const auto c = store_.counters();
  LOG(INFO) << "pserver stopped: " << c.pushes << " pushes, " << c.pulls
            << " pulls, " << c.block_updates << " block updates, "
            << c.rejected_requests << " rejected requests, " << c.pull_timeouts
            << " pull time-outs";
  for (const auto& t : store_.SparseStats()) {
    LOG(INFO) << "sparse table " << t.name << ": " << t.counters.rows
              << " rows (" << t.memory_bytes / (1 << 20) << " MiB), "
              << t.counters.created << " created, " << t.counters.evicted
              << " evicted, " << t.counters.pending_keys
              << " keys awaiting admission, " << t.counters.dropped_updates
              << " updates dropped before admission";
  }
  done_.Notify();
}

std::shared_ptr<grpc::Channel> PsServer::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  return server_->InProcessChannel(args);
}

}  // namespace shardps
