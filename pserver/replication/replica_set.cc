#include "pserver/replication/replica_set.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "common/placement/shard_map.h"
#include "common/transport/peer_silence.h"
#include "glog/logging.h"
#include "pserver/replication/replication_wire.h"
#include "pserver/replication/view_change.h"

namespace shardps {
namespace {}  // namespace

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
  if (options.lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a pserver lease of ", absl::FormatDuration(options.lease),
                     ": it must be positive"));
  }
  options.max_forward_wait =
      std::max(options.max_forward_wait, 2 * options.lease);
  ViewKeeper::Options k;
  k.self = options.self;
  k.num_servers = p;
  k.state_path = options.state_path;
  k.env = options.env;
  k.max_view_rounds = options.max_view_rounds;
  std::vector<ViewPeer*> others;
  for (const auto& peer : peers) others.push_back(peer.get());
  ASSIGN_OR_RETURN(std::unique_ptr<ViewKeeper> keeper,
                   ViewKeeper::Create(std::move(k), std::move(others)));
  return std::unique_ptr<ReplicaSet>(
      new ReplicaSet(std::move(options), std::move(shard_base),
                     std::move(peers), std::move(keeper)));
}

ReplicaSet::ReplicaSet(ReplicaSetOptions options,
                       std::vector<uint64_t> shard_base,
                       std::vector<std::unique_ptr<ReplicaPeer>> peers,
                       std::unique_ptr<ViewKeeper> keeper)
    : options_(std::move(options)),
      shard_base_(std::move(shard_base)),
      peers_(std::move(peers)),
      keeper_(std::move(keeper)) {
  keeper_->set_on_change([this] {
    if (hooks_.served_changed) hooks_.served_changed();
  });
}

ReplicaSet::~ReplicaSet() { Shutdown(); }

void ReplicaSet::Shutdown() {
  Stop();
  if (watcher_.joinable()) watcher_.join();
  // The watcher may have started a joiner: joined after it.
  std::thread joiner;
  {
    absl::MutexLock l(&join_mu_);
    joiner = std::move(joiner_);
  }
  if (joiner.joinable()) joiner.join();
}

int ReplicaSet::ShardOf(uint32_t table_id, uint32_t unit) const {
  const uint64_t base =
      table_id < shard_base_.size() ? shard_base_[table_id] : 0;
  if (base == kSparseTable) return static_cast<int>(unit);
  return DenseBlockServer(base, unit, options_.num_servers);
}

View ReplicaSet::view() const { return keeper_->view(); }

