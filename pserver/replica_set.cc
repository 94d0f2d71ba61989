#include "pserver/replica_set.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "common/shard_map.h"
#include "glog/logging.h"
#include "pserver/replication_wire.h"
#include "pserver/view_state_file.h"

namespace shardps {

// The acceptor of this pserver, as ProposeView reaches every pserver.
class ReplicaSet::LocalPeer : public ViewPeer {
 public:
  explicit LocalPeer(ReplicaSet* set) : set_(set) {}
  absl::StatusOr<ViewAcceptor::PrepareReply> Prepare(
      int64_t number, const Ballot& ballot) override {
    ViewPrepareRequest req;
    req.set_number(number);
    ToMessage(ballot, req.mutable_ballot());
    ViewPrepareResponse resp;
    RETURN_IF_ERROR(set_->HandlePrepare(req, &resp));
    return FromMessage(resp);
  }
  absl::StatusOr<bool> Accept(int64_t number, const Ballot& ballot,
                              const View& view) override {
    ViewAcceptRequest req;
    req.set_number(number);
    ToMessage(ballot, req.mutable_ballot());
    ToMessage(view, req.mutable_view());
    ViewAcceptResponse resp;
    RETURN_IF_ERROR(set_->HandleAccept(req, &resp));
    return resp.accepted();
  }
  absl::Status Commit(const View& view) override {
    ViewCommitRequest req;
    ToMessage(view, req.mutable_view());
    return set_->HandleCommit(req);
  }

 private:
  ReplicaSet* const set_;
};

absl::StatusOr<std::unique_ptr<ReplicaSet>> ReplicaSet::Create(
    ReplicaSetOptions options, std::vector<uint64_t> shard_base,
    std::vector<std::unique_ptr<ReplicaPeer>> peers) {
  const int p = options.num_servers;
  if (p < 1 || options.replication < 1 || options.replication > p ||
      options.self < 0 || options.self >= p ||
      static_cast<int>(peers.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replication ", options.replication, " of ", p,
        " pservers with this pserver at index ", options.self, " and ",
        peers.size(), " peers: need 1 <= replication <= pservers"));
  }
  Env* env = options.env != nullptr ? options.env : Env::Default();
  AcceptorState state;
  for (int i = 0; i < p; ++i) state.committed.members.push_back(i);
  if (!options.state_path.empty()) {
    absl::StatusOr<AcceptorState> loaded =
        LoadAcceptorState(env, options.state_path);
    if (loaded.ok()) {
      state = *std::move(loaded);
      LOG(INFO) << "pserver " << options.self << ": replication state "
                << options.state_path << ": " << state.committed.DebugString();
    } else if (!absl::IsNotFound(loaded.status())) {
      return loaded.status();
    }
  }
  return std::unique_ptr<ReplicaSet>(new ReplicaSet(
      std::move(options), std::move(shard_base), std::move(peers), state));
}

ReplicaSet::ReplicaSet(ReplicaSetOptions options,
                       std::vector<uint64_t> shard_base,
                       std::vector<std::unique_ptr<ReplicaPeer>> peers,
                       AcceptorState state)
    : options_(std::move(options)),
      env_(options_.env != nullptr ? options_.env : Env::Default()),
      shard_base_(std::move(shard_base)),
      peers_(std::move(peers)),
      local_(std::make_unique<LocalPeer>(this)),
      acceptor_(std::move(state)) {}

ReplicaSet::~ReplicaSet() = default;

int ReplicaSet::ShardOf(uint32_t table_id, uint32_t unit) const {
  const uint64_t base =
      table_id < shard_base_.size() ? shard_base_[table_id] : 0;
  return DenseBlockServer(base, unit, options_.num_servers);
}

View ReplicaSet::view() const {
  absl::MutexLock l(&mu_);
  return acceptor_.state().committed;
}

int ReplicaSet::PrimaryOf(int shard, const View& v) const {
  return PrimaryServer(shard, options_.replication, options_.num_servers,
                       v.members);
}

std::vector<int> ReplicaSet::PrimaryShards() const {
  const View v = view();
  std::vector<int> out;
  for (int s = 0; s < options_.num_servers; ++s) {
    if (PrimaryOf(s, v) == options_.self) out.push_back(s);
  }
  return out;
}

