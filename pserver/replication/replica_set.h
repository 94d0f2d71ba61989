#ifndef SHARDPS_PSERVER_REPLICATION_REPLICA_SET_H_
#define SHARDPS_PSERVER_REPLICATION_REPLICA_SET_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/storage/env.h"
#include "proto/replication.pb.h"
#include "pserver/replication/view_consensus.h"
#include "pserver/replication/view_keeper.h"
#include "pserver/store/step/update_forwarder.h"

namespace shardps {

// How a pserver reaches another one's replication calls (the gRPC binding:
// pserver/replication/grpc_replica_peer.h; direct calls in tests). Thread-safe.
class ReplicaPeer : public ViewPeer {
 public:
  // UNAVAILABLE or DEADLINE_EXCEEDED when the pserver does not answer.
  virtual absl::StatusOr<ForwardResponse> Forward(
      const ForwardRequest& req) = 0;
  virtual absl::Status Install(const InstallUnitRequest& req) = 0;
};

struct ReplicaSetOptions {
  int self = 0;         // this pserver's index in the job's pserver list
  int num_servers = 1;  // P
  int replication = 1;  // R, 1 <= R <= P
  // Where the acceptor's state is saved
  // (pserver/replication/view_state_file.h), in an existing directory; empty:
  // kept in memory only (a pserver restarted then takes no part in views until
  // it has learned the current one).
  std::string state_path;
  Env* env = nullptr;  // null: Env::Default()
  // The lease (JobSpec.pserver_lease_ms, docs/replication.md, "Faults"): a
  // backup that answers none of a forward's calls for this long is taken
  // out of the view; before that the forward is sent again. A backup that
  // answers and refuses is taken out at once.
  absl::Duration lease = absl::Seconds(4);
  // A backup whose host refuses connections (its process is gone) for this
  // long is taken out without waiting for the lease
  // (JobSpec.failover_after_ms).
  absl::Duration gone_after = absl::Milliseconds(150);
  // Forward keeps trying this long to reach the backups or agree a view
  // without them, logging, before it gives up UNAVAILABLE (the blocks stay
  // in flight meanwhile) and fences this pserver. At least twice the lease.
  absl::Duration max_forward_wait = absl::Seconds(20);
  // How often this pserver asks the others for the newest view, so that a
  // pserver taken out while it was alive (cut off, paused) learns it and
  // rejoins by itself. Zero: never (tests that drive the view by hand).
  absl::Duration watch_every = absl::ZeroDuration();
  // Rounds of one view proposal before it gives up UNAVAILABLE.
  int max_view_rounds = 5;
};

// One job's replication on one pserver (docs/replication.md): which shards
// it is primary or backup of in the agreed view, its acceptor in the view
// agreement (view_consensus.h), the forwarding of applied updates to the
// backups, and the taking of a primary's updates as a backup. Plain C++:
// the peers carry the messages. Thread-safe.
class ReplicaSet : public UpdateForwarder {
 public:
  static constexpr uint64_t kSparseTable = ~uint64_t{0};
  // What it needs of the job's store (and the handler's record of
  // answered pushes). Set before any call comes.
  struct StoreHooks {
    // Takes forwarded updates (a backup).
    std::function<absl::Status(const std::vector<AppliedUpdate>&,
                               const std::vector<PushRef>&)>
        apply;
    // The state of unit (table, unit) as a one-block dense blob, asked for
    // during a primary's Forward, while the unit's updates are in flight.
    std::function<absl::StatusOr<std::string>(uint32_t, uint32_t)> image_held;
    // Loads a unit's state (a joining backup), and the job's timeline.
    std::function<absl::Status(uint32_t, uint32_t, const std::string&,
                               uint64_t)>
        install;
    std::function<uint64_t()> generation;
    // What this pserver serves changed (a newer view, or the fence): the
    // store answers the pulls that wait for units it no longer serves.
    std::function<void()> served_changed;
  };
  using UnitKey = std::pair<uint32_t, uint32_t>;  // table id, unit

  // `shard_base[t]`: for dense table t, its TableHash (block b is on shard
  // (base + b) % P); kSparseTable for a sparse one (its unit index is the
  // shard). `peers[i]`: pserver i (null at options.self). Loads
  // the acceptor state from state_path: DATA_LOSS for a damaged file.
  static absl::StatusOr<std::unique_ptr<ReplicaSet>> Create(
      ReplicaSetOptions options, std::vector<uint64_t> shard_base,
      std::vector<std::unique_ptr<ReplicaPeer>> peers);

  ~ReplicaSet() override;

  void set_hooks(StoreHooks hooks) { hooks_ = std::move(hooks); }

