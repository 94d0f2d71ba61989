#include "trainer/transport/replica_router.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/placement/shard_map.h"
#include "common/transport/peer_silence.h"
#include "glog/logging.h"

namespace shardps {

// Calls of one shard, sent to its primary.
class ReplicaRouter::ShardClient : public PsClientInterface {
 public:
  ShardClient(ReplicaRouter* router, int shard)
      : router_(router), shard_(shard), name_(absl::StrCat("shard ", shard)) {}

  const std::string& address() const override { return name_; }

  void CallAsync(PsRpc rpc, const google::protobuf::Message& req,
                 google::protobuf::Message* resp,
                 StatusCallback done) override {
    Attempt(rpc, &req, resp, std::move(done));
  }

 private:
  // One call, across its attempts.
  struct Call {
    PsRpc rpc;
    const google::protobuf::Message* req;
    google::protobuf::Message* resp;
    StatusCallback done;
    absl::Time start;
    // The primary that has left it unanswered, and since when.
    int silent = -1;
    absl::Time silent_since;
    absl::Duration backoff = absl::Milliseconds(50);
    absl::Time last_log = absl::InfinitePast();
  };
  using CallPtr = std::shared_ptr<Call>;

  void Attempt(PsRpc rpc, const google::protobuf::Message* req,
               google::protobuf::Message* resp, StatusCallback done) {
    auto c = std::make_shared<Call>();
    c->rpc = rpc;
    c->req = req;
    c->resp = resp;
    c->done = std::move(done);
    c->start = absl::Now();
    Attempt(std::move(c));
  }

  void Attempt(CallPtr c) {
    const int p = router_->Primary(shard_);
    const int64_t seen = router_->view_number();
    if (p < 0) {
      c->done(absl::UnavailableError(
          absl::StrCat("shard ", shard_, " has no live replica in view ", seen,
                       ": every pserver that held it is gone")));
      return;
    }
    auto on_done = [this, c, p, seen](absl::Status s) {
      if (s.ok()) {
        router_->NoteAnswered(p);
        Succeeded(c->rpc, *c->req, p);
        c->done(s);
        return;
      }
      Failed(c, p, seen, std::move(s));
    };
    router_->servers_[p]->CallAsync(c->rpc, *c->req, c->resp,
                                    std::move(on_done));
  }

  // What a failed call's error says of its primary.
  enum class Fault {
    kOther,     // an answer of the pserver's own: the call's error
    kBusy,      // the job is still being set up there
    kGone,      // its host refuses connections, it is fenced or restarted
    kSlowStep,  // it ended a pull itself after --max_pull_wait_s
    kSilent,    // no answer (cut off, paused, losing packets)
    kMoved,     // not the primary in its view
  };
  static Fault Classify(const absl::Status& s) {
    if (absl::IsUnavailable(s)) {
      if (absl::StrContains(s.message(), "still being")) return Fault::kBusy;
      if (IsRefusedConnection(s) ||
          absl::StrContains(s.message(), "is fenced")) {
        return Fault::kGone;
      }
      return Fault::kSilent;
    }
    if (absl::IsDeadlineExceeded(s)) {
      return absl::StrContains(s.message(), "pserver waited") ? Fault::kSlowStep
                                                              : Fault::kSilent;
    }
    if (absl::IsFailedPrecondition(s) &&
        absl::StrContains(s.message(), "is not the primary of shard")) {
      return Fault::kMoved;
    }
    // Restarted on its address, without the job yet: what it held is gone
    // (the chief sends it the job, and it rejoins as a backup).
    if (absl::IsFailedPrecondition(s) &&
        absl::StrContains(s.message(), "job is not initialised")) {
      return Fault::kGone;
    }
    return Fault::kOther;
  }

