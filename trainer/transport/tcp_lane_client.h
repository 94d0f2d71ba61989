#ifndef SHARDPS_TRAINER_TRANSPORT_TCP_LANE_CLIENT_H_
#define SHARDPS_TRAINER_TRANSPORT_TCP_LANE_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transport/ps_client_interface.h"
#include "common/transport/tcp_lane.h"
#include "trainer/transport/request_stamp.h"

namespace shardps {

// A PsClientInterface decorator, as SharedMemoryPsClient is, for a pserver
// that serves the TCP lane (common/transport/tcp_lane.h): float32 dense
// pushes and pulls go over connections of their own, the values written
// from the caller's gradients and read into its parameters with no copy in
// between, each connection carrying one call at a time (a pserver's
// several calls of a step spread over them). Every other call, and a push
// or pull the lane does not carry (another encoding, sparse rows, LARS
// norms, more than tcp_lane::kMaxValueBytes), goes to the pserver's client
// as it is. When a connection fails (the pserver went away, a deadline
// passed) or the pserver no longer knows the lane (its job ended, the
// ticket was replaced), the call is sent again through that client (a
// push under its own request id, which the pserver answers once) and so is
// every later one (lost()). Thread-safe.
class TcpLanePsClient final : public ForwardingPsClient {
 public:
  struct Options {
    int connections = 2;
    // How long one call may take, its answer included (a pull waiting for
    // a step too): as one attempt of a gRPC call (RpcOptions).
    absl::Duration deadline = absl::Seconds(60);
    absl::Duration connect_timeout = absl::Seconds(10);
    // How long a connection that would wait polls before it sleeps, while
    // at most one other call of this process is in progress
    // (TcpLaneSocket::set_spin, tcp_lane::kSpinAlongside).
    absl::Duration spin = tcp_lane::kDefaultSpin;
  };

  // Asks the pserver `inner` reaches for a lane (OpenTcpLane) and opens
  // the connections. The status says why not (TLS, a replicated job, an
  // address that is no TCP host, a port it cannot reach). `inner` and
  // `stamp` must outlive it.
  static absl::StatusOr<std::unique_ptr<TcpLanePsClient>> Open(
      PsClientInterface* inner, const RequestStamp& stamp,
      const Options& options);
  // Ends the calls not yet answered CANCELLED.
  ~TcpLanePsClient() override;
  TcpLanePsClient(const TcpLanePsClient&) = delete;
  TcpLanePsClient& operator=(const TcpLanePsClient&) = delete;

  // Ends its calls in flight CANCELLED (their connections close and later
  // calls go through the pserver's client), then the pserver client's.
  void CancelCalls() override;
  void PullDenseAsync(const PullRequest& req, const DensePullTargets* targets,
                      PullResponse* resp, StatusCallback done) override;
  void PushDenseAsync(const DensePush& push, PushResponse* resp,
                      StatusCallback done) override;

  // Runs the oldest queued call on the calling thread, over a connection no
  // call is using, as a worker would have (its `done` runs here too);
  // `taken` (when set) runs once the call is taken, before it is carried.
  // False when no call is queued or every connection is busy. A thread
  // about to wait for its calls (Transfer::Wait) calls it instead:
  // handing a call to a worker and its answer back costs two thread
  // wake-ups, tens of microseconds each on virtual machines
  // (docs/performance.md, "TCP lane").
  bool RunQueued(const std::function<void()>& taken = nullptr);
  // While set, new calls wait for the next RunQueued instead of waking a
  // worker, for a thread that waits for them at once (ParamClient::Push,
  // Pull): a transfer of one call then wakes no thread at all. RunQueued
  // hands the others to the workers as it takes one (or finds every
  // connection busy), and so do ReleaseDeferred and clearing it.
  void set_defer(bool defer);
  void ReleaseDeferred();

  // Whether the lane was lost (every call goes through gRPC since).
  bool lost() const { return lost_.load(); }
  int connections() const { return static_cast<int>(sockets_.size()); }

 private:
  struct Call;
  TcpLanePsClient(PsClientInterface* inner, const Options& options);
  // Queues `call` for a connection, or sends it through `inner_` when the
  // lane is lost or stopping.
  void Enqueue(std::unique_ptr<Call> call);
  void Worker(size_t i);
  // Every queued call, deferred or not, removed.
  std::deque<std::unique_ptr<Call>> TakeAllQueued()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the deferred calls to the workers.
  void Undefer() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The oldest queued call, marked as carried by connection i.
  std::unique_ptr<Call> Take(size_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Carries `call` over connection i and answers it (again through gRPC
  // where the lane failed it). False when the connection is gone.
  bool Run(size_t i, std::unique_ptr<Call> call);
  // One call over socket i: the pserver's answer into *answer, or the
  // connection's failure.
  absl::Status Exchange(TcpLaneSocket& socket, Call& call,
                        absl::Status* answer);
  // The lane is gone: later calls go through inner_, and so do those
  // queued.
  void Lose(const absl::Status& why);

  const Options options_;
  std::vector<std::unique_ptr<TcpLaneSocket>> sockets_;
  std::vector<std::thread> workers_;
  std::atomic<bool> lost_{false};
  absl::Mutex mu_;
  std::deque<std::unique_ptr<Call>> queue_ ABSL_GUARDED_BY(mu_);
  // Calls queued while defer_ was set, which workers do not see.
  std::deque<std::unique_ptr<Call>> deferred_ ABSL_GUARDED_BY(mu_);
  bool defer_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Calls are numbered; those up to cancelled_ end CANCELLED.
  uint64_t next_call_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  // The number of the call each connection is carrying (0: none), set by
  // whichever thread carries it (its worker, or one in RunQueued).
  std::vector<uint64_t> busy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_TRANSPORT_TCP_LANE_CLIENT_H_
