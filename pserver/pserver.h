#ifndef SHARDPS_PSERVER_PSERVER_H_
#define SHARDPS_PSERVER_PSERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "pserver/checkpointer.h"
#include "pserver/parameter_store.h"
#include "pserver/request_handler.h"

namespace shardps {

struct PserverOptions {
  // Passed to the store (trainer count, wait limits, clock).
  StoreOptions store;
  // How often the store is swept for stalled pulls and silent trainers.
  // Default: 1 s.
  absl::Duration sweep_interval = absl::Seconds(1);
  // Where checkpoints go (docs/fault_tolerance.md). Start loads the newest
  // complete one found there. Empty: no checkpoints. Default: empty.
  std::string checkpoint_dir;
  // Complete checkpoints kept. Default: 2.
  int keep_checkpoints = 2;
  // The file-system seam for checkpoints; null means Env::Default(). Must
  // outlive the pserver.
  Env* env = nullptr;
};

// A pserver without its transport: the store, its checkpointer, the request
// handler that serves it, and the sweeper thread that times out pulls and
// drops silent trainers. A transport (GrpcPsServer, or a trainer's
// in-process client) calls handler(). Thread-safe.
class Pserver {
 public:
  // INVALID_ARGUMENT for a negative trainer count or checkpoint count.
  static absl::StatusOr<std::unique_ptr<Pserver>> Create(
      PserverOptions options);
  // Stop()s.
  ~Pserver();

  Pserver(const Pserver&) = delete;
  Pserver& operator=(const Pserver&) = delete;

  // Recovers the newest checkpoint of checkpoint_dir, if there is one
  // (RecoverFromCheckpoint), and starts the sweeper.
  absl::Status Start();
  // The first step of a shutdown, before the transport drains: tells the
  // sweeper to stop (no trainer is dropped while the transport drains), and
  // answers every waiting pull with UNAVAILABLE, and every later one that
  // would wait. Idempotent.
  void BeginShutdown();
  // BeginShutdown()s if that has not been done, waits for the sweeper, writes a
  // final checkpoint (with checkpoint_dir; in SYNC mode only at a step
  // boundary) and logs the counters. Idempotent.
  void Stop();

  RequestHandler* handler() { return &handler_; }
  ParameterStore* store() { return &store_; }

 private:
  explicit Pserver(PserverOptions options);
  void FinalCheckpoint();
  void LogCounters() const;

  const PserverOptions options_;
  ParameterStore store_;
  std::unique_ptr<Checkpointer> checkpointer_;
  RequestHandler handler_;
  absl::Notification stop_sweeping_;  // notified under stop_mu_
  std::thread sweeper_;
  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_PSERVER_H_