std::vector<int> ReplicaSet::BackupShards() const {
  const View v = view();
  std::vector<int> out;
  if (!v.Has(options_.self)) return out;
  for (int s = 0; s < options_.num_servers; ++s) {
    const std::vector<int> r =
        ReplicaServers(s, options_.replication, options_.num_servers);
    if (PrimaryOf(s, v) != options_.self &&
        std::find(r.begin(), r.end(), options_.self) != r.end()) {
      out.push_back(s);
    }
  }
  return out;
}

std::string ReplicaSet::NotPrimary(int shard, const View& v) const {
  const int primary = PrimaryOf(shard, v);
  return absl::StrCat(
      "pserver ", options_.self, " is not the primary of shard ", shard, " in ",
      v.DebugString(),
      primary < 0 ? std::string(" (the shard has no live replica)")
                  : absl::StrCat(" (its primary is pserver ", primary, ")"));
}

absl::Status ReplicaSet::CheckServes(uint32_t table_id, uint32_t unit) const {
  const int shard = ShardOf(table_id, unit);
  const View v = view();
  if (PrimaryOf(shard, v) == options_.self) return absl::OkStatus();
  return absl::FailedPreconditionError(NotPrimary(shard, v));
}

void ReplicaSet::Learn(const View& v) {
  absl::MutexLock l(&mu_);
  if (v.number <= acceptor_.state().committed.number) return;
  LOG(INFO) << "pserver " << options_.self << ": learned " << v.DebugString();
  acceptor_.Commit(v);
  absl::Status s = SaveLocked();
  if (!s.ok()) LOG(ERROR) << "saving the replication state: " << s;
}

absl::Status ReplicaSet::SaveLocked() {
  if (options_.state_path.empty()) return absl::OkStatus();
  return SaveAcceptorState(env_, options_.state_path, acceptor_.state());
}

absl::StatusOr<View> ReplicaSet::Propose(const ViewChange& change) {
  absl::MutexLock p(&propose_mu_);
  std::vector<ViewPeer*> peers;
  for (int i = 0; i < options_.num_servers; ++i) {
    peers.push_back(i == options_.self ? static_cast<ViewPeer*>(local_.get())
                                       : peers_[i].get());
  }
  return ProposeView(peers, options_.self, change);
}

absl::StatusOr<View> ReplicaSet::ChangeView(const std::vector<int>& remove,
                                            const std::vector<int>& add) {
  for (int s : remove) {
    if (s < 0 || s >= options_.num_servers) {
      return absl::InvalidArgumentError(
          absl::StrCat("no pserver ", s, " among ", options_.num_servers));
    }
  }
  for (int s : add) {
    if (s < 0 || s >= options_.num_servers) {
      return absl::InvalidArgumentError(
          absl::StrCat("no pserver ", s, " among ", options_.num_servers));
    }
  }
  if (remove.empty() && add.empty()) return view();
  ViewChange change = [remove, add](const View& cur) -> std::optional<View> {
    View next = cur;
    for (int s : remove) {
      next.members.erase(
          std::remove(next.members.begin(), next.members.end(), s),
          next.members.end());
    }
    for (int s : add) {
      if (!next.Has(s)) next.members.push_back(s);
    }
    std::sort(next.members.begin(), next.members.end());
    if (next.members == cur.members) return std::nullopt;
    next.number = cur.number + 1;
    return next;
  };
  absl::StatusOr<View> v = Propose(change);
  if (v.ok()) {
    LOG(WARNING) << "pserver " << options_.self << ": the pservers agreed "
                 << v->DebugString() << " (without {"
                 << absl::StrJoin(remove, ",") << "}, with {"
                 << absl::StrJoin(add, ",") << "})";
  }
  return v;
}