  // An error from primary `p`: sent again, after a wait or a failover, or
  // the call ends with it.
  void Failed(CallPtr c, int p, int64_t seen, absl::Status s) {
    const Fault fault = Classify(s);
    const absl::Time now = absl::Now();
    if (fault == Fault::kOther) {
      c->done(s);
      return;
    }
    if (now - c->start > router_->options_.give_up_after) {
      c->done(absl::Status(s.code(),
                           absl::StrCat(s.message(), "; gave up after ",
                                        absl::FormatDuration(now - c->start))));
      return;
    }
    if (IsRefusedConnection(s)) router_->NoteRefused(p);
    switch (fault) {
      case Fault::kBusy:
        router_->Post([this, c] { Again(c); }, absl::Milliseconds(20));
        return;
      case Fault::kSlowStep:
        LogEvery(c.get(), absl::Seconds(10), [&] {
          return absl::StrCat("waiting for a slow step on pserver ", p, ": ",
                              s.message());
        });
        router_->Post([this, c] { Again(c); });
        return;
      case Fault::kSilent: {
        if (c->silent != p) {
          c->silent = p;
          // A connection dropped by its keepalive has been silent for the
          // lease already.
          c->silent_since =
              IsSilentForTheLease(s) ? now - router_->options_.lease : now;
        }
        const absl::Duration quiet = now - c->silent_since;
        if (quiet >= router_->options_.lease) break;
        LogEvery(c.get(), absl::Seconds(2), [&] {
          return absl::StrCat("waiting for pserver ", p, " (primary of shard ",
                              shard_, "): no answer for ",
                              absl::FormatDuration(quiet), " of the ",
                              absl::FormatDuration(router_->options_.lease),
                              " lease: ", s.message());
        });
        Backoff(c);
        return;
      }
      default:
        break;
    }
    const bool moved = fault == Fault::kMoved;
    router_->Post([this, c, p, seen, moved, s] { Move(c, p, seen, moved, s); });
  }

  // On the router's thread: the view without primary `p` (or, `moved`,
  // the newer view), then the call again.
  void Move(CallPtr c, int p, int64_t seen, bool moved, const absl::Status& s) {
    LOG(WARNING) << "trainer " << router_->trainer_id_ << ": shard " << shard_
                 << ": pserver " << p << ": " << s;
    if (IsRefusedConnection(s)) {
      // A majority gone (their hosts refuse connections): no view can be
      // agreed; said now rather than after asking the survivors.
      absl::Status gone = router_->MajorityGone(p);
      if (!gone.ok()) {
        c->done(absl::Status(
            s.code(),
            absl::StrCat(s.message(), "; no failover: ", gone.message())));
        return;
      }
    }
    absl::Status f =
        moved ? router_->Refresh(seen) : router_->Failover(p, seen);
    if (f.ok()) {
      // The view's change was logged, and sent the acknowledged pushes
      // again (AskView).
      Again(c);
      return;
    }
    absl::Status gone = router_->MajorityGone(p);
    const bool orphans = absl::IsFailedPrecondition(f) &&
                         absl::StrContains(f.message(), "would leave shard");
    // A silent pserver that is the last copy of a shard may come back
    // (paused, cut off): waited for, as for no majority, until the call
    // gives up.
    if ((orphans && Classify(s) != Fault::kSilent) || !gone.ok()) {
      // Refused (it would leave a shard with no copy), or no majority is
      // alive: nothing to wait for.
      c->done(absl::Status(
          s.code(), absl::StrCat(s.message(), "; no failover: ",
                                 gone.ok() ? f.message() : gone.message())));
      return;
    }
    // No majority answers (yet): a partition may heal.
    LogEvery(c.get(), absl::Seconds(2), [&] {
      return absl::StrCat("no failover from pserver ", p, " yet (", f.message(),
                          "); trying again for ",
                          absl::FormatDuration(router_->options_.give_up_after -
                                               (absl::Now() - c->start)));
    });
    Backoff(c);
  }

  // The call again after its back-off (50 ms doubling to 1 s).
  void Backoff(const CallPtr& c) {
    const absl::Duration wait = c->backoff;
    c->backoff = std::min(c->backoff * 2, absl::Seconds(1));
    router_->Post([this, c] { Again(c); }, wait);
  }

