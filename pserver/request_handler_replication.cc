// RequestHandler: the calls of replicated jobs (docs/replication.md).
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "pserver/replication_wire.h"
#include "pserver/request_handler.h"

namespace shardps {
namespace {

absl::Status NoReplication() {
  return absl::FailedPreconditionError(
      "this job has no replication here (JobSpec.replication <= 1, or the "
      "job is not initialised on this pserver)");
}

}  // namespace

ReplicaSet* RequestHandler::replicas() const {
  absl::MutexLock l(&replica_mu_);
  return replicas_.get();
}

absl::Status RequestHandler::StartReplication(const InitJobRequest& req) {
  absl::MutexLock l(&replica_mu_);
  if (replicas_ != nullptr) return absl::OkStatus();
  const JobSpec& job = req.job();
  for (const TableSpec& t : job.tables()) {
    if (t.kind() == TableSpec::SPARSE) {
      return absl::UnimplementedError(absl::StrCat(
          "replication of sparse tables (table ", t.name(),
          ") is not built yet; run this job with --replication=1"));
    }
  }
  if (job.replication() > req.pservers_size() || req.server_index() < 0 ||
      req.server_index() >= req.pservers_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replication ", job.replication(), " with ", req.pservers_size(),
        " pservers listed and this one at index ", req.server_index(),
        ": need replication <= pservers and an index among them"));
  }
  if (!replica_factory_) {
    return absl::FailedPreconditionError(
        "this pserver cannot reach other pservers (in-process): no "
        "replication");
  }
  ASSIGN_OR_RETURN(replicas_, replica_factory_(req));
  ParameterStore* store = store_;
  RequestDedup* dedup = &dedup_;
  replicas_->set_applier([store, dedup](const std::vector<AppliedUpdate>& u,
                                        const std::vector<PushRef>& pushes) {
    RETURN_IF_ERROR(store->ApplyReplicated(u));
    store->ReplicatedPushes(pushes);
    // A push whose updates a backup holds: answered as a duplicate if the
    // trainer sends it here after a failover.
    for (const PushRef& p : pushes) {
      if (p.request_id == 0) continue;
      absl::Status first;
      if (dedup->Begin(p.request_id, &first) == RequestDedup::Outcome::kNew) {
        dedup->Finish(p.request_id, absl::OkStatus());
      }
    }
    return absl::OkStatus();
  });
  store_->set_forwarder(replicas_.get());
  LOG(INFO) << "replication " << job.replication() << " among "
            << req.pservers_size() << " pservers; this is pserver "
            << req.server_index() << " (" << replicas_->view().DebugString()
            << ")";
  return absl::OkStatus();
}

void RequestHandler::AddReplicationStatus(GetStatusResponse* resp) const {
  ReplicaSet* r = replicas();
  if (r == nullptr) return;
  ToMessage(r->view(), resp->mutable_view());
  for (int s : r->PrimaryShards()) resp->add_primary_shards(s);
  for (int s : r->BackupShards()) resp->add_backup_shards(s);
}

absl::Status RequestHandler::ChangeView(const ChangeViewRequest& req,
                                        ChangeViewResponse* resp) {
  ReplicaSet* r = replicas();
  if (r == nullptr) return NoReplication();
  std::vector<int> remove(req.remove().begin(), req.remove().end());
  std::vector<int> add(req.add().begin(), req.add().end());
  if (!remove.empty() || !add.empty()) {
    LOG(WARNING) << "trainer " << req.trainer_id() << " asks for a view with "
                 << add.size() << " pservers added and " << remove.size()
                 << " removed";
  }
  ASSIGN_OR_RETURN(const View v, r->ChangeView(remove, add));
  ToMessage(v, resp->mutable_view());
  return absl::OkStatus();
}

absl::Status RequestHandler::Forward(const ForwardRequest& req,
                                     ForwardResponse* resp) {
  ReplicaSet* r = replicas();
  if (r == nullptr) return NoReplication();
  return r->HandleForward(req, resp);
}

absl::Status RequestHandler::ViewPrepare(const ViewPrepareRequest& req,
                                         ViewPrepareResponse* resp) {
  ReplicaSet* r = replicas();
  if (r == nullptr) return NoReplication();
  return r->HandlePrepare(req, resp);
}

absl::Status RequestHandler::ViewAccept(const ViewAcceptRequest& req,
                                        ViewAcceptResponse* resp) {
  ReplicaSet* r = replicas();
  if (r == nullptr) return NoReplication();
  return r->HandleAccept(req, resp);
}

absl::Status RequestHandler::ViewCommit(const ViewCommitRequest& req,
                                        ViewCommitResponse* resp) {
  ReplicaSet* r = replicas();
  if (r == nullptr) return NoReplication();
  return r->HandleCommit(req);
}

}  // namespace shardps
