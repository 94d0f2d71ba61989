// ReplicaSet (docs/replication.md) among three pservers in one process,
// their messages carried by direct calls that can be cut.
#include "pserver/replication/replica_set.h"

#include <atomic>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pserver/replication/replication_wire.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

constexpr int kServers = 3;

// Three ReplicaSets with R = 2 over direct calls; pserver i answers while
// up[i]. A backup silent for `lease` is taken out; a forward gives up after
// 2 s.
class Trio {
 public:
  explicit Trio(absl::Duration lease = absl::Milliseconds(100)) {
    for (int i = 0; i < kServers; ++i) up[i] = true;
    for (int i = 0; i < kServers; ++i) refuses[i] = false;
    for (int i = 0; i < kServers; ++i) {
      std::vector<std::unique_ptr<ReplicaPeer>> peers(kServers);
      for (int j = 0; j < kServers; ++j) {
        if (j != i) peers[j] = std::make_unique<Peer>(this, j);
      }
      ReplicaSetOptions o;
      o.self = i;
      o.num_servers = kServers;
      o.replication = 2;
      o.lease = lease;
      o.max_forward_wait = absl::Seconds(2);
      auto s = ReplicaSet::Create(o, {0}, std::move(peers));
      CHECK(s.ok()) << s.status();
      sets.push_back(*std::move(s));
      ReplicaSet::StoreHooks hooks;
      hooks.apply = [this, i](const std::vector<AppliedUpdate>& u,
                              const std::vector<PushRef>&) {
        absl::MutexLock l(&mu);
        for (const AppliedUpdate& a : u) applied[i].push_back(a.version);
        return absl::OkStatus();
      };
      hooks.image_held = [](uint32_t, uint32_t unit) {
        return absl::StatusOr<std::string>("image of unit " +
                                           std::to_string(unit));
      };
      hooks.install = [this, i](uint32_t, uint32_t, const std::string& blob,
                                uint64_t generation) {
        absl::MutexLock l(&mu);
        installed[i].push_back(blob);
        generations[i] = generation;
        return absl::OkStatus();
      };
      hooks.generation = [] { return uint64_t{7}; };
      sets.back()->set_hooks(std::move(hooks));
    }
  }

  // An update of unit `unit` of table 0 (shard unit % 3) at `version`.
  static AppliedUpdate Update(uint32_t unit, int64_t version) {
    AppliedUpdate u;
    u.block = unit;
    u.version = version;
    u.scales = {1.0f};
    u.grad = {0.5f, -0.25f};
    return u;
  }
  std::vector<int64_t> Applied(int i) {
    absl::MutexLock l(&mu);
    return applied[i];
  }

  // Every set's threads end before any set is destroyed: one still
  // committing a view calls the others.
  ~Trio() {
    for (auto& set : sets) set->Shutdown();
  }

  std::vector<std::unique_ptr<ReplicaSet>> sets;
  std::atomic<bool> up[kServers];
  // While not up: its host refuses connections (the process is gone), as
  // gRPC says it, rather than dropping them.
  std::atomic<bool> refuses[kServers];
  absl::Mutex mu;
  std::vector<int64_t> applied[kServers];
  std::vector<std::string> installed[kServers];
  uint64_t generations[kServers] = {0, 0, 0};

 private:
  class Peer : public ReplicaPeer {
   public:
    Peer(Trio* trio, int to) : trio_(trio), to_(to) {}
    absl::StatusOr<ForwardResponse> Forward(
        const ForwardRequest& req) override {
      RETURN_IF_ERROR(Reach());
      ForwardResponse resp;
      RETURN_IF_ERROR(trio_->sets[to_]->HandleForward(req, &resp));
      return resp;
    }
    absl::Status Install(const InstallUnitRequest& req) override {
      RETURN_IF_ERROR(Reach());
      return trio_->sets[to_]->HandleInstall(req);
    }
    absl::StatusOr<ViewAcceptor::PrepareReply> Prepare(
        int64_t number, const Ballot& ballot) override {
      RETURN_IF_ERROR(Reach());
      ViewPrepareRequest req;
      req.set_number(number);
      ToMessage(ballot, req.mutable_ballot());
      ViewPrepareResponse resp;
      RETURN_IF_ERROR(trio_->sets[to_]->HandlePrepare(req, &resp));
      return FromMessage(resp);
    }
    absl::StatusOr<bool> Accept(int64_t number, const Ballot& ballot,
                                const View& view) override {
      RETURN_IF_ERROR(Reach());
      ViewAcceptRequest req;
      req.set_number(number);
      ToMessage(ballot, req.mutable_ballot());
      ToMessage(view, req.mutable_view());
      ViewAcceptResponse resp;
      RETURN_IF_ERROR(trio_->sets[to_]->HandleAccept(req, &resp));
      return resp.accepted();
    }
    absl::Status Commit(const View& view) override {
      RETURN_IF_ERROR(Reach());
      ViewCommitRequest req;
      ToMessage(view, req.mutable_view());
      return trio_->sets[to_]->HandleCommit(req);
    }
    absl::StatusOr<AcceptorState> Inspect() override {
      RETURN_IF_ERROR(Reach());
      ViewPrepareResponse resp;
      RETURN_IF_ERROR(trio_->sets[to_]->HandleInspect(&resp));
      return StateOf(resp);
    }

