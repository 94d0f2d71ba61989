#ifndef SHARDPS_PSERVER_SERVICE_REPLICATION_HANDLER_H_
#define SHARDPS_PSERVER_SERVICE_REPLICATION_HANDLER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/ps_service.pb.h"
#include "proto/replication.pb.h"
#include "pserver/replication/replica_set.h"
#include "pserver/service/request_dedup.h"
#include "pserver/store/parameter_store.h"

namespace shardps {

// With replication: the shards of each sparse table a pserver holds (those
// whose replica list has it, common/placement/shard_map.h); empty without.
std::vector<int> SparseShardsOf(const InitJobRequest& req);

// The calls of a replicated job (docs/replication.md) on their wire
// messages: ChangeView from trainers, and the Replication service's calls
// from other pservers. It makes the job's ReplicaSet at InitJob and wires
// it to the store (the forwarder, a backup's applied updates, unit images)
// and to the handler's RequestDedup (a push a backup holds is answered as a
// duplicate after a failover). Every call of a job without replication is
// FAILED_PRECONDITION. Thread-safe.
class ReplicationHandler {
 public:
  // `store` and `dedup` must outlive the handler.
  ReplicationHandler(ParameterStore* store, RequestDedup* dedup)
      : store_(store), dedup_(dedup) {}

  ReplicationHandler(const ReplicationHandler&) = delete;
  ReplicationHandler& operator=(const ReplicationHandler&) = delete;

  // Makes a replicated job's ReplicaSet from its InitJob: the pserver list,
  // this pserver's index, the peers. Without one (in-process pservers),
  // InitJob refuses replication > 1.
  using ReplicaSetFactory =
      std::function<absl::StatusOr<std::unique_ptr<ReplicaSet>>(
          const InitJobRequest& req)>;
  void set_replica_factory(ReplicaSetFactory f) {
    replica_factory_ = std::move(f);
  }

  // InitJob of a replicated job, once the store holds it: makes its
  // ReplicaSet (once) and, with `rejoin`, starts joining.
  absl::Status Start(const InitJobRequest& req);
  // A rejoining pserver's blocks, zero until their primaries install them;
  // the job is then ready (it serves nothing until it is a member again).
  absl::Status FillForRejoin(const InitJobRequest& req);
  // Adds the view and this pserver's roles to a status (nothing without
  // replication).
  void AddStatus(GetStatusResponse* resp) const;

  absl::Status ChangeView(const ChangeViewRequest& req,
                          ChangeViewResponse* resp);
  // The calls of other pservers. `caller`: the address the calling
  // pserver's token names (--peer_identities_file; "": not known, one
  // peer token for all). A known caller must be one of the job's
  // pservers, and the pserver a Forward or InstallUnit names as its
  // sender, or a view proposal as its proposer: PERMISSION_DENIED
  // otherwise.
  absl::Status Forward(const ForwardRequest& req, ForwardResponse* resp,
                       const std::string& caller);
  absl::Status ViewPrepare(const ViewPrepareRequest& req,
                           ViewPrepareResponse* resp,
                           const std::string& caller);
  absl::Status ViewAccept(const ViewAcceptRequest& req,
                          ViewAcceptResponse* resp, const std::string& caller);
  absl::Status ViewCommit(const ViewCommitRequest& req,
                          ViewCommitResponse* resp, const std::string& caller);
  absl::Status InstallUnit(const InstallUnitRequest& req,
                           InstallUnitResponse* resp,
                           const std::string& caller);
  absl::Status ViewInspect(const ViewInspectRequest& req,
                           ViewPrepareResponse* resp,
                           const std::string& caller);

  // The job's replication; null without.
  ReplicaSet* replicas() const;

 private:
  // Start's hooks from the ReplicaSet into the store and the dedup table.
  ReplicaSet::StoreHooks MakeStoreHooks();
  // The job's replication, when `caller` may make a call that names
  // pserver `as` (nullopt: none) as its sender; FAILED_PRECONDITION
  // without replication, PERMISSION_DENIED as the calls above say.
  absl::StatusOr<ReplicaSet*> ReplicasFor(const std::string& caller,
                                          std::optional<int> as,
                                          absl::string_view call) const;

  ParameterStore* const store_;
  RequestDedup* const dedup_;
  ReplicaSetFactory replica_factory_;
  mutable absl::Mutex mu_;
  std::unique_ptr<ReplicaSet> replicas_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> pservers_ ABSL_GUARDED_BY(mu_);  // the job's
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVICE_REPLICATION_HANDLER_H_
