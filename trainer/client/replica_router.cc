#include "trainer/client/replica_router.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/placement/shard_map.h"
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
    Attempt(rpc, &req, resp, std::move(done), 0);
  }

 private:
  void Attempt(PsRpc rpc, const google::protobuf::Message* req,
               google::protobuf::Message* resp, StatusCallback done,
               int tries) {
    const int p = router_->Primary(shard_);
    const int64_t seen = router_->view_number();
    if (p < 0) {
      done(absl::UnavailableError(
          absl::StrCat("shard ", shard_, " has no live replica in view ", seen,
                       ": every pserver that held it is gone")));
      return;
    }
    router_->servers_[p]->CallAsync(
        rpc, *req, resp,
        [this, rpc, req, resp, done = std::move(done), tries, p,
         seen](absl::Status s) mutable {
          if (s.ok()) {
            Succeeded(rpc, *req);
            done(s);
            return;
          }
          const bool busy = absl::IsUnavailable(s) &&
                            absl::StrContains(s.message(), "still being");
          const bool dead = !busy && absl::IsUnavailable(s);
          const bool moved =
              absl::IsFailedPrecondition(s) &&
              absl::StrContains(s.message(), "is not the primary of shard");
          if ((!busy && !dead && !moved) || tries >= 20) {
            done(s);
            return;
          }
          router_->Post([this, rpc, req, resp, done = std::move(done), tries, p,
                         seen, busy, dead, s]() mutable {
            absl::Status f = absl::OkStatus();
            if (busy) {
              absl::SleepFor(absl::Milliseconds(20));
            } else {
              LOG(WARNING) << "trainer " << router_->trainer_id_ << ": shard "
                           << shard_ << ": pserver " << p << ": " << s;
              f = dead ? router_->Failover(p, seen) : router_->Refresh(seen);
              if (f.ok()) {
                LOG(WARNING) << "trainer " << router_->trainer_id_ << ": shard "
                             << shard_ << ": failover from pserver " << p
                             << " to pserver " << router_->Primary(shard_);
                SendAgain();
              }
            }
            if (!f.ok()) {
              done(absl::Status(
                  s.code(),
                  absl::StrCat(s.message(), "; no failover: ", f.message())));
              return;
            }
            resp->Clear();
            Attempt(rpc, req, resp, std::move(done), tries + 1);
          });
        });
  }

  // Sync: remembers an acknowledged push until a pull shows its step
  // applied.
  void Succeeded(PsRpc rpc, const google::protobuf::Message& req) {
    if (!router_->sync_) return;
    absl::MutexLock l(&mu_);
    if (rpc == PsRpc::kPush) {
      unconfirmed_.push_back(static_cast<const PushRequest&>(req));
    } else if (rpc == PsRpc::kPull) {
      const int64_t v = static_cast<const PullRequest&>(req).min_version();
      unconfirmed_.erase(
          std::remove_if(unconfirmed_.begin(), unconfirmed_.end(),
                         [v](const PushRequest& p) { return p.step() < v; }),
          unconfirmed_.end());
    }
  }

  // After a failover: the acknowledged pushes of steps no pull has seen
  // applied go to the new primary (on the router's thread).
  void SendAgain() {
    std::vector<PushRequest> again;
    {
      absl::MutexLock l(&mu_);
      again = unconfirmed_;
    }
    for (const PushRequest& req : again) {
      const int p = router_->Primary(shard_);
      if (p < 0) return;
      PushResponse resp;
      absl::Status s = router_->servers_[p]->Push(req, &resp);
      LOG_IF(WARNING, !s.ok())
          << "trainer " << router_->trainer_id_ << ": shard " << shard_
          << ": pushing step " << req.step() << " again to pserver " << p
          << ": " << s;
    }
    if (!again.empty()) {
      LOG(INFO) << "trainer " << router_->trainer_id_ << ": shard " << shard_
                << ": pushed " << again.size() << " acknowledged push(es) "
                << "again to pserver " << router_->Primary(shard_);
    }
  }

  ReplicaRouter* const router_;
  const int shard_;
  const std::string name_;
  absl::Mutex mu_;
  std::vector<PushRequest> unconfirmed_ ABSL_GUARDED_BY(mu_);
};

ReplicaRouter::ReplicaRouter(std::vector<PsClientInterface*> servers,
                             int replication, bool sync, int trainer_id)
    : servers_(std::move(servers)),
      replication_(replication),
      sync_(sync),
      trainer_id_(trainer_id) {
  rejoin_sent_.assign(servers_.size(), absl::InfinitePast());
  for (size_t i = 0; i < servers_.size(); ++i) {
    members_.push_back(static_cast<int>(i));
    shards_.push_back(std::make_unique<ShardClient>(this, static_cast<int>(i)));
  }
  worker_ = std::thread([this] { Run(); });
}

ReplicaRouter::~ReplicaRouter() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  worker_.join();
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

void ReplicaRouter::Post(std::function<void()> fn) {
  absl::MutexLock l(&mu_);
  queue_.push_back(std::move(fn));
}

void ReplicaRouter::Run() {
  while (true) {
    std::function<void()> fn = [this] { Probe(); };
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty();
      };
      // Idle for a second: probe.
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(1));
      if (stop_) return;
      if (!queue_.empty()) {
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    fn();
  }
}

absl::Status ReplicaRouter::AskView(int q, const ChangeViewRequest& req) {
  ChangeViewResponse resp;
  absl::Status s = servers_[q]->ChangeView(req, &resp);
  if (!s.ok()) return s;
  std::vector<int> members(resp.view().members().begin(),
                           resp.view().members().end());
  absl::MutexLock l(&mu_);
  if (resp.view().number() > view_number_) {
    view_number_ = resp.view().number();
    members_ = std::move(members);
    joining_.assign(resp.view().joining().begin(), resp.view().joining().end());
    primaries_.assign(resp.view().primaries().begin(),
                      resp.view().primaries().end());
    LOG(WARNING) << "trainer " << trainer_id_ << ": pservers in view "
                 << view_number_ << ": {" << absl::StrJoin(members_, ",")
                 << "}";
  }
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
      if (!in && now - rejoin_sent_[i] > absl::Seconds(10)) out.push_back(i);
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
  for (int q : ask) {
    last = AskView(q, req);
    if (last.ok()) {
      absl::MutexLock l(&mu_);
      ++failovers_;
      LOG(WARNING) << "trainer " << trainer_id_ << ": view without pserver "
                   << dead << " agreed in "
                   << absl::FormatDuration(absl::Now() - start);
      return absl::OkStatus();
    }
  }
  return last;
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