   private:
    absl::Status Reach() const {
      if (trio_->up[to_]) return absl::OkStatus();
      if (trio_->refuses[to_]) {
        return absl::UnavailableError(
            "failed to connect to all addresses; last error: UNKNOWN: "
            "ipv4:127.0.0.1:1: Failed to connect to remote host: Connection "
            "refused");
      }
      return absl::UnavailableError("cut");
    }
    Trio* const trio_;
    const int to_;
  };
};

TEST(ReplicaSetTest, PrimariesStayWhileAliveAndMoveToTheNextReplica) {
  Trio t;
  EXPECT_EQ(t.sets[0]->PrimaryShards(), std::vector<int>({0}));
  EXPECT_EQ(t.sets[1]->BackupShards(), std::vector<int>({0}));
  t.up[1] = false;
  auto v = t.sets[0]->ChangeView({1}, {});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->members, std::vector<int>({0, 2}));
  EXPECT_EQ(v->primaries, std::vector<int>({0, 2, 2}));
  // Pserver 1 comes back: joining, primary of nothing, then a member; the
  // shards it had stay where they went.
  t.up[1] = true;
  v = t.sets[1]->ChangeView({}, {1});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->joining, std::vector<int>({1}));
  EXPECT_EQ(v->primaries, std::vector<int>({0, 2, 2}));
  v = t.sets[1]->ChangeView({}, {}, {1});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->members, std::vector<int>({0, 1, 2}));
  EXPECT_TRUE(v->joining.empty());
  EXPECT_EQ(v->primaries, std::vector<int>({0, 2, 2}));
  // A second failure: shard 1 goes back to pserver 1, shard 2 to 0.
  t.up[2] = false;
  v = t.sets[0]->ChangeView({2}, {});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->primaries, std::vector<int>({0, 1, 0}));
  EXPECT_EQ(t.sets[1]->PrimaryShards(), std::vector<int>({1}));
  EXPECT_TRUE(t.sets[0]->CheckServes(0, 2).ok());
  EXPECT_THAT(t.sets[1]->CheckServes(0, 2).message(),
              HasSubstr("its primary is pserver 0"));
}

// Issue 34's audit: a ViewCommit with number 2^63-1 was learned, and every
// later view change failed.
TEST(ReplicaSetTest, AViewNumberFarAheadIsRefused) {
  Trio t;
  View forged = t.sets[1]->view();
  forged.number = std::numeric_limits<int64_t>::max();
  forged.members = {1};
  ViewCommitRequest commit;
  ToMessage(forged, commit.mutable_view());
  // No pserver shows it decided: refused, nothing learned.
  EXPECT_TRUE(absl::IsFailedPrecondition(t.sets[1]->HandleCommit(commit)));
  EXPECT_EQ(t.sets[1]->view().number, 0);
  forged.number = ViewAcceptor::kMaxViewAdvance + 1;
  ToMessage(forged, commit.mutable_view());
  EXPECT_TRUE(absl::IsFailedPrecondition(t.sets[1]->HandleCommit(commit)));
  EXPECT_EQ(t.sets[1]->view().number, 0);
  EXPECT_THAT(ViewAcceptor(AcceptorState()).CheckNumber(1 << 20).message(),
              HasSubstr("views move one at a time"));
  // The job's views still move.
  t.up[2] = false;
  auto v = t.sets[0]->ChangeView({2}, {});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->number, 1);
  EXPECT_EQ(t.sets[1]->view().members, std::vector<int>({0, 1}));
}

