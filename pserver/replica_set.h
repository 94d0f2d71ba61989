#ifndef SHARDPS_PSERVER_REPLICA_SET_H_
#define SHARDPS_PSERVER_REPLICA_SET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "proto/replication.pb.h"
#include "pserver/update_forwarder.h"
#include "pserver/view_consensus.h"

namespace shardps {

// How a pserver reaches another one's replication calls (the gRPC binding:
// pserver/grpc_replica_peer.h; direct calls in tests). Thread-safe.
class ReplicaPeer : public ViewPeer {
 public:
  // UNAVAILABLE or DEADLINE_EXCEEDED when the pserver does not answer.
  virtual absl::StatusOr<ForwardResponse> Forward(
      const ForwardRequest& req) = 0;
};

struct ReplicaSetOptions {
  int self = 0;         // this pserver's index in the job's pserver list
  int num_servers = 1;  // P
  int replication = 1;  // R, 1 <= R <= P
  // Where the acceptor's state is saved (pserver/view_state_file.h), in an
  // existing directory; empty: kept in memory only (a pserver restarted
  // then takes no part in views until it has learned the current one).
  std::string state_path;
  Env* env = nullptr;  // null: Env::Default()
  // Forward keeps trying this long to reach the backups or agree a view
  // without them, logging, before it gives up UNAVAILABLE.
  absl::Duration max_forward_wait = absl::Seconds(60);
};

// One job's replication on one pserver (docs/replication.md): which shards
// it is primary or backup of in the agreed view, its acceptor in the view
// agreement (view_consensus.h), the forwarding of applied updates to the
// backups, and the taking of a primary's updates as a backup. Plain C++:
// the peers carry the messages. Thread-safe.
class ReplicaSet : public UpdateForwarder {
 public:
  // Where forwarded updates go: the job's store (and the handler's record
  // of answered pushes). Set before any call comes.
  using Applier = std::function<absl::Status(const std::vector<AppliedUpdate>&,
                                             const std::vector<PushRef>&)>;

  // `shard_base[t]`: for dense table t, its TableHash (block b is on shard
  // (base + b) % P). `peers[i]`: pserver i (null at options.self). Loads
  // the acceptor state from state_path: DATA_LOSS for a damaged file.
  static absl::StatusOr<std::unique_ptr<ReplicaSet>> Create(
      ReplicaSetOptions options, std::vector<uint64_t> shard_base,
      std::vector<std::unique_ptr<ReplicaPeer>> peers);

  ~ReplicaSet() override;

  void set_applier(Applier applier) { applier_ = std::move(applier); }

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

  // UpdateForwarder.
  absl::Status CheckServes(uint32_t table_id, uint32_t unit) const override;
  absl::Status Forward(const std::vector<AppliedUpdate>& updates,
                       const std::vector<PushRef>& pushes) override;

  // The calls of other pservers and trainers.
  absl::Status HandleForward(const ForwardRequest& req, ForwardResponse* resp);
  absl::Status HandlePrepare(const ViewPrepareRequest& req,
                             ViewPrepareResponse* resp);
  absl::Status HandleAccept(const ViewAcceptRequest& req,
                            ViewAcceptResponse* resp);
  absl::Status HandleCommit(const ViewCommitRequest& req);
  // Agrees with the pservers a view without `remove` and with `add`
  // (neither: answers the view known here). UNAVAILABLE when no majority
  // answers.
  absl::StatusOr<View> ChangeView(const std::vector<int>& remove,
                                  const std::vector<int>& add);

 private:
  class LocalPeer;
  ReplicaSet(ReplicaSetOptions options, std::vector<uint64_t> shard_base,
             std::vector<std::unique_ptr<ReplicaPeer>> peers,
             AcceptorState state);
  // Saves the acceptor's state (before an answer that depends on it).
  absl::Status SaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Learns a decided view (kept when newer).
  void Learn(const View& v);
  int PrimaryOf(int shard, const View& v) const;
  std::string NotPrimary(int shard, const View& v) const;
  absl::StatusOr<View> Propose(const ViewChange& change);
  // One round of Forward in view `v`: OK when every backup took its
  // updates; `*retry` when the view changed (learned, or proposed
  // without a backup that did not answer).
  absl::Status ForwardOnce(const View& v,
                           const std::vector<AppliedUpdate>& updates,
                           const std::vector<PushRef>& pushes, bool* retry);

  const ReplicaSetOptions options_;
  Env* const env_;
  const std::vector<uint64_t> shard_base_;
  const std::vector<std::unique_ptr<ReplicaPeer>> peers_;
  std::unique_ptr<LocalPeer> local_;
  Applier applier_;

  mutable absl::Mutex mu_;
  ViewAcceptor acceptor_ ABSL_GUARDED_BY(mu_);
  // One proposal at a time from this pserver (its ballots carry its id).
  absl::Mutex propose_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_REPLICA_SET_H_
