#ifndef SHARDPS_PSERVER_SERVER_H_
#define SHARDPS_PSERVER_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/wire_limits.h"
#include "grpcpp/grpcpp.h"
#include "pserver/parameter_store.h"
#include "pserver/ps_service_impl.h"

namespace shardps {

struct PsServerOptions {
  // Address to listen on. Default: all interfaces.
  std::string host = "0.0.0.0";
  // TCP port; 0 binds a free one (see PsServer::port()). Default: 7164.
  int port = 7164;
  // Written with the bound port once the server serves (temporary file,
  // then rename). Default: none.
  std::string port_file;
  // Passed to the store (trainer count, wait limits).
  StoreOptions store;
  // How often the store is swept for stalled pulls. Default: 1 s.
  absl::Duration sweep_interval = absl::Seconds(1);
  // Where checkpoints go (docs/fault_tolerance.md). Start loads the newest
  // complete one found there. Empty: no checkpoints. Default: empty.
  std::string checkpoint_dir;
  // Complete checkpoints kept. Default: 2.
  int keep_checkpoints = 2;
  // The file-system seam for checkpoints; null means Env::Default(). Must
  // outlive the server.
  Env* env = nullptr;
};

// A pserver: a ParameterStore served over gRPC. Create, Start, then Wait
// until Shutdown is called (from a signal handler thread, say).
// Thread-safe.
class PsServer {
 public:
  static absl::StatusOr<std::unique_ptr<PsServer>> Create(
      PsServerOptions options);
  ~PsServer();

  // Loads the newest checkpoint of checkpoint_dir, if any, binds the port
  // and starts serving; writes the port file.
  absl::Status Start();
  // Blocks until Shutdown() has completed.
  void Wait();
  // Answers waiting pulls UNAVAILABLE, finishes in-flight calls (up to
  // `grace`), writes a final checkpoint (with checkpoint_dir; SYNC only at
  // a step boundary), and stops. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(5));

  int port() const { return port_; }
  ParameterStore* store() { return &store_; }
  // A channel to this server within the process (tests).
  std::shared_ptr<grpc::Channel> InProcessChannel();

 private:
  explicit PsServer(PsServerOptions options);
  void FinalCheckpoint();

  const PsServerOptions options_;
  ParameterStore store_;
  std::unique_ptr<Checkpointer> checkpointer_;
  PsServiceImpl service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::thread sweeper_;
  absl::Notification stop_;
  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  absl::Notification done_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVER_H_