// Issue 34's audit: ViewCommit{number: cur+1, members: [1]} was learned
// and persisted with no quorum, and a forged Forward's view with it.
TEST(ReplicaSetTest, AViewNoMajorityDecidedIsNotLearned) {
  Trio t;
  View forged = t.sets[0]->view();
  forged.number = 1;
  forged.members = {1};
  ViewCommitRequest commit;
  ToMessage(forged, commit.mutable_view());
  absl::Status s = t.sets[0]->HandleCommit(commit);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("3 of 3 pservers answered, and no "
                                     "majority of them shows it decided"));
  // A forward from pserver 1 carrying it: pserver 0 keeps its view, in
  // which 1 is not the primary of shard 0, and refuses the update.
  ForwardRequest fwd;
  ToMessage(forged, fwd.mutable_view());
  fwd.set_sender(1);
  ToMessage(Trio::Update(0, 5), fwd.add_updates());
  ForwardResponse resp;
  ASSERT_TRUE(t.sets[2]->HandleForward(fwd, &resp).ok());
  EXPECT_FALSE(resp.applied());
  EXPECT_TRUE(t.Applied(2).empty());
  for (auto& set : t.sets) EXPECT_EQ(set->view().number, 0);
  // One pserver that accepted it is not a majority either.
  ViewAcceptRequest accept;
  accept.set_number(1);
  accept.mutable_ballot()->set_round(1);
  accept.mutable_ballot()->set_proposer(1);
  ToMessage(forged, accept.mutable_view());
  ViewAcceptResponse accepted;
  ASSERT_TRUE(t.sets[1]->HandleAccept(accept, &accepted).ok());
  ASSERT_TRUE(accepted.accepted());
  EXPECT_TRUE(absl::IsFailedPrecondition(t.sets[0]->HandleCommit(commit)));
  // A view the pservers did decide is learned from one commit.
  ASSERT_TRUE(t.sets[2]->HandleAccept(accept, &accepted).ok());
  EXPECT_TRUE(t.sets[0]->HandleCommit(commit).ok());
  EXPECT_EQ(t.sets[0]->view(), forged);
}

TEST(ReplicaSetTest, ForwardReachesTheBackupOfEachUnit) {
  Trio t;
  // Unit 0 is shard 0 (backup 1), unit 2 is shard 2 (primary 2).
  ASSERT_TRUE(t.sets[0]->CheckServes(0, 0).ok());
  EXPECT_THAT(t.sets[0]->CheckServes(0, 2).message(),
              HasSubstr("its primary is pserver 2"));
  ASSERT_TRUE(t.sets[0]
                  ->Forward({Trio::Update(0, 0), Trio::Update(0, 1)},
                            {PushRef{1, 99, 0}})
                  .ok());
  EXPECT_EQ(t.Applied(1), std::vector<int64_t>({0, 1}));
  EXPECT_TRUE(t.Applied(2).empty());
  // Not the primary of unit 2: refused, nothing sent.
  EXPECT_TRUE(
      absl::IsFailedPrecondition(t.sets[0]->Forward({Trio::Update(2, 0)}, {})));
  EXPECT_TRUE(t.Applied(0).empty());
}

TEST(ReplicaSetTest, ADeadBackupIsTakenOutOfTheView) {
  Trio t;
  t.up[1] = false;
  ASSERT_TRUE(t.sets[0]->Forward({Trio::Update(0, 0)}, {}).ok());
  EXPECT_EQ(t.sets[0]->view().members, std::vector<int>({0, 2}));
  EXPECT_EQ(t.sets[2]->view().members, std::vector<int>({0, 2}));
  EXPECT_TRUE(t.Applied(1).empty());
}

TEST(ReplicaSetTest, APrimaryCutOffIsFencedByItsBackup) {
  Trio t;
  // Pservers 1 and 2 agree a view without 0 while 0 cannot hear them.
  t.up[0] = false;
  ASSERT_TRUE(t.sets[1]->ChangeView({0}, {}).ok());
  t.up[0] = true;
  EXPECT_EQ(t.sets[0]->view().number, 0);
  // Pserver 0 still thinks it is the primary of shard 0; its backup, in
  // the newer view, refuses, and it learns that it is not.
  absl::Status s = t.sets[0]->Forward({Trio::Update(0, 0)}, {});
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("is not the primary of shard 0"));
  EXPECT_EQ(t.sets[0]->view().number, 1);
  EXPECT_TRUE(t.Applied(1).empty());
}

