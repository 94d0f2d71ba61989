#ifndef SHARDPS_TRAINER_CLIENT_TRANSFER_H_
#define SHARDPS_TRAINER_CLIENT_TRANSFER_H_

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

// A pull or push in flight on every pserver (ParamClient::StartPull,
// StartPush; SparseClient::StartPull). Wait() returns once every call of it has
// ended; the destructor waits too, so that no reply lands after it. Wait()
// carries queued TCP lane calls on its own thread while it would wait
// (TcpLanePsClient::RunQueued), so the ParamClient must still be there.
// Thread-compatible.
class Transfer {
 public:
  ~Transfer() { AwaitCalls(); }
  // The first error of its calls, or OK; fills `stats` (when not null).
  // May be called again: it returns the same.
  absl::Status Wait(TransferStats* stats = nullptr);
  // Whether every call has ended (Wait would not block).
  bool Done() const;

 private:
  friend class ParamClient;
  friend class SparseClient;
  // What the calls' callbacks share with the transfer; they hold it, so a
  // callback never touches a destroyed transfer.
  struct State {
    mutable absl::Mutex mu;
    int pending ABSL_GUARDED_BY(mu) = 0;
    FirstError error;
  };
  explicit Transfer(int calls);
  // The transfer of `calls`, kept alive until they end; its statistics add
  // add(call, &stats) over the calls.
  template <typename Call, typename AddStats>
  static std::unique_ptr<Transfer> Of(
      std::shared_ptr<std::vector<std::unique_ptr<Call>>> calls, AddStats add) {
    std::unique_ptr<Transfer> t(new Transfer(static_cast<int>(calls->size())));
    t->calls_ = calls;
    t->stats_ = [calls, add] {
      TransferStats stats;
      for (const auto& call : *calls) add(*call, &stats);
      stats.rpcs = static_cast<int64_t>(calls->size());
      return stats;
    };
    return t;
  }
  // The callback of one call.
  StatusCallback OneDone();
  // Blocks until every call has ended.
  void AwaitCalls();

  const std::shared_ptr<State> state_;
  // The calls (kept alive until they end), and the statistics of the ended
  // transfer read from them.
  std::shared_ptr<void> calls_;
  std::function<TransferStats()> stats_;
  // Carries one queued call of the ParamClient's TCP lanes on this thread;
  // false when there was none. Null: no lanes.
  std::function<bool()> run_queued_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CLIENT_TRANSFER_H_