int ReplicaSet::PrimaryOf(int shard, const View& v) const {
  return PrimaryIn(
      v, shard,
      ReplicaLayout{options_.self, options_.num_servers, options_.replication});
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
  std::string why;
  const std::optional<View> v = keeper_->ServingView(&why);
  if (!v.has_value()) {
    return absl::UnavailableError(
        absl::StrCat("pserver ", options_.self, " is fenced (", why,
                     "): it serves no shard until it has rejoined; shard ",
                     shard, " is served by its backup"));
  }
  if (PrimaryOf(shard, *v) == options_.self) return absl::OkStatus();
  return absl::FailedPreconditionError(NotPrimary(shard, *v));
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
  const MembershipChange asked{remove, join, promote};
  const ReplicaLayout layout{options_.self, options_.num_servers,
                             options_.replication};
  // Why the change was refused, for the view it was last tried on.
  auto refusal = std::make_shared<absl::Status>();
  ViewChange change = [asked, layout,
                       refusal](const View& cur) -> std::optional<View> {
    absl::StatusOr<std::optional<View>> next = NextView(cur, asked, layout);
    *refusal = next.status();
    return next.ok() ? *next : std::nullopt;
  };
  absl::StatusOr<View> v = keeper_->Propose(change);
  if (v.ok() && !refusal->ok()) return *refusal;
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
  const absl::Time start = absl::Now();
  const absl::Time give_up = start + options_.max_forward_wait;
  std::map<int, absl::Time> silent_since;
  absl::Time last_log = start;
  absl::Duration backoff = absl::Milliseconds(20);
  absl::Status last;
  while (true) {
    {
      absl::MutexLock l(&join_mu_);
      if (stop_) return absl::UnavailableError("pserver is shutting down");
    }
    if (fenced()) {
      return absl::UnavailableError(absl::StrCat("pserver ", options_.self,
                                                 " is fenced: not forwarding"));
    }
    bool retry = false;
    last = ForwardOnce(view(), updates, pushes, &silent_since, &retry);
    if (last.ok() && !retry) {
      LOG_IF(WARNING, absl::Now() - start > absl::Seconds(1))
          << "pserver " << options_.self << ": " << updates.size()
          << " update(s) reached the backups after "
          << absl::FormatDuration(absl::Now() - start);
      return last;
    }
    if (absl::IsFailedPrecondition(last)) {
      // No primary any more (a newer view): the update stays invisible.
      Fence(absl::FailedPreconditionError(absl::StrCat(
          "an update applied here may be on no backup: ", last.message())));
      return last;
    }
    if (absl::Now() > give_up) {
      absl::Status s = absl::UnavailableError(absl::StrCat(
          "pserver ", options_.self, " could not reach the backups of ",
          updates.size(), " updates or agree a view without them for ",
          absl::FormatDuration(options_.max_forward_wait), ": ",
          last.ToString()));
      Fence(absl::UnavailableError(absl::StrCat(
          "an update applied here may be on no backup: ", s.message())));
      return s;
    }
    if (!last.ok()) {
      if (absl::Now() - last_log >= absl::Seconds(2)) {
        last_log = absl::Now();
        LOG(WARNING) << "pserver " << options_.self << ": forwarding "
                     << updates.size() << " update(s) for "
                     << absl::FormatDuration(absl::Now() - start) << " (lease "
                     << absl::FormatDuration(options_.lease) << "): " << last;
      }
      // A refused connection is looked at again soon: it is taken out
      // after gone_after, not the lease.
      absl::SleepFor(IsRefusedConnection(last)
                         ? std::min(backoff, absl::Milliseconds(50))
                         : backoff);
      backoff = std::min(backoff * 2, absl::Milliseconds(500));
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

namespace {

// Sets the view `v`, the sender `self` and the trainers' `pushes` of a
// forward request (its updates are the backup's own).
void FillForwardRequest(const View& v, int self,
                        const std::vector<PushRef>& pushes,
                        ForwardRequest* req) {
  ToMessage(v, req->mutable_view());
  req->set_sender(self);
  for (const PushRef& p : pushes) {
    auto* ref = req->add_pushes();
    ref->set_trainer_id(p.trainer_id);
    ref->set_request_id(p.request_id);
    ref->set_step(p.step);
  }
}

// Backup `b` left a forward unanswered (`s`): UNAVAILABLE while it has
// been silent (from *silent_since) for less than the lease, or than
// --gone_after when its host refuses connections, for the forward to try
// again; OK, logged, once it is to be taken out of the view.
absl::Status CheckBackupSilence(const ReplicaSetOptions& options, int b,
                                const absl::Status& s,
                                std::map<int, absl::Time>* silent_since) {
  const absl::Time now = absl::Now();
  // A connection dropped by its keepalive was silent for the lease.
  const absl::Time since =
      silent_since
          ->emplace(b, IsSilentForTheLease(s) ? now - options.lease : now)
          .first->second;
  // A host that refuses connections has no process to wait for.
  const absl::Duration wait = IsRefusedConnection(s)
                                  ? std::min(options.gone_after, options.lease)
                                  : options.lease;
  if (now - since < wait) {
    // Slow or cut off for now: sent again until the lease runs out.
    return absl::UnavailableError(
        absl::StrCat("backup pserver ", b, " has not answered for ",
                     absl::FormatDuration(now - since), ": ", s.message()));
  }
  LOG(WARNING) << "pserver " << options.self << ": backup pserver " << b
               << " has not answered for " << absl::FormatDuration(now - since)
               << " (lease " << absl::FormatDuration(options.lease) << ", "
               << absl::FormatDuration(wait) << " when refused; " << s
               << "); proposing a view without it";
  return absl::OkStatus();
}

}  // namespace

absl::Status ReplicaSet::ForwardOnce(const View& v,
                                     const std::vector<AppliedUpdate>& updates,
                                     const std::vector<PushRef>& pushes,
                                     std::map<int, absl::Time>* silent_since,
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
    FillForwardRequest(v, options_.self, pushes, &req);
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
      keeper_->Learn(*newer).IgnoreError();  // logged
      return absl::OkStatus();
    }
    if (!absl::IsUnavailable(s) && !absl::IsDeadlineExceeded(s)) {
      // It answered and refused them: it does not hold what we hold.
      LOG(ERROR) << "pserver " << options_.self << ": backup pserver " << b
                 << " refused forwarded updates: " << s
                 << "; taking it out of the view";
    } else {
      RETURN_IF_ERROR(CheckBackupSilence(options_, b, s, silent_since));
    }
    absl::StatusOr<View> next = ChangeView({b}, {});
    if (next.ok()) return absl::OkStatus();
    // Not agreed (no majority: maybe this pserver is the one cut off) or
    // refused: tried again, in the newest view, until the forward gives up.
    return absl::UnavailableError(absl::StrCat(
        "taking backup pserver ", b, " out: ", next.status().message()));
  }
  return absl::OkStatus();
}

absl::Status ReplicaSet::HandleForward(const ForwardRequest& req,
                                       ForwardResponse* resp) {
  ASSIGN_OR_RETURN(const View theirs, FromMessage(req.view()));
  keeper_->Learn(theirs).IgnoreError();  // logged; refused below if behind
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
  keeper_->Learn(theirs).IgnoreError();  // logged; refused below if behind
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

void ReplicaSet::set_units(std::vector<UnitKey> units) {
  absl::MutexLock l(&join_mu_);
  units_ = std::move(units);
  // Started here, after set_hooks: the watch may learn a view and call
  // them.
  if (options_.watch_every > absl::ZeroDuration() && !watcher_.joinable()) {
    watcher_ = std::thread([this] { WatchLoop(); });
  }
}

void ReplicaSet::StartJoining(std::vector<UnitKey> units) {
  std::thread done;  // a join loop that ended before, joined outside the lock
  {
    absl::MutexLock l(&join_mu_);
    if (joining_ || stop_) return;
    joining_ = true;
    expected_.clear();
    expected_.insert(units.begin(), units.end());
    installed_.clear();
    done = std::move(joiner_);
  }
  if (done.joinable()) done.join();
  absl::MutexLock l(&join_mu_);
  joiner_ = std::thread([this] { JoinLoop(); });
}

void ReplicaSet::Stop() {
  absl::MutexLock l(&join_mu_);
  stop_ = true;
  stop_cv_.SignalAll();
}

void ReplicaSet::Watch() {
  keeper_->LearnDecided(view().number, nullptr).IgnoreError();
  const View v = view();
  std::vector<UnitKey> units;
  {
    absl::MutexLock l(&join_mu_);
    if (joining_ || stop_ || units_.empty()) return;
    units = units_;
  }
  const bool fenced_now = fenced();
  if (v.Has(options_.self) && !fenced_now) return;
  LOG(WARNING) << "pserver " << options_.self << ": "
               << (fenced_now ? "fenced" : "not a member of ")
               << (fenced_now ? std::string() : v.DebugString())
               << "; rejoining as a backup (" << units.size()
               << " units to take from their primaries)";
  StartJoining(std::move(units));
}

void ReplicaSet::WatchLoop() {
  while (true) {
    {
      absl::MutexLock l(&join_mu_);
      if (!stop_) stop_cv_.WaitWithTimeout(&join_mu_, options_.watch_every);
      if (stop_) return;
    }
    Watch();
  }
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
  auto serves = [this, self] { return view().Serves(self); };
  const absl::Time start = absl::Now();
  while (!stopped()) {
    // 1. A view in which this pserver is joining. Taken out again (a
    // primary that could not reach it for the lease): from the start,
    // every unit to be installed again.
    {
      absl::MutexLock l(&join_mu_);
      installed_.clear();
    }
    while (!stopped()) {
      absl::StatusOr<View> v = ChangeView({}, {self});
      if (v.ok() && v->Serves(self) && !v->Has(self)) {
        // No one's primary in this view: the fence has done its work.
        keeper_->Unfence();
        break;
      }
      LOG_EVERY_N(WARNING, 10)
          << "pserver " << self << ": rejoining: "
          << (v.ok() ? v->DebugString() : v.status().ToString());
      absl::SleepFor(absl::Milliseconds(200));
    }
    // 2. Every unit installed by its primary (on its next update).
    absl::Time last_log = absl::Now();
    while (!stopped() && serves()) {
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
    while (!stopped() && serves()) {
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
    if (!stopped()) {
      LOG(WARNING) << "pserver " << self << ": taken out again while joining ("
                   << view().DebugString() << "); rejoining";
    }
  }
}

absl::Status ReplicaSet::HandlePrepare(const ViewPrepareRequest& req,
                                       ViewPrepareResponse* resp) {
  return keeper_->HandlePrepare(req, resp);
}

absl::Status ReplicaSet::HandleAccept(const ViewAcceptRequest& req,
                                      ViewAcceptResponse* resp) {
  return keeper_->HandleAccept(req, resp);
}

absl::Status ReplicaSet::HandleCommit(const ViewCommitRequest& req) {
  return keeper_->HandleCommit(req);
}

absl::Status ReplicaSet::HandleInspect(ViewPrepareResponse* resp) const {
  return keeper_->HandleInspect(resp);
}

}  // namespace shardps
