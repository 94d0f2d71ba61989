#include "pserver/replication/replica_set.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "common/placement/shard_map.h"
#include "glog/logging.h"
#include "pserver/replication/replication_wire.h"
#include "pserver/replication/view_state_file.h"

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

ReplicaSet::~ReplicaSet() {
  {
    absl::MutexLock l(&join_mu_);
    stop_ = true;
  }
  if (joiner_.joinable()) joiner_.join();
}

int ReplicaSet::ShardOf(uint32_t table_id, uint32_t unit) const {
  const uint64_t base =
      table_id < shard_base_.size() ? shard_base_[table_id] : 0;
  if (base == kSparseTable) return static_cast<int>(unit);
  return DenseBlockServer(base, unit, options_.num_servers);
}

View ReplicaSet::view() const {
  absl::MutexLock l(&mu_);
  return acceptor_.state().committed;
}

int ReplicaSet::PrimaryOf(int shard, const View& v) const {
  if (static_cast<size_t>(shard) < v.primaries.size()) {
    return v.primaries[shard];
  }
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
  if (!v.Serves(options_.self)) return out;
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
  return ProposeView(peers, options_.self, change, options_.max_view_rounds);
}

absl::StatusOr<View> ReplicaSet::ChangeView(const std::vector<int>& remove,
                                            const std::vector<int>& join,
                                            const std::vector<int>& promote) {
  for (const std::vector<int>* list : {&remove, &join, &promote}) {
    for (int s : *list) {
      if (s < 0 || s >= options_.num_servers) {
        return absl::InvalidArgumentError(
            absl::StrCat("no pserver ", s, " among ", options_.num_servers));
      }
    }
  }
  if (remove.empty() && join.empty() && promote.empty()) return view();
  auto drop = [](std::vector<int>* list, int s) {
    list->erase(std::remove(list->begin(), list->end(), s), list->end());
  };
  ViewChange change = [this, remove, join, promote,
                       drop](const View& cur) -> std::optional<View> {
    View next = cur;
    next.primaries.clear();
    for (int s : remove) {
      drop(&next.members, s);
      drop(&next.joining, s);
    }
    for (int s : join) {  // a member that lost its state joins again
      drop(&next.members, s);
      if (!next.Serves(s)) next.joining.push_back(s);
    }
    for (int s : promote) {
      if (std::find(next.joining.begin(), next.joining.end(), s) ==
          next.joining.end()) {
        continue;
      }
      drop(&next.joining, s);
      next.members.push_back(s);
    }
    std::sort(next.members.begin(), next.members.end());
    std::sort(next.joining.begin(), next.joining.end());
    // Primaries stay while they are members; else the first member replica.
    for (int shard = 0; shard < options_.num_servers; ++shard) {
      const int p = PrimaryOf(shard, cur);
      int chosen = -1;
      if (p >= 0 && next.Has(p)) {
        chosen = p;
      } else {
        for (int r : ReplicaServers(shard, options_.replication,
                                    options_.num_servers)) {
          if (next.Has(r)) {
            chosen = r;
            break;
          }
        }
      }
      next.primaries.push_back(chosen);
    }
    if (next.members == cur.members && next.joining == cur.joining) {
      return std::nullopt;
    }
    next.number = cur.number + 1;
    return next;
  };
  absl::StatusOr<View> v = Propose(change);
  if (v.ok()) {
    LOG(WARNING) << "pserver " << options_.self << ": the pservers agreed "
                 << v->DebugString() << " (without {"
                 << absl::StrJoin(remove, ",") << "}, joining {"
                 << absl::StrJoin(join, ",") << "}, promoted {"
                 << absl::StrJoin(promote, ",") << "})";
  }
  return v;
}