  void Again(CallPtr c) {
    c->resp->Clear();
    Attempt(std::move(c));
  }

  template <typename Text>
  void LogEvery(Call* c, absl::Duration every, Text text) {
    const absl::Time now = absl::Now();
    if (now - c->last_log < every) return;
    c->last_log = now;
    LOG(WARNING) << "trainer " << router_->trainer_id_ << ": shard " << shard_
                 << ": " << text() << " (" << PsRpcMethod(c->rpc).name() << ", "
                 << absl::FormatDuration(now - c->start) << " so far)";
  }

  // Sync: remembers an acknowledged push until a pull shows its step
  // applied.
  void Succeeded(PsRpc rpc, const google::protobuf::Message& req, int p) {
    if (!router_->sync_) return;
    absl::MutexLock l(&mu_);
    if (rpc == PsRpc::kPush) {
      unconfirmed_.push_back(static_cast<const PushRequest&>(req));
      // Acknowledged by a primary the view has moved away from while the
      // push was on its way (it did not know yet): the new one needs it.
      if (router_->Primary(shard_) != p) {
        router_->Post([this] { SendAgain(); });
      }
    } else if (rpc == PsRpc::kPull) {
      const int64_t v = static_cast<const PullRequest&>(req).min_version();
      unconfirmed_.erase(
          std::remove_if(unconfirmed_.begin(), unconfirmed_.end(),
                         [v](const PushRequest& p) { return p.step() < v; }),
          unconfirmed_.end());
    }
  }

 public:
  // After the shard's primary changed: the acknowledged pushes of steps no
  // pull has seen applied go to the new primary (on the router's thread).
  void SendAgain() {
    uint64_t round;
    {
      absl::MutexLock l(&mu_);
      round = ++resend_round_;
    }
    SendAgainFrom(round, absl::Now(), absl::Milliseconds(50));
  }

 private:
  // One try of round `round` (begun at `start`): every push still
  // unconfirmed, to the shard's primary now. One it refuses because it has
  // not learned the view yet, or that gets no answer for now, is sent again
  // with the rest after `backoff` (doubling to 1 s), until the call timeout
  // (options_.give_up_after); those it took already are answered as
  // duplicates. A newer round (the primary moved again) ends this one.
  // Found as a job stuck under packet loss: the new primary answered "not
  // the primary of shard 2 in view 5" (the trainer knew view 6) to the push
  // of step 68 sent again, nothing sent it a third time, and the step waited
  // for it until the trainers gave up.
  void SendAgainFrom(uint64_t round, absl::Time start, absl::Duration backoff) {
    std::vector<PushRequest> again;
    {
      absl::MutexLock l(&mu_);
      if (round != resend_round_) return;
      again = unconfirmed_;
    }
    const int p = router_->Primary(shard_);
    if (p < 0) return;
    for (const PushRequest& req : again) {
      PushResponse resp;
      absl::Status s = router_->servers_[p]->Push(req, &resp);
      if (s.ok()) continue;
      const Fault fault = Classify(s);
      const bool later = (fault == Fault::kMoved || fault == Fault::kSilent ||
                          fault == Fault::kBusy) &&
                         absl::Now() - start < router_->options_.give_up_after;
      LOG(WARNING) << "trainer " << router_->trainer_id_ << ": shard " << shard_
                   << ": pushing step " << req.step() << " again to pserver "
                   << p << ": " << s
                   << (later ? absl::StrCat("; sent again in ",
                                            absl::FormatDuration(backoff))
                             : std::string("; not sent again"));
      if (later) {
        router_->Post(
            [this, round, start, backoff] {
              SendAgainFrom(round, start,
                            std::min(backoff * 2, absl::Seconds(1)));
            },
            backoff);
      }
      return;
    }
    if (!again.empty()) {
      LOG(INFO) << "trainer " << router_->trainer_id_ << ": shard " << shard_
                << ": pushed " << again.size() << " acknowledged push(es) "
                << "again to pserver " << p;
    }
  }

