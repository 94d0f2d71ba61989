#ifndef SHARDPS_TRAINER_CLIENT_HEARTBEAT_H_
#define SHARDPS_TRAINER_CLIENT_HEARTBEAT_H_

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/transport/ps_client_interface.h"

namespace shardps {

// Tells every pserver that this trainer is alive, every `interval` from a
// thread of its own once started, so that a trainer blocked in a long pull
// or a long computation is not dropped by --trainer_timeout. A pserver that
// answers FAILED_PRECONDITION (this trainer was dropped, or replaced by a newer
// incarnation) makes status() return that error; the training loop stops
// on it. Unreachable pservers are skipped quietly (their retries log).
// Thread-safe.
class Heartbeater {
 public:
  // `servers` must outlive this object; use clients with a short retry
  // budget, since Stop() waits for the calls in flight.
  Heartbeater(std::vector<PsClientInterface*> servers, int trainer_id,
              uint64_t incarnation, absl::Duration interval);
  // Stop()s.
  ~Heartbeater();

  Heartbeater(const Heartbeater&) = delete;
  Heartbeater& operator=(const Heartbeater&) = delete;

  // Starts the thread: a round at once, then one every interval.
  void Start();
  // One round: a heartbeat to every pserver whose last one was answered.
  // Nothing after Stop().
  void Beat();
  // Stops sending and waits for the calls in flight. Idempotent.
  void Stop();
  // OK, or the first FAILED_PRECONDITION a pserver answered.
  absl::Status status() const;

 private:
  struct Call;

  const std::vector<PsClientInterface*> servers_;
  const int trainer_id_;
  const uint64_t incarnation_;
  const absl::Duration interval_;
  absl::Notification stop_;
  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<bool> busy_ ABSL_GUARDED_BY(mu_);  // per server
  std::unique_ptr<std::thread> thread_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CLIENT_HEARTBEAT_H_
