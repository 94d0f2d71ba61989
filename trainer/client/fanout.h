#ifndef SHARDPS_TRAINER_CLIENT_FANOUT_H_
#define SHARDPS_TRAINER_CLIENT_FANOUT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/transport/ps_client_interface.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// Bytes and time of one pull or push over all pservers.
struct TransferStats {
  int64_t bytes = 0;  // serialized payload, requests or replies
  int64_t rpcs = 0;
  int64_t server_wait_us = 0;  // pulls: longest time held by a pserver
  int64_t min_version = -1;    // dense pulls: lowest block version received
  // Pushes: time this trainer spent making the values before sending them
  // (with threshold compression, its own optimizer and the encoder):
  // computation, not waiting on the network.
  int64_t prepare_us = 0;
};

// Collects the first error of parallel calls. Thread-safe.
class FirstError {
 public:
  void Add(const absl::Status& s);
  absl::Status Get() const;

 private:
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// Runs `call(s, done)` for s in [0, n) at once and waits for every `done`;
// returns the first error.
absl::Status OnEveryServer(
    size_t n, const std::function<void(size_t s, StatusCallback done)>& call);

// One push call: its pserver, request and reply.
struct PendingPush {
  PsClientInterface* server = nullptr;
  PushRequest req;
  PushResponse resp;
};

// Sends every push at once, waits for all, returns the first error and (if
// `stats`) the bytes of the requests.
absl::Status SendPushes(const std::vector<std::unique_ptr<PendingPush>>& calls,
                        TransferStats* stats);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CLIENT_FANOUT_H_