TEST(ReplicaSetTest, AJoiningBackupGetsEachUnitInstalledThenIsAMember) {
  Trio t;
  t.up[1] = false;
  ASSERT_TRUE(t.sets[0]->ChangeView({1}, {}).ok());
  t.up[1] = true;
  // Pserver 1 holds units 0 (shard 0, primary 0) and 1 (shard 1, now on 2).
  t.sets[1]->StartJoining({{0, 0}, {0, 1}});
  // Every pserver knows the joining view (commits reach them in parallel).
  auto joining = [&] {
    for (const auto& set : t.sets) {
      if (set->view().joining.size() != 1) return false;
    }
    return true;
  };
  for (int i = 0; i < 200 && !joining(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(joining()) << t.sets[0]->view().DebugString();
  // Each unit's next update installs it first.
  ASSERT_TRUE(t.sets[0]->Forward({Trio::Update(0, 5)}, {}).ok());
  ASSERT_TRUE(t.sets[2]->Forward({Trio::Update(1, 8)}, {}).ok());
  {
    absl::MutexLock l(&t.mu);
    EXPECT_EQ(t.installed[1],
              std::vector<std::string>({"image of unit 0", "image of unit 1"}));
    EXPECT_EQ(t.generations[1], 7u);
  }
  EXPECT_EQ(t.Applied(1), std::vector<int64_t>({5, 8}));
  auto member = [&] { return t.sets[1]->view().Has(1); };
  for (int i = 0; i < 300 && !member(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(member()) << t.sets[1]->view().DebugString();
  EXPECT_EQ(t.sets[1]->view().primaries, std::vector<int>({0, 2, 2}));
}

TEST(ReplicaSetTest, ABackupSilentForLessThanTheLeaseIsWaitedFor) {
  Trio t(absl::Seconds(30));
  t.up[1] = false;
  std::thread heal([&] {
    absl::SleepFor(absl::Milliseconds(400));
    t.up[1] = true;
  });
  const absl::Time start = absl::Now();
  EXPECT_TRUE(t.sets[0]->Forward({Trio::Update(0, 0)}, {}).ok());
  heal.join();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(400));
  // Nobody was taken out; the backup holds the update.
  EXPECT_EQ(t.sets[0]->view().number, 0);
  EXPECT_EQ(t.Applied(1), std::vector<int64_t>({0}));
  EXPECT_FALSE(t.sets[0]->fenced());
}

// A killed backup: its host refuses connections, and it is taken out after
// gone_after (150 ms), not after the lease (the kill -9 of
// tests/replication_test.py stalled a step for the lease).
TEST(ReplicaSetTest, ABackupWhoseHostRefusesIsTakenOutBeforeTheLease) {
  Trio t(absl::Seconds(30));
  t.up[1] = false;
  t.refuses[1] = true;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(t.sets[0]->Forward({Trio::Update(0, 0)}, {}).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(t.sets[0]->view().members, std::vector<int>({0, 2}));
  EXPECT_TRUE(t.Applied(1).empty());
}

TEST(ReplicaSetTest, APrimaryThatCannotReachAMajorityIsFenced) {
  Trio t;
  t.up[1] = false;
  t.up[2] = false;
  absl::Status s = t.sets[0]->Forward({Trio::Update(0, 0)}, {});
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("could not reach the backups"));
  EXPECT_TRUE(t.sets[0]->fenced());
  // It serves nothing now, not even the shard it is primary of in its view.
  EXPECT_EQ(t.sets[0]->view().number, 0);
  absl::Status serves = t.sets[0]->CheckServes(0, 0);
  EXPECT_TRUE(absl::IsUnavailable(serves)) << serves;
  EXPECT_THAT(serves.message(), HasSubstr("pserver 0 is fenced"));
  EXPECT_TRUE(
      absl::IsUnavailable(t.sets[0]->Forward({Trio::Update(0, 1)}, {})));
  // Healed: it demotes itself to joining (no one's primary, unfenced),
  // and shard 0 goes to its backup.
  t.up[1] = true;
  t.up[2] = true;
  t.sets[0]->set_units({{0, 0}, {0, 2}});
  t.sets[0]->Watch();
  // Its own join loop clears the fence once the view is agreed.
  auto joining = [&] {
    return t.sets[1]->view().joining.size() == 1 && !t.sets[0]->fenced();
  };
  for (int i = 0; i < 300 && !joining(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(joining()) << t.sets[1]->view().DebugString();
  EXPECT_EQ(t.sets[1]->view().joining, std::vector<int>({0}));
  EXPECT_EQ(t.sets[1]->PrimaryShards(), std::vector<int>({0, 1}));
  EXPECT_FALSE(t.sets[0]->fenced());
}

TEST(ReplicaSetTest, APserverOutOfTheViewTakesNobodyOut) {
  Trio t;
  t.up[0] = false;
  ASSERT_TRUE(t.sets[1]->ChangeView({0}, {}).ok());
  t.up[0] = true;
  // Pserver 0, behind and out, asks to take pserver 1 out: it learns the
  // newest view in the proposal and is refused.
  absl::StatusOr<View> v = t.sets[0]->ChangeView({1}, {});
  EXPECT_TRUE(absl::IsFailedPrecondition(v.status())) << v.status();
  EXPECT_THAT(v.status().message(),
              HasSubstr("pserver 0 is not a member of view 1"));
  EXPECT_EQ(t.sets[2]->view().members, std::vector<int>({1, 2}));
  EXPECT_EQ(t.sets[2]->view().number, 1);
}

TEST(ReplicaSetTest, AViewThatLeavesAShardWithNoCopyIsRefused) {
  Trio t;
  ASSERT_TRUE(t.sets[0]->ChangeView({1}, {}).ok());
  // Shard 1 lives on pservers 1 and 2: without 2 as well it has no copy.
  absl::StatusOr<View> v = t.sets[0]->ChangeView({2}, {});
  EXPECT_TRUE(absl::IsFailedPrecondition(v.status())) << v.status();
  EXPECT_THAT(v.status().message(),
              HasSubstr("would leave shard(s) {1} with no member"));
  EXPECT_EQ(t.sets[0]->view().members, std::vector<int>({0, 2}));
}

TEST(ReplicaSetTest, ALivePserverTakenOutRejoinsByItself) {
  Trio t;
  t.sets[1]->set_units({{0, 0}, {0, 1}});
  t.up[1] = false;
  ASSERT_TRUE(t.sets[0]->ChangeView({1}, {}).ok());
  t.up[1] = true;
  // It does not know yet; its watch asks the others and learns it.
  EXPECT_EQ(t.sets[1]->view().number, 0);
  t.sets[1]->Watch();
  // Every pserver knows the joining view (commits reach them in parallel).
  auto joining = [&] {
    for (const auto& set : t.sets) {
      if (set->view().joining.size() != 1) return false;
    }
    return true;
  };
  for (int i = 0; i < 300 && !joining(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(joining()) << t.sets[0]->view().DebugString();
  ASSERT_TRUE(t.sets[0]->Forward({Trio::Update(0, 5)}, {}).ok());
  ASSERT_TRUE(t.sets[2]->Forward({Trio::Update(1, 8)}, {}).ok());
  auto member = [&] { return t.sets[1]->view().Has(1); };
  for (int i = 0; i < 300 && !member(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(member()) << t.sets[1]->view().DebugString();
  EXPECT_EQ(t.Applied(1), std::vector<int64_t>({5, 8}));
}

TEST(ReplicaSetTest, HostileMessagesAreRefused) {
  Trio t;
  ForwardRequest req;
  req.mutable_view()->add_members(2);
  req.mutable_view()->add_members(1);  // not ascending
  ForwardResponse resp;
  EXPECT_TRUE(absl::IsInvalidArgument(t.sets[1]->HandleForward(req, &resp)));
  // A sender that is not the unit's primary: not applied.
  req.Clear();
  ToMessage(t.sets[1]->view(), req.mutable_view());
  req.set_sender(2);
  ToMessage(Trio::Update(0, 0), req.add_updates());
  ASSERT_TRUE(t.sets[1]->HandleForward(req, &resp).ok());
  EXPECT_FALSE(resp.applied());
  EXPECT_TRUE(t.Applied(1).empty());
  // An install from a pserver that is not the primary.
  InstallUnitRequest install;
  ToMessage(t.sets[1]->view(), install.mutable_view());
  install.set_sender(2);
  install.set_unit(0);
  EXPECT_TRUE(absl::IsFailedPrecondition(t.sets[1]->HandleInstall(install)));
  // A view change naming a pserver that does not exist.
  EXPECT_TRUE(absl::IsInvalidArgument(t.sets[0]->ChangeView({7}, {}).status()));
  ViewMessage bad;
  bad.add_members(0);
  bad.add_primaries(2);  // not a member
  EXPECT_TRUE(absl::IsInvalidArgument(FromMessage(bad).status()));
}

}  // namespace
}  // namespace shardps