  // The units this pserver holds (dense blocks and sparse shards of the
  // shards it is a replica of): what it takes again from their primaries
  // when it rejoins by itself (after being fenced, or taken out while
  // alive). Set once, after set_hooks and before any call comes; starts
  // the watch (ReplicaSetOptions::watch_every).
  void set_units(std::vector<UnitKey> units);
  // This pserver came back (a rejoin): its `units` are empty until their
  // primaries install them. A thread asks the pservers for a view in which
  // it is joining, waits until every unit is installed, then for one in
  // which it is a member again. Nothing while it is joining already.
  void StartJoining(std::vector<UnitKey> units);
  // The pserver is shutting down: Forward gives up (UNAVAILABLE) instead
  // of waiting on other pservers, and joining stops.
  void Stop();
  // Stop, and waits for this set's own threads (the watch, the joiner),
  // which may be calling other pservers: pservers in one process (tests)
  // shut down all before any is destroyed. The destructor calls it.
  void Shutdown();
  // Units installed so far, and of how many (joining; tests, status).
  std::pair<size_t, size_t> JoinProgress() const;
  // Whether this pserver is fenced: an update it applied as a primary did
  // not reach the backups (or it learned it is no primary any more), so
  // its copy may hold a version no backup has. It then serves nothing
  // (CheckServes: UNAVAILABLE "... is fenced") until it has rejoined.
  bool fenced() const { return keeper_->fenced(); }
  // An update applied here may be on no backup, or another primary may
  // serve this pserver's shards: serve nothing until rejoined.
  void Fence(const absl::Status& why) { keeper_->Fence(why); }
  // Asks the other pservers once for the newest view they know, learns
  // it, and rejoins when this pserver is out of it or fenced (what the
  // watch thread does every ReplicaSetOptions::watch_every).
  void Watch();

  int self() const { return options_.self; }
  int num_servers() const { return options_.num_servers; }
  int replication() const { return options_.replication; }
  // The shard of unit `unit` of table `table_id`.
  int ShardOf(uint32_t table_id, uint32_t unit) const;
  // The newest view this pserver knows decided.
  View view() const;
  // The shards this pserver is primary of, and backs, in view().
  std::vector<int> PrimaryShards() const;
  std::vector<int> BackupShards() const;

  // UpdateForwarder. CheckServes: FAILED_PRECONDITION when another pserver
  // is the primary; UNAVAILABLE while fenced.
  absl::Status CheckServes(uint32_t table_id, uint32_t unit) const override;
  absl::Status Forward(const std::vector<AppliedUpdate>& updates,
                       const std::vector<PushRef>& pushes) override;

  // The calls of other pservers and trainers.
  absl::Status HandleForward(const ForwardRequest& req, ForwardResponse* resp);
  absl::Status HandlePrepare(const ViewPrepareRequest& req,
                             ViewPrepareResponse* resp);
  absl::Status HandleAccept(const ViewAcceptRequest& req,
                            ViewAcceptResponse* resp);
  // Learns the view when a majority of the pservers show it decided
  // (view_witness.h); FAILED_PRECONDITION, naming how many answered,
  // when they do not.
  absl::Status HandleCommit(const ViewCommitRequest& req);
  // This pserver's acceptor state, read only (ViewPeer::Inspect).
  absl::Status HandleInspect(ViewPrepareResponse* resp) const;
  absl::Status HandleInstall(const InstallUnitRequest& req);
  // Agrees with the pservers a view without `remove`, with `join` joining
  // and `promote` moved from joining to members (none: answers the view
  // known here). Primaries stay where they are while they live; a shard
  // whose primary left goes to its first member replica. UNAVAILABLE when
  // no majority answers. FAILED_PRECONDITION, naming why, for a removal
  // asked of a pserver that is not a member of the newest view (a pserver
  // taken out, or cut off and behind, never takes others out) and for a
  // view that would leave a shard with no member holding it.
  absl::StatusOr<View> ChangeView(const std::vector<int>& remove,
                                  const std::vector<int>& join,
                                  const std::vector<int>& promote = {});
  // The primary of `shard` in `v` (-1: none).
  int PrimaryOf(int shard, const View& v) const;

 private:
  ReplicaSet(ReplicaSetOptions options, std::vector<uint64_t> shard_base,
             std::vector<std::unique_ptr<ReplicaPeer>> peers,
             std::unique_ptr<ViewKeeper> keeper);
  std::string NotPrimary(int shard, const View& v) const;
  // Sends backup `b` the state of the units it asked for (under their
  // locks, which the caller holds).
  absl::Status InstallOn(int b, const View& v, const ForwardResponse& asked);
  void JoinLoop();
  void WatchLoop();
  // One round of Forward in view `v`: OK when every backup took its
  // updates; `*retry` when the view changed (learned, or proposed
  // without a backup that did not answer).
  // `silent_since`: per backup, when it first left a call of this forward
  // unanswered (the lease runs from there).
  absl::Status ForwardOnce(const View& v,
                           const std::vector<AppliedUpdate>& updates,
                           const std::vector<PushRef>& pushes,
                           std::map<int, absl::Time>* silent_since,
                           bool* retry);

  const ReplicaSetOptions options_;
  const std::vector<uint64_t> shard_base_;
  const std::vector<std::unique_ptr<ReplicaPeer>> peers_;
  StoreHooks hooks_;
  // The agreed view, the acceptor and the fence.
  const std::unique_ptr<ViewKeeper> keeper_;

  // Joining (after a rejoin): the units still to be installed.
  mutable absl::Mutex join_mu_;
  bool joining_ ABSL_GUARDED_BY(join_mu_) = false;
  bool stop_ ABSL_GUARDED_BY(join_mu_) = false;
  absl::flat_hash_set<UnitKey> expected_ ABSL_GUARDED_BY(join_mu_);
  absl::flat_hash_set<UnitKey> installed_ ABSL_GUARDED_BY(join_mu_);
  std::vector<UnitKey> units_ ABSL_GUARDED_BY(join_mu_);
  absl::CondVar stop_cv_;  // signalled (under join_mu_) when stop_ is set
  std::thread joiner_;
  std::thread watcher_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_REPLICATION_REPLICA_SET_H_