absl::Status ReplicaSet::Forward(const std::vector<AppliedUpdate>& updates,
                                 const std::vector<PushRef>& pushes) {
  if (updates.empty()) return absl::OkStatus();
  const absl::Time give_up = absl::Now() + options_.max_forward_wait;
  absl::Status last;
  while (true) {
    bool retry = false;
    last = ForwardOnce(view(), updates, pushes, &retry);
    if (last.ok() && !retry) return last;
    if (absl::IsFailedPrecondition(last)) return last;
    if (absl::Now() > give_up) {
      return absl::UnavailableError(absl::StrCat(
          "pserver ", options_.self, " could not reach the backups of ",
          updates.size(), " updates or agree a view without them for ",
          absl::FormatDuration(options_.max_forward_wait), ": ",
          last.ToString()));
    }
    if (!last.ok()) {
      LOG_EVERY_N(WARNING, 50)
          << "pserver " << options_.self << ": forwarding updates: " << last;
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
}

absl::Status ReplicaSet::ForwardOnce(const View& v,
                                     const std::vector<AppliedUpdate>& updates,
                                     const std::vector<PushRef>& pushes,
                                     bool* retry) {
  std::map<int, ForwardRequest> to;  // per backup
  for (const AppliedUpdate& u : updates) {
    const int shard = ShardOf(u.table_id, u.block);
    if (PrimaryOf(shard, v) != options_.self) {
      return absl::FailedPreconditionError(NotPrimary(shard, v));
    }
    for (int b :
         ReplicaServers(shard, options_.replication, options_.num_servers)) {
      if (b == options_.self || !v.Has(b)) continue;
      ToMessage(u, to[b].add_updates());
    }
  }
  for (auto& [b, req] : to) {
    ToMessage(v, req.mutable_view());
    req.set_sender(options_.self);
    for (const PushRef& p : pushes) {
      auto* ref = req.add_pushes();
      ref->set_trainer_id(p.trainer_id);
      ref->set_request_id(p.request_id);
      ref->set_step(p.step);
    }
    absl::StatusOr<ForwardResponse> r = peers_[b]->Forward(req);
    if (r.ok() && r->applied()) continue;
    *retry = true;
    if (r.ok()) {  // the backup knows a newer view
      absl::StatusOr<View> newer = FromMessage(r->view());
      if (!newer.ok()) return newer.status();
      Learn(*newer);
      return absl::OkStatus();
    }
    if (!absl::IsUnavailable(r.status()) &&
        !absl::IsDeadlineExceeded(r.status())) {
      // It answered and refused them: it does not hold what we hold.
      LOG(ERROR) << "pserver " << options_.self << ": backup pserver " << b
                 << " refused forwarded updates: " << r.status()
                 << "; taking it out of the view";
    } else {
      LOG(WARNING) << "pserver " << options_.self << ": backup pserver " << b
                   << " did not answer (" << r.status()
                   << "); proposing a view without it";
    }
    absl::StatusOr<View> next = ChangeView({b}, {});
    return next.ok() ? absl::OkStatus() : next.status();
  }
  return absl::OkStatus();
}

absl::Status ReplicaSet::HandleForward(const ForwardRequest& req,
                                       ForwardResponse* resp) {
  ASSIGN_OR_RETURN(const View theirs, FromMessage(req.view()));
  Learn(theirs);
  const View mine = view();
  std::vector<AppliedUpdate> updates;
  updates.reserve(req.updates_size());
  for (const ReplicatedUpdate& m : req.updates()) {
    ASSIGN_OR_RETURN(AppliedUpdate u, FromMessage(m));
    const int shard = ShardOf(u.table_id, u.block);
    if (PrimaryOf(shard, mine) != req.sender() || !mine.Has(options_.self)) {
      resp->set_applied(false);
      ToMessage(mine, resp->mutable_view());
      return absl::OkStatus();
    }
    updates.push_back(std::move(u));
  }
  std::vector<PushRef> pushes;
  for (const auto& p : req.pushes()) {
    pushes.push_back(PushRef{p.trainer_id(), p.request_id(), p.step()});
  }
  if (!applier_) return absl::FailedPreconditionError("the job is not ready");
  RETURN_IF_ERROR(applier_(updates, pushes));
  resp->set_applied(true);
  return absl::OkStatus();
}

absl::Status ReplicaSet::HandlePrepare(const ViewPrepareRequest& req,
                                       ViewPrepareResponse* resp) {
  absl::MutexLock l(&mu_);
  ViewAcceptor::PrepareReply r =
      acceptor_.Prepare(req.number(), FromMessage(req.ballot()));
  if (r.promised) RETURN_IF_ERROR(SaveLocked());
  ToMessage(r, resp);
  return absl::OkStatus();
}

absl::Status ReplicaSet::HandleAccept(const ViewAcceptRequest& req,
                                      ViewAcceptResponse* resp) {
  ASSIGN_OR_RETURN(const View v, FromMessage(req.view()));
  absl::MutexLock l(&mu_);
  const bool ok = acceptor_.Accept(req.number(), FromMessage(req.ballot()), v);
  if (ok) RETURN_IF_ERROR(SaveLocked());
  resp->set_accepted(ok);
  return absl::OkStatus();
}

absl::Status ReplicaSet::HandleCommit(const ViewCommitRequest& req) {
  ASSIGN_OR_RETURN(const View v, FromMessage(req.view()));
  Learn(v);
  return absl::OkStatus();
}

}  // namespace shardps