  ReplicaRouter* const router_;
  const int shard_;
  const std::string name_;
  absl::Mutex mu_;
  std::vector<PushRequest> unconfirmed_ ABSL_GUARDED_BY(mu_);
  uint64_t resend_round_ ABSL_GUARDED_BY(mu_) = 0;  // SendAgain's rounds
};

ReplicaRouter::ReplicaRouter(std::vector<PsClientInterface*> servers,
                             Options options)
    : servers_(std::move(servers)),
      options_(options),
      replication_(options.replication),
      sync_(options.sync),
      trainer_id_(options.trainer_id) {
  rejoin_sent_.assign(servers_.size(), absl::InfinitePast());
  refused_at_.assign(servers_.size(), absl::InfinitePast());
  for (size_t i = 0; i < servers_.size(); ++i) {
    members_.push_back(static_cast<int>(i));
    shards_.push_back(std::make_unique<ShardClient>(this, static_cast<int>(i)));
  }
  worker_ = std::thread([this] { Run(); });
}

ReplicaRouter::~ReplicaRouter() { Stop(); }

void ReplicaRouter::Stop() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

std::vector<PsClientInterface*> ReplicaRouter::shard_clients() const {
  std::vector<PsClientInterface*> out;
  for (const auto& s : shards_) out.push_back(s.get());
  return out;
}

bool ReplicaRouter::Live(int server) const {
  absl::MutexLock l(&mu_);
  return std::binary_search(members_.begin(), members_.end(), server);
}

int ReplicaRouter::Primary(int shard) const {
  absl::MutexLock l(&mu_);
  return PrimaryLocked(shard);
}

int ReplicaRouter::PrimaryLocked(int shard) const {
  if (static_cast<size_t>(shard) < primaries_.size()) return primaries_[shard];
  return PrimaryServer(shard, replication_, static_cast<int>(servers_.size()),
                       members_);
}

void ReplicaRouter::set_rejoin(std::function<absl::Status(int)> rejoin) {
  absl::MutexLock l(&mu_);
  rejoin_ = std::move(rejoin);
}

int64_t ReplicaRouter::view_number() const {
  absl::MutexLock l(&mu_);
  return view_number_;
}

int ReplicaRouter::failovers() const {
  absl::MutexLock l(&mu_);
  return failovers_;
}

void ReplicaRouter::Post(std::function<void()> fn, absl::Duration after) {
  absl::MutexLock l(&mu_);
  queue_.emplace(absl::Now() + after, std::move(fn));
}

void ReplicaRouter::NoteRefused(int server) {
  absl::MutexLock l(&mu_);
  refused_at_[server] = absl::Now();
}

void ReplicaRouter::NoteAnswered(int server) {
  absl::MutexLock l(&mu_);
  refused_at_[server] = absl::InfinitePast();
}

absl::Status ReplicaRouter::MajorityGone(int refused_now) {
  const size_t n = servers_.size();
  std::vector<int> gone;
  auto refused = [&] {
    absl::MutexLock l(&mu_);
    const absl::Time now = absl::Now();
    gone.clear();
    for (size_t i = 0; i < refused_at_.size(); ++i) {
      if (now - refused_at_[i] < options_.lease) gone.push_back(i);
    }
    return gone.size() >= n - n / 2;
  };
  if (!refused()) return absl::OkStatus();
  // What refused a while ago may be back (restarted, and let into the view
  // without this trainer's knowing): asked once more.
  for (int i : gone) {
    if (i == refused_now) continue;
    GetStatusRequest req;
    GetStatusResponse resp;
    if (servers_[i]->GetStatus(req, &resp).ok()) NoteAnswered(i);
  }
  if (!refused()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "pservers {", absl::StrJoin(gone, ","),
      "} refuse connections: ", gone.size(), " of ", n,
      " pservers are gone, and a view needs a majority alive (with ",
      replication_, " copies, the shards they held have no live replica)"));
}

