#ifndef SHARDPS_TRAINER_TRANSPORT_REPLICA_ROUTER_H_
#define SHARDPS_TRAINER_TRANSPORT_REPLICA_ROUTER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transport/ps_client_interface.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// A trainer's side of replication (docs/replication.md): the view of live
// pservers the pservers agreed, the primary of each shard in it, and, per
// shard, a PsClientInterface that sends each call to the shard's primary.
// A primary known dead (its host refuses connections) or fenced has the
// pservers agree a view without it at once; one that answers nothing
// (cut off, paused, losing packets) is waited for, the call sent again
// with a back-off and a log line, until it has been silent for the lease,
// and only then taken out. The call then goes to the new primary; one
// answered "not the primary" learns the newer view first. In sync mode a shard
// client keeps every push the primary acknowledged until a pull of the version
// after it has been answered, and sends them again to a new primary (same
// request ids: a step the new primary applied already counts them as
// duplicates), so the step being assembled on a dead primary is assembled
// again. Thread-safe.
class ReplicaRouter {
 public:
  // `servers[i]` reaches pserver i with a short retry budget (the failover
  // bound); they must outlive the router.
  struct Options {
    int replication = 2;
    bool sync = true;
    int trainer_id = 0;
    // A primary that answers none of this trainer's calls for this long
    // is taken out of the view (JobSpec.pserver_lease_ms).
    absl::Duration lease = absl::Seconds(4);
    // A call gives up (its last error, saying so) when it has found no
    // primary that answers, and no majority of pservers to agree a view
    // without it, for this long.
    absl::Duration give_up_after = absl::Seconds(60);
  };
  ReplicaRouter(std::vector<PsClientInterface*> servers, Options options);
  ~ReplicaRouter();

  ReplicaRouter(const ReplicaRouter&) = delete;
  ReplicaRouter& operator=(const ReplicaRouter&) = delete;

  // The client of shard s's primary (ParamClient and SparseClient take
  // these in place of the pservers).
  std::vector<PsClientInterface*> shard_clients() const;
  // Whether pserver i is in the current view.
  bool Live(int server) const;
  int Primary(int shard) const;
  int64_t view_number() const;
  // Pservers taken out of the view since the start.
  int failovers() const;

  // Chief: `rejoin(i)` is called (on the router's thread) for a pserver i
  // out of the view that answers again (restarted on its address), to
  // send it the job with InitJobRequest.rejoin; it then joins and catches
  // up by itself. The router checks the view and the pservers out of it
  // about once a second.
  void set_rejoin(std::function<absl::Status(int)> rejoin);

  // Stops the router's thread: nothing it would run (failovers, probes,
  // `rejoin`) runs after this returns. For an owner whose `rejoin` uses
  // what it destroys before the router. The destructor calls it.
  void Stop();

 private:
  class ShardClient;
  friend class ShardClient;
  // Runs `fn` on the router's thread (failovers wait on RPCs), `after`
  // from now.
  void Post(std::function<void()> fn,
            absl::Duration after = absl::ZeroDuration());
  int PrimaryLocked(int shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pserver i refused a connection now (its host is up, it is not); it
  // answered (or the pservers let it back into the view).
  void NoteRefused(int server);
  void NoteAnswered(int server);
  // When the pservers that refused connections within the lease, and
  // still do when asked again now (all but `refused_now`, which just
  // did), are a majority: why no view can be agreed (for the caller's
  // error). On the router's thread.
  absl::Status MajorityGone(int refused_now);
  void Run();
  // Pserver `dead` did not answer in view `seen`: the pservers agree a view
  // without it (unless the view moved on already).
  absl::Status Failover(int dead, int64_t seen);
  // Learns the newest view from the live pservers.
  absl::Status Refresh(int64_t seen);
  // Asks pserver q for a view change; adopts the answer when newer.
  absl::Status AskView(int q, const ChangeViewRequest& req);
  // The shards whose primary a newly adopted view changed.
  struct ViewMoves {
    std::vector<int> shards;         // shards whose primary changed
    std::vector<int> from;           // ... who served each before
    std::vector<int> old_primaries;  // ... each of those once, to be told
  };
  // Adopts `view` (newer than the current one, with `members` its members,
  // learned from pserver q) and notes in `moves` the shards it moves.
  void AdoptViewLocked(const ViewMessage& view, std::vector<int> members, int q,
                       ViewMoves* moves) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends each moved shard's unconfirmed pushes again, to its new primary.
  void SendAgainToNewPrimaries(const ViewMoves& moves);
  // Sends `view` to the old primaries, without waiting for their answers.
  void TellOldPrimaries(const std::vector<int>& old_primaries,
                        const ViewMessage& view);
  // Learns the view, and sends the job to pservers that came back.
  void Probe();

  const std::vector<PsClientInterface*> servers_;
  const Options options_;
  const int replication_;
  const bool sync_;
  const int trainer_id_;
  std::vector<std::unique_ptr<ShardClient>> shards_;

  mutable absl::Mutex mu_;
  int64_t view_number_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> members_ ABSL_GUARDED_BY(mu_);
  std::vector<int> joining_ ABSL_GUARDED_BY(mu_);
  std::vector<int> primaries_ ABSL_GUARDED_BY(mu_);  // empty: the rule
  std::function<absl::Status(int)> rejoin_ ABSL_GUARDED_BY(mu_);
  // When each pserver was last sent the job for a rejoin.
  std::vector<absl::Time> rejoin_sent_ ABSL_GUARDED_BY(mu_);
  int failovers_ ABSL_GUARDED_BY(mu_) = 0;
  // When each pserver last refused a connection (InfinitePast: never).
  std::vector<absl::Time> refused_at_ ABSL_GUARDED_BY(mu_);
  // What runs on the router's thread, by when it is due.
  std::multimap<absl::Time, std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_TRANSPORT_REPLICA_ROUTER_H_
