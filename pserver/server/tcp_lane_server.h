#ifndef SHARDPS_PSERVER_SERVER_TCP_LANE_SERVER_H_
#define SHARDPS_PSERVER_SERVER_TCP_LANE_SERVER_H_

#include <atomic>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transport/tcp_lane.h"
#include "pserver/server/dispatcher.h"
#include "pserver/service/request_handler.h"
#include "pserver/store/memory/memory_budget.h"

namespace shardps {

// The pserver's side of the TCP lane (common/transport/tcp_lane.h,
// docs/wire_protocol.md "TCP lane"): listens on a port of its own, issues
// the tickets that OpenTcpLane hands trainers over gRPC, and serves each
// connection on a thread of its own, one call at a time: the values are
// read into the connection's buffer, the call goes to the Dispatcher on
// that thread with a lane over the buffer (a pull's values are written
// there, then sent from it). It trusts nothing it reads: a connection that
// does not present a live ticket within the hello timeout, names another
// trainer, or sends a header out of bounds is answered with the reason and
// closed; each buffer is counted in --max_memory_mb. Thread-safe.
class TcpLaneServer {
 public:
  struct Options {
    std::string host = "0.0.0.0";
    int port = 0;  // 0: one the kernel picks
    // A new connection presents its ticket within this.
    absl::Duration hello_timeout = absl::Seconds(10);
    // Once a call's header has come, its request and values within this;
    // a reply must be taken within it too.
    absl::Duration call_timeout = absl::Seconds(60);
    int max_connections = 256;
    int max_connections_per_ticket = 8;
    // How long a connection's thread that would wait, for its next call
    // or within one, polls before it sleeps, while at most one other call
    // or spinner is counted in the process (TcpLaneSocket::set_spin).
    absl::Duration spin = tcp_lane::kDefaultSpin;
  };

  // Binds and starts accepting. `dispatcher` and `budget` must outlive it.
  // UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<TcpLaneServer>> Start(
      Dispatcher* dispatcher, MemoryBudget* budget, Options options);
  // Stop().
  ~TcpLaneServer();
  TcpLaneServer(const TcpLaneServer&) = delete;
  TcpLaneServer& operator=(const TcpLaneServer&) = delete;

  int port() const { return port_; }
  // A ticket (kTicketBytes random bytes) for trainer `trainer_id` of job
  // `job_id`, whose handler is `job`. It replaces the trainer's previous
  // ticket, whose connections answer their next call NOT_FOUND and close.
  std::string Issue(const std::string& job_id,
                    const std::shared_ptr<RequestHandler>& job, int trainer_id);
  // Stops accepting and closes every connection (a call in progress is
  // answered first, or fails), then joins their threads. Idempotent.
  void Stop();

  // Connections open now (tests).
  int connections() const;
  // Lane calls in progress in this process, on every TcpLaneServer, and
  // connections spinning (tests).
  static int busy();

 private:
  struct Grant {
    std::string job_id;
    std::weak_ptr<RequestHandler> job;
    int trainer_id = 0;
    std::string ticket;
    std::atomic<bool> revoked{false};
    std::atomic<int> connections{0};
  };
  struct Connection {
    std::unique_ptr<TcpLaneSocket> socket;
    std::thread thread;
    std::atomic<bool> finished{false};
  };
  // The buffer of one connection's values, counted in the budget.
  class Buffer;

  TcpLaneServer(Dispatcher* dispatcher, MemoryBudget* budget, Options options,
                int listen_fd, int wake_fd, int port);
  void AcceptLoop();
  void Serve(Connection* c);
  // The grant the connection's hello names; the answer is sent either way.
  absl::StatusOr<std::shared_ptr<Grant>> Hello(TcpLaneSocket& socket);
  // One call: OK to go on with the next, an error to close.
  absl::Status ServeCall(TcpLaneSocket& socket, Grant& grant, Buffer& buffer);
  // Hands a parsed call to the job through the dispatcher and waits for
  // its answer; `values` (null: in the message) are the lane's.
  absl::Status Dispatch(const std::shared_ptr<RequestHandler>& job, PsRpc rpc,
                        const Grant& grant, const std::string& peer,
                        float* values, uint64_t value_bytes,
                        const google::protobuf::Message& req,
                        google::protobuf::Message* resp);
  // Sends the answer of a call: a pull's values from the buffer (in place)
  // or out of the reply's blocks (16-bit values).
  static absl::Status Answer(TcpLaneSocket& socket, const absl::Status& status,
                             bool push, bool in_place, const float* values,
                             uint64_t value_bytes,
                             google::protobuf::Message* resp,
                             absl::Time deadline);
  // Joins the threads of finished connections. REQUIRES: mu_ held.
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Dispatcher* const dispatcher_;
  MemoryBudget* const budget_;
  const Options options_;
  const int listen_fd_;
  const int wake_fd_;  // an eventfd that wakes the accept loop
  const int port_;
  std::atomic<bool> stopping_{false};
  mutable absl::Mutex mu_;
  // By ticket, and the ticket of each (job, trainer).
  absl::flat_hash_map<std::string, std::shared_ptr<Grant>> grants_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<std::string, int>, std::string> tickets_
      ABSL_GUARDED_BY(mu_);
  std::list<Connection> connections_ ABSL_GUARDED_BY(mu_);
  std::thread accept_thread_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVER_TCP_LANE_SERVER_H_