void ReplicaRouter::Run() {
  absl::Time next_probe = absl::Now() + absl::Seconds(1);
  while (true) {
    std::function<void()> fn;
    {
      absl::MutexLock l(&mu_);
      while (!stop_) {
        const absl::Time now = absl::Now();
        if (!queue_.empty() && queue_.begin()->first <= now) break;
        if (now >= next_probe) break;
        absl::Time until = next_probe;
        if (!queue_.empty()) until = std::min(until, queue_.begin()->first);
        // Woken early by a new call (queue_ changes) or the stop.
        const size_t size = queue_.size();
        auto changed = [this, size]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || queue_.size() != size;
        };
        mu_.AwaitWithDeadline(absl::Condition(&changed), until);
      }
      if (stop_) return;
      if (!queue_.empty() && queue_.begin()->first <= absl::Now()) {
        fn = std::move(queue_.begin()->second);
        queue_.erase(queue_.begin());
      }
    }
    if (!fn) {
      // Idle for a second (or busy past it): probe.
      next_probe = absl::Now() + absl::Seconds(1);
      Probe();
      continue;
    }
    fn();
  }
}

void ReplicaRouter::AdoptViewLocked(const ViewMessage& view,
                                    std::vector<int> members, int q,
                                    ViewMoves* moves) {
  std::vector<int> before;
  for (size_t s = 0; s < shards_.size(); ++s) {
    before.push_back(PrimaryLocked(s));
  }
  view_number_ = view.number();
  // Pservers the pservers let back in are alive, whatever refused this
  // trainer before.
  for (int m : members) {
    if (!std::binary_search(members_.begin(), members_.end(), m)) {
      refused_at_[m] = absl::InfinitePast();
    }
  }
  for (int j : view.joining()) {
    if (j >= 0 && static_cast<size_t>(j) < refused_at_.size()) {
      refused_at_[j] = absl::InfinitePast();
    }
  }
  members_ = std::move(members);
  joining_.assign(view.joining().begin(), view.joining().end());
  primaries_.assign(view.primaries().begin(), view.primaries().end());
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (PrimaryLocked(s) == before[s]) continue;
    moves->shards.push_back(s);
    moves->from.push_back(before[s]);
    if (before[s] >= 0 && before[s] != q &&
        std::find(moves->old_primaries.begin(), moves->old_primaries.end(),
                  before[s]) == moves->old_primaries.end()) {
      moves->old_primaries.push_back(before[s]);
    }
  }
  LOG(WARNING) << "trainer " << trainer_id_ << ": pservers in view "
               << view_number_ << ": {" << absl::StrJoin(members_, ",") << "}";
}

void ReplicaRouter::SendAgainToNewPrimaries(const ViewMoves& moves) {
  // However the view was learned (a failover, a refusal, the chief's
  // probe), the pushes a moved shard's old primary acknowledged and no
  // pull has shown applied go to the new one.
  for (size_t i = 0; i < moves.shards.size(); ++i) {
    LOG(WARNING) << "trainer " << trainer_id_ << ": shard " << moves.shards[i]
                 << ": failover from pserver " << moves.from[i]
                 << " to pserver " << Primary(moves.shards[i]);
    shards_[moves.shards[i]]->SendAgain();
  }
}

void ReplicaRouter::TellOldPrimaries(const std::vector<int>& old_primaries,
                                     const ViewMessage& view) {
  // An old primary cut off from the other pservers cannot learn the view
  // from them; told it, it answers the pulls waiting on it (refused: not
  // the primary) and stops forwarding. Not waited for: it may be gone.
  for (int p : old_primaries) {
    auto tell =
        std::make_shared<std::pair<ChangeViewRequest, ChangeViewResponse>>();
    tell->first.set_trainer_id(trainer_id_);
    *tell->first.mutable_decided() = view;
    servers_[p]->CallAsync(PsRpc::kChangeView, tell->first, &tell->second,
                           [tell](absl::Status) {});
  }
}

