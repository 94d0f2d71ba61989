#include "pserver/service/replication_handler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/placement/shard_map.h"
#include "glog/logging.h"
#include "pserver/replication/replicated_units.h"
#include "pserver/replication/replication_wire.h"

namespace shardps {
namespace {

// The longest pserver list and address an InitJob may carry.
constexpr size_t kMaxAddress = 256;

absl::Status NoReplication() {
  return absl::FailedPreconditionError(
      "this job has no replication here (JobSpec.replication <= 1, or the "
      "job is not initialised on this pserver)");
}

// A trainer tells of a view decided without this pserver as the primary
// of a shard it serves as primary, and this pserver cannot confirm it (it
// is cut off from the majority that decided it): it stops serving, so
// that the pulls waiting here are answered at once (UNAVAILABLE, fenced)
// rather than when a forward gives up, and rejoins once it reaches the
// others. A made-up view costs the job a rejoin, never a write.
void StepDownIfDemoted(ReplicaSet* r, const ChangeViewRequest& req,
                       const absl::Status& why) {
  absl::StatusOr<View> told = FromMessage(req.decided());
  if (!told.ok()) return;
  for (int shard : r->PrimaryShards()) {
    if (r->PrimaryOf(shard, *told) == r->self()) continue;
    r->Fence(absl::UnavailableError(absl::StrCat(
        "trainer ", req.trainer_id(), " tells of ", told->DebugString(),
        ", in which pserver ", r->self(), " is not the primary of shard ",
        shard, ", and it cannot be confirmed here (", why.message(), ")")));
    return;
  }
}

}  // namespace

ReplicaSet* ReplicationHandler::replicas() const {
  absl::MutexLock l(&mu_);
  return replicas_.get();
}

ReplicaSet::StoreHooks ReplicationHandler::MakeStoreHooks() {
  ParameterStore* store = store_;
  RequestDedup* dedup = dedup_;
  ReplicaSet::StoreHooks hooks;
  hooks.apply = [store, dedup](const std::vector<AppliedUpdate>& u,
                               const std::vector<PushRef>& pushes) {
    ReplicatedUnits units(store->state());
    RETURN_IF_ERROR(units.Apply(u));
    units.AdvanceClocks(pushes);
    // A push whose updates a backup holds: answered as a duplicate if
    // the trainer sends it here after a failover.
    for (const PushRef& p : pushes) {
      if (p.request_id == 0) continue;
      absl::Status first;
      if (dedup->Begin(p.request_id, &first) == RequestDedup::Outcome::kNew) {
        dedup->Finish(p.request_id, absl::OkStatus());
      }
    }
    return absl::OkStatus();
  };
  hooks.image_held = [store](uint32_t table, uint32_t unit) {
    return ReplicatedUnits(store->state()).ImageHeld(table, unit);
  };
  hooks.install = [store](uint32_t table, uint32_t unit,
                          const std::string& image, uint64_t generation) {
    return ReplicatedUnits(store->state())
        .Install(table, unit, image, generation);
  };
  hooks.generation = [store] { return store->generation(); };
  hooks.served_changed = [store] { store->state()->waiters.RecheckServes(); };
  return hooks;
}

absl::Status ReplicationHandler::Start(const InitJobRequest& req) {
  absl::MutexLock l(&mu_);
  // Sent again to a pserver that serves the job (the chief found it out of
  // the view): it rejoins by itself (ReplicaSet::Watch).
  if (replicas_ != nullptr) return absl::OkStatus();
  const JobSpec& job = req.job();

  if (req.pservers_size() > kMaxPservers) {
    return absl::InvalidArgumentError(absl::StrCat(
        req.pservers_size(), " pservers listed; at most ", kMaxPservers));
  }
  for (const std::string& a : req.pservers()) {
    if (a.empty() || a.size() > kMaxAddress) {
      return absl::InvalidArgumentError(absl::StrCat("a pserver address of ",
                                                     a.size(), " bytes (1 to ",
                                                     kMaxAddress, ")"));
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
  {
    ASSIGN_OR_RETURN(replicas_, replica_factory_(req));
    pservers_.assign(req.pservers().begin(), req.pservers().end());
    replicas_->set_hooks(MakeStoreHooks());
    ReplicatedUnits(store_->state()).SetForwarder(replicas_.get());
    LOG(INFO) << "replication " << job.replication() << " among "
              << req.pservers_size() << " pservers; this is pserver "
              << req.server_index() << " (" << replicas_->view().DebugString()
              << ")";
  }
  std::vector<ReplicaSet::UnitKey> units;
  for (const BlockRef& b : req.blocks()) {
    units.emplace_back(b.table_id(), b.block());
  }
  for (int t = 0; t < job.tables_size(); ++t) {
    if (job.tables(t).kind() != TableSpec::SPARSE) continue;
    for (int shard : SparseShardsOf(req)) units.emplace_back(t, shard);
  }
  replicas_->set_units(units);
  if (req.rejoin()) {
    LOG(WARNING) << "pserver " << req.server_index()
                 << " rejoins the job: " << units.size()
                 << " blocks to take from their primaries";
    replicas_->StartJoining(std::move(units));
  }
  return absl::OkStatus();
}

std::vector<int> SparseShardsOf(const InitJobRequest& req) {
  std::vector<int> shards;
  // A malformed list is refused by Start; nothing here.
  const int r = req.job().replication(), n = req.pservers_size();
  if (r <= 1 || r > n || n > kMaxPservers || req.server_index() < 0 ||
      req.server_index() >= n) {
    return shards;
  }
  for (int s = 0; s < req.pservers_size(); ++s) {
    const std::vector<int> r =
        ReplicaServers(s, req.job().replication(), req.pservers_size());
    if (std::find(r.begin(), r.end(), req.server_index()) != r.end()) {
      shards.push_back(s);
    }
  }
  return shards;
}

absl::Status ReplicationHandler::FillForRejoin(const InitJobRequest& req) {
  std::vector<std::vector<float>> zeros;
  std::vector<BlockData> blocks;
  zeros.reserve(req.blocks_size());
  for (const BlockRef& b : req.blocks()) {
    if (b.table_id() >= static_cast<uint32_t>(req.job().tables_size())) {
      return absl::InvalidArgumentError("rejoin: a block of no table");
    }
    const TableSpec& t = req.job().tables(b.table_id());
    int64_t n = 1;
    for (int64_t d : t.shape()) n *= d;
    const int64_t size = std::min<int64_t>(
        t.block_size(), n - static_cast<int64_t>(b.block()) * t.block_size());
    if (size <= 0) return absl::InvalidArgumentError("rejoin: no such block");
    zeros.emplace_back(size, 0.0f);
    blocks.push_back(BlockData{b.table_id(), b.block(), zeros.back()});
  }
  RETURN_IF_ERROR(store_->SetInitialValues(blocks));
  return store_->CommitInit();
}

void ReplicationHandler::AddStatus(GetStatusResponse* resp) const {
  ReplicaSet* r = replicas();
  if (r == nullptr) return;
  ToMessage(r->view(), resp->mutable_view());
  for (int s : r->PrimaryShards()) resp->add_primary_shards(s);
  for (int s : r->BackupShards()) resp->add_backup_shards(s);
}

absl::Status ReplicationHandler::ChangeView(const ChangeViewRequest& req,
                                            ChangeViewResponse* resp) {
  ReplicaSet* r = replicas();
  if (r == nullptr) return NoReplication();
  if (req.has_decided()) {
    ViewCommitRequest commit;
    *commit.mutable_view() = req.decided();
    absl::Status learned = r->HandleCommit(commit);
    if (absl::IsFailedPrecondition(learned)) {
      StepDownIfDemoted(r, req, learned);
    } else {
      RETURN_IF_ERROR(learned);
    }
  }
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

absl::StatusOr<ReplicaSet*> ReplicationHandler::ReplicasFor(
    const std::string& caller, std::optional<int> as,
    absl::string_view call) const {
  absl::MutexLock l(&mu_);
  const auto it = std::find(pservers_.begin(), pservers_.end(), caller);
  if (!caller.empty() && it == pservers_.end()) {
    // Before the job has replication too: the same answer either way.
    // Logged: a pserver's token in the wrong hands, or a misconfigured
    // fleet.
    const std::string what =
        absl::StrCat(call, " from pserver ", caller,
                     " (by its token), which is not one of this job's "
                     "pservers");
    LOG_EVERY_T(WARNING, 10) << "refused: " << what;
    return absl::PermissionDeniedError(what);
  }
  if (replicas_ == nullptr) return NoReplication();
  if (caller.empty()) return replicas_.get();
  if (as.has_value() && *as != it - pservers_.begin()) {
    const std::string what = absl::StrCat(
        call, " from pserver ", caller, " (by its token) as pserver ", *as,
        *as >= 0 && *as < static_cast<int>(pservers_.size())
            ? absl::StrCat(" (", pservers_[*as], ")")
            : std::string(" (none)"),
        ": a pserver sends as itself only");
    LOG_EVERY_T(WARNING, 10) << "refused: " << what;
    return absl::PermissionDeniedError(what);
  }
  return replicas_.get();
}

absl::Status ReplicationHandler::Forward(const ForwardRequest& req,
                                         ForwardResponse* resp,
                                         const std::string& caller) {
  ASSIGN_OR_RETURN(ReplicaSet * r,
                   ReplicasFor(caller, req.sender(), "Forward"));
  return r->HandleForward(req, resp);
}

absl::Status ReplicationHandler::ViewPrepare(const ViewPrepareRequest& req,
                                             ViewPrepareResponse* resp,
                                             const std::string& caller) {
  ASSIGN_OR_RETURN(ReplicaSet * r,
                   ReplicasFor(caller, req.ballot().proposer(), "ViewPrepare"));
  return r->HandlePrepare(req, resp);
}

absl::Status ReplicationHandler::ViewAccept(const ViewAcceptRequest& req,
                                            ViewAcceptResponse* resp,
                                            const std::string& caller) {
  ASSIGN_OR_RETURN(ReplicaSet * r,
                   ReplicasFor(caller, req.ballot().proposer(), "ViewAccept"));
  return r->HandleAccept(req, resp);
}

absl::Status ReplicationHandler::ViewCommit(const ViewCommitRequest& req,
                                            ViewCommitResponse* resp,
                                            const std::string& caller) {
  ASSIGN_OR_RETURN(ReplicaSet * r,
                   ReplicasFor(caller, std::nullopt, "ViewCommit"));
  return r->HandleCommit(req);
}

absl::Status ReplicationHandler::InstallUnit(const InstallUnitRequest& req,
                                             InstallUnitResponse* resp,
                                             const std::string& caller) {
  ASSIGN_OR_RETURN(ReplicaSet * r,
                   ReplicasFor(caller, req.sender(), "InstallUnit"));
  return r->HandleInstall(req);
}

absl::Status ReplicationHandler::ViewInspect(const ViewInspectRequest& req,
                                             ViewPrepareResponse* resp,
                                             const std::string& caller) {
  ASSIGN_OR_RETURN(ReplicaSet * r,
                   ReplicasFor(caller, std::nullopt, "ViewInspect"));
  return r->HandleInspect(resp);
}

}  // namespace shardps
