#include "pserver/server.h"

#include <algorithm>
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
    : options_(std::move(options)),
      store_(options_.store),
      checkpointer_(
          options_.checkpoint_dir.empty()
              ? nullptr
              : std::make_unique<Checkpointer>(
                    options_.env != nullptr ? options_.env : Env::Default(),
                    options_.checkpoint_dir, options_.keep_checkpoints)),
      service_(&store_, checkpointer_.get()) {}

PsServer::~PsServer() {
  Shutdown(absl::ZeroDuration());
  if (sweeper_.joinable()) sweeper_.join();
}

absl::Status PsServer::Start() {
  if (checkpointer_ != nullptr) {
    const absl::Time t0 = absl::Now();
    auto snap = checkpointer_->LoadNewest();
    if (snap.ok()) {
      // A new timeline, never used before (the newest generation this
      // pserver was on is kept in the directory): trainers still on an old
      // one are told to recover.
      uint64_t last = snap->info.generation();
      auto kept = checkpointer_->ReadGeneration();
      if (kept.ok()) {
        last = std::max(last, *kept);
      } else if (!absl::IsNotFound(kept.status())) {
        return kept.status();
      }
      const uint64_t generation = last + 1;
      absl::Status s = checkpointer_->QuarantineNewerThan(snap->info.step());
      if (s.ok()) s = checkpointer_->WriteGeneration(generation);
      if (s.ok()) s = store_.Restore(*snap, generation);
      if (!s.ok()) {
        return absl::DataLossError(absl::StrCat(
            "--checkpoint_dir ", options_.checkpoint_dir,
            ": cannot restore step ", snap->info.step(), ": ", s.message()));
      }
      LOG(INFO) << "restored step " << snap->info.step() << " from "
                << options_.checkpoint_dir << " in "
                << absl::FormatDuration(
                       absl::Trunc(absl::Now() - t0, absl::Milliseconds(1)));
    } else if (!absl::IsNotFound(snap.status())) {
      return absl::Status(
          snap.status().code(),
          absl::StrCat("--checkpoint_dir ", options_.checkpoint_dir, ": ",
                       snap.status().message()));
    } else {
      // None verifies: keep any damaged ones out of the way.
      absl::Status s = checkpointer_->QuarantineNewerThan(-1);
      if (!s.ok()) return s;
      LOG(INFO) << "no checkpoint in " << options_.checkpoint_dir
                << ": waiting for the chief to start the job";
    }
  }
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
  FinalCheckpoint();
  const auto c = store_.counters();
  LOG(INFO) << "pserver stopped: " << c.pushes << " pushes, " << c.pulls
            << " pulls, " << c.block_updates << " block updates, "
            << c.rejected_requests << " rejected requests, " << c.pull_timeouts
            << " pull time-outs, " << c.dropped_trainers
            << " trainers dropped, " << c.rejoined_trainers << " rejoined, "
            << c.late_block_pushes << " late block pushes dropped, "
            << c.rollbacks << " rollbacks";
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

void PsServer::FinalCheckpoint() {
  if (checkpointer_ == nullptr || !store_.ready()) return;
  const auto v = store_.Versions();
  const bool sync = store_.job().mode() == SYNC;
  if (sync && v.min != v.max) {
    LOG(WARNING) << "no final checkpoint: stopped in the middle of step "
                 << v.min << " (blocks at versions " << v.min << " to " << v.max
                 << "); the newest complete checkpoint stays";
    return;
  }
  auto snap = store_.Snapshot(sync ? v.min : v.max);
  if (!snap.ok()) {
    LOG(WARNING) << "no final checkpoint: " << snap.status();
    return;
  }
  checkpointer_->Save(std::move(*snap));
  absl::Status s = checkpointer_->Flush();
  if (s.ok()) LOG(INFO) << "final checkpoint written";
}

std::shared_ptr<grpc::Channel> PsServer::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  return server_->InProcessChannel(args);
}

}  // namespace shardps