absl::Status ReplicaRouter::AskView(int q, const ChangeViewRequest& req) {
  ChangeViewResponse resp;
  absl::Status s = servers_[q]->ChangeView(req, &resp);
  if (IsRefusedConnection(s)) NoteRefused(q);
  if (!s.ok()) return s;
  NoteAnswered(q);
  std::vector<int> members(resp.view().members().begin(),
                           resp.view().members().end());
  ViewMoves moves;
  {
    absl::MutexLock l(&mu_);
    if (resp.view().number() <= view_number_) return absl::OkStatus();
    AdoptViewLocked(resp.view(), std::move(members), q, &moves);
  }
  SendAgainToNewPrimaries(moves);
  TellOldPrimaries(moves.old_primaries, resp.view());
  return absl::OkStatus();
}

void ReplicaRouter::Probe() {
  std::vector<int> members, out;
  std::function<absl::Status(int)> rejoin;
  const absl::Time now = absl::Now();
  {
    absl::MutexLock l(&mu_);
    if (!rejoin_) return;
    rejoin = rejoin_;
    members = members_;
    for (int i = 0; i < static_cast<int>(servers_.size()); ++i) {
      const bool in = std::binary_search(members_.begin(), members_.end(), i) ||
                      std::binary_search(joining_.begin(), joining_.end(), i);
      // Sent again each second while it stays out: sending the job to a
      // pserver that has it already changes nothing there.
      if (!in && now - rejoin_sent_[i] >= absl::Seconds(1)) out.push_back(i);
    }
  }
  ChangeViewRequest req;  // no change: the view
  req.set_trainer_id(trainer_id_);
  for (int q : members) {
    if (AskView(q, req).ok()) break;
  }
  for (int i : out) {
    GetStatusRequest sreq;
    GetStatusResponse sresp;
    if (!servers_[i]->GetStatus(sreq, &sresp).ok()) continue;
    NoteAnswered(i);
    {
      absl::MutexLock l(&mu_);
      rejoin_sent_[i] = absl::Now();
    }
    LOG(WARNING) << "trainer " << trainer_id_ << ": pserver " << i
                 << " answers again; sending it the job to rejoin";
    absl::Status s = rejoin(i);
    LOG_IF(WARNING, !s.ok()) << "trainer " << trainer_id_
                             << ": rejoin of pserver " << i << ": " << s;
  }
}

absl::Status ReplicaRouter::Failover(int dead, int64_t seen) {
  std::vector<int> ask;
  {
    absl::MutexLock l(&mu_);
    if (view_number_ > seen) return absl::OkStatus();  // done already
    for (int m : members_) {
      if (m != dead) ask.push_back(m);
    }
  }
  const absl::Time start = absl::Now();
  ChangeViewRequest req;
  req.set_trainer_id(trainer_id_);
  req.add_remove(dead);
  absl::Status last = absl::UnavailableError("no live pserver to ask");
  absl::Status refusal;
  for (int q : ask) {
    last = AskView(q, req);
    if (absl::IsFailedPrecondition(last)) refusal = last;
    if (last.ok()) {
      absl::MutexLock l(&mu_);
      ++failovers_;
      LOG(WARNING) << "trainer " << trainer_id_ << ": view without pserver "
                   << dead << " agreed in "
                   << absl::FormatDuration(absl::Now() - start);
      return absl::OkStatus();
    }
  }
  return refusal.ok() ? last : refusal;
}

absl::Status ReplicaRouter::Refresh(int64_t seen) {
  std::vector<int> ask;
  {
    absl::MutexLock l(&mu_);
    if (view_number_ > seen) return absl::OkStatus();
    ask = members_;
  }
  ChangeViewRequest req;
  req.set_trainer_id(trainer_id_);
  absl::Status last = absl::UnavailableError("no live pserver to ask");
  for (int q : ask) {
    last = AskView(q, req);
    if (last.ok() && view_number() > seen) return last;
  }
  return last.ok() ? absl::FailedPreconditionError(absl::StrCat(
                         "no pserver knows a view newer than ", seen))
                   : last;
}

}  // namespace shardps