absl::Status ReplicaSet::Forward(const std::vector<AppliedUpdate>& updates,
                                 const std::vector<PushRef>& pushes) {
  if (updates.empty()) return absl::OkStatus();
  const absl::Time give_up = absl::Now() + options_.max_forward_wait;
  absl::Status last;
  while (true) {
    {
      absl::MutexLock l(&join_mu_);
      if (stop_) return absl::UnavailableError("pserver is shutting down");
    }
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

absl::Status ReplicaSet::InstallOn(int b, const View& v,
                                   const ForwardResponse& asked) {
  if (!hooks_.image_held) return absl::InternalError("no store hooks");
  for (const UnitRef& u : asked.need_install()) {
    ASSIGN_OR_RETURN(std::string blob,
                     hooks_.image_held(u.table_id(), u.unit()));
    InstallUnitRequest req;
    ToMessage(v, req.mutable_view());
    req.set_sender(options_.self);
    req.set_table_id(u.table_id());
    req.set_unit(u.unit());
    req.set_blob(std::move(blob));
    req.set_generation(hooks_.generation ? hooks_.generation() : 0);
    RETURN_IF_ERROR(peers_[b]->Install(req));
  }
  LOG(INFO) << "pserver " << options_.self << ": installed "
            << asked.need_install_size() << " unit(s) on joining pserver " << b;
  return absl::OkStatus();
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
      if (b == options_.self || !v.Serves(b)) continue;
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
    absl::Status s = r.status();
    if (r.ok() && r->need_install_size() > 0) {  // a joining backup
      s = InstallOn(b, v, *r);
      if (s.ok()) return s;
    } else if (r.ok()) {  // the backup knows a newer view
      absl::StatusOr<View> newer = FromMessage(r->view());
      if (!newer.ok()) return newer.status();
      Learn(*newer);
      return absl::OkStatus();
    }
    if (!absl::IsUnavailable(s) && !absl::IsDeadlineExceeded(s)) {
      // It answered and refused them: it does not hold what we hold.
      LOG(ERROR) << "pserver " << options_.self << ": backup pserver " << b
                 << " refused forwarded updates: " << s
                 << "; taking it out of the view";
    } else {
      LOG(WARNING) << "pserver " << options_.self << ": backup pserver " << b
                   << " did not answer (" << s
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
    if (PrimaryOf(shard, mine) != req.sender() || !mine.Serves(options_.self)) {
      resp->set_applied(false);
      ToMessage(mine, resp->mutable_view());
      return absl::OkStatus();
    }
    updates.push_back(std::move(u));
  }
  {
    absl::MutexLock l(&join_mu_);
    if (joining_) {
      absl::flat_hash_set<UnitKey> asked;
      for (const AppliedUpdate& u : updates) {
        const UnitKey key(u.table_id, u.block);
        if (!installed_.contains(key) && asked.insert(key).second) {
          UnitRef* ref = resp->add_need_install();
          ref->set_table_id(u.table_id);
          ref->set_unit(u.block);
        }
      }
      if (resp->need_install_size() > 0) {
        resp->set_applied(false);
        return absl::OkStatus();
      }
    }
  }
  std::vector<PushRef> pushes;
  for (const auto& p : req.pushes()) {
    pushes.push_back(PushRef{p.trainer_id(), p.request_id(), p.step()});
  }
  if (!hooks_.apply)
    return absl::FailedPreconditionError("the job is not ready");
  RETURN_IF_ERROR(hooks_.apply(updates, pushes));
  resp->set_applied(true);
  return absl::OkStatus();
}

absl::Status ReplicaSet::HandleInstall(const InstallUnitRequest& req) {
  ASSIGN_OR_RETURN(const View theirs, FromMessage(req.view()));
  Learn(theirs);
  const View mine = view();
  const int shard = ShardOf(req.table_id(), req.unit());
  if (PrimaryOf(shard, mine) != req.sender()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "install of table id ", req.table_id(), " unit ", req.unit(),
        " from pserver ", req.sender(), ": ", NotPrimary(shard, mine)));
  }
  if (!hooks_.install) return absl::FailedPreconditionError("not ready");
  RETURN_IF_ERROR(
      hooks_.install(req.table_id(), req.unit(), req.blob(), req.generation()));
  absl::MutexLock l(&join_mu_);
  installed_.insert(UnitKey(req.table_id(), req.unit()));
  return absl::OkStatus();
}

void ReplicaSet::StartJoining(std::vector<UnitKey> units) {
  absl::MutexLock l(&join_mu_);
  if (joining_) return;
  joining_ = true;
  expected_.insert(units.begin(), units.end());
  installed_.clear();
  joiner_ = std::thread([this] { JoinLoop(); });
}

void ReplicaSet::Stop() {
  absl::MutexLock l(&join_mu_);
  stop_ = true;
}

std::pair<size_t, size_t> ReplicaSet::JoinProgress() const {
  absl::MutexLock l(&join_mu_);
  return {installed_.size(), expected_.size()};
}

void ReplicaSet::JoinLoop() {
  const int self = options_.self;
  auto stopped = [this] {
    absl::MutexLock l(&join_mu_);
    return stop_;
  };
  const absl::Time start = absl::Now();
  // 1. A view in which this pserver is joining.
  while (!stopped()) {
    absl::StatusOr<View> v = ChangeView({}, {self});
    if (v.ok() && v->Serves(self)) break;
    LOG_EVERY_N(WARNING, 10)
        << "pserver " << self << ": rejoining: "
        << (v.ok() ? v->DebugString() : v.status().ToString());
    absl::SleepFor(absl::Milliseconds(200));
  }
  // 2. Every unit installed by its primary (on its next update).
  absl::Time last_log = absl::Now();
  while (!stopped()) {
    const auto [done, of] = JoinProgress();
    if (done >= of) break;
    if (absl::Now() - last_log > absl::Seconds(5)) {
      last_log = absl::Now();
      LOG(INFO) << "pserver " << self << ": catching up, " << done << " of "
                << of << " units installed";
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  // 3. A member again.
  while (!stopped()) {
    absl::StatusOr<View> v = ChangeView({}, {}, {self});
    if (v.ok() && v->Has(self)) {
      absl::MutexLock l(&join_mu_);
      joining_ = false;
      LOG(WARNING) << "pserver " << self << ": caught up in "
                   << absl::FormatDuration(absl::Now() - start)
                   << "; a full backup again in " << v->DebugString();
      return;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
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
