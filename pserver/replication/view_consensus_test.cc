#include "pserver/replication/view_consensus.h"

#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

View Initial(int n) {
  View v;
  for (int i = 0; i < n; ++i) v.members.push_back(i);
  return v;
}

// An acceptor in this process, reachable or not, phase by phase; it logs
// every view it commits.
class LocalPeer final : public ViewPeer {
 public:
  explicit LocalPeer(int n)
      : acceptor_(AcceptorState{Initial(n), {}, {}, {}}) {}

  absl::StatusOr<ViewAcceptor::PrepareReply> Prepare(
      int64_t number, const Ballot& ballot) override {
    absl::MutexLock l(&mu_);
    if (!Reachable()) return absl::UnavailableError("down");
    return acceptor_.Prepare(number, ballot);
  }
  absl::StatusOr<bool> Accept(int64_t number, const Ballot& ballot,
                              const View& view) override {
    absl::MutexLock l(&mu_);
    if (!Reachable() || refuse_accepts_) return absl::UnavailableError("down");
    return acceptor_.Accept(number, ballot, view);
  }
  absl::Status Commit(const View& view) override {
    absl::MutexLock l(&mu_);
    if (!Reachable() || refuse_commits_) return absl::UnavailableError("down");
    acceptor_.Commit(view);
    committed_log_.push_back(acceptor_.state().committed);
    return absl::OkStatus();
  }
  absl::StatusOr<AcceptorState> Inspect() override {
    absl::MutexLock l(&mu_);
    if (!Reachable()) return absl::UnavailableError("down");
    return acceptor_.state();
  }

  View committed() {
    absl::MutexLock l(&mu_);
    return acceptor_.state().committed;
  }
  std::vector<View> log() {
    absl::MutexLock l(&mu_);
    return committed_log_;
  }
  void set_up(bool up) {
    absl::MutexLock l(&mu_);
    up_ = up;
  }
  void set_refuse_accepts(bool r) {
    absl::MutexLock l(&mu_);
    refuse_accepts_ = r;
  }
  void set_refuse_commits(bool r) {
    absl::MutexLock l(&mu_);
    refuse_commits_ = r;
  }
  // Each call fails with probability `p` (the random test).
  void set_drop_rate(double p, uint32_t seed) {
    absl::MutexLock l(&mu_);
    drop_ = p;
    rng_.seed(seed);
  }

 private:
  bool Reachable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!up_) return false;
    return drop_ == 0 || std::uniform_real_distribution<>(0, 1)(rng_) >= drop_;
  }

  absl::Mutex mu_;
  ViewAcceptor acceptor_ ABSL_GUARDED_BY(mu_);
  std::vector<View> committed_log_ ABSL_GUARDED_BY(mu_);
  bool up_ ABSL_GUARDED_BY(mu_) = true;
  bool refuse_accepts_ ABSL_GUARDED_BY(mu_) = false;
  bool refuse_commits_ ABSL_GUARDED_BY(mu_) = false;
  double drop_ ABSL_GUARDED_BY(mu_) = 0;
  std::mt19937 rng_ ABSL_GUARDED_BY(mu_);
};

class ViewConsensusTest : public ::testing::Test {
 protected:
  void Make(int n) {
    for (int i = 0; i < n; ++i) {
      owned_.push_back(std::make_unique<LocalPeer>(n));
      peers_.push_back(owned_.back().get());
    }
  }
  LocalPeer& peer(int i) { return *owned_[i]; }

  std::vector<std::unique_ptr<LocalPeer>> owned_;
  std::vector<ViewPeer*> peers_;
};

TEST_F(ViewConsensusTest, AMajorityRemovesADeadPserver) {
  Make(3);
  peer(2).set_up(false);
  absl::StatusOr<View> v = ProposeView(peers_, 7, WithoutServer(2));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (View{1, {0, 1}, {}, {}}));
  EXPECT_EQ(peer(0).committed(), *v);
  EXPECT_EQ(peer(1).committed(), *v);
  EXPECT_EQ(peer(2).committed(), (View{0, {0, 1, 2}, {}, {}}));
  // Proposing the same change again decides nothing new.
  v = ProposeView(peers_, 8, WithoutServer(2));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->number, 1);
}

TEST_F(ViewConsensusTest, WithoutAMajorityNoViewIsMade) {
  Make(3);
  peer(1).set_up(false);
  peer(2).set_up(false);
  absl::StatusOr<View> v = ProposeView(peers_, 0, WithoutServer(2), 5);
  EXPECT_TRUE(absl::IsUnavailable(v.status())) << v.status();
  EXPECT_EQ(peer(0).committed().number, 0);
}

TEST_F(ViewConsensusTest, ALaggingPserverLearnsAndTakesPart) {
  Make(3);
  peer(2).set_up(false);
  ASSERT_TRUE(ProposeView(peers_, 0, WithoutServer(2)).ok());
  // Pserver 2 restarts and asks to come back, with pserver 0 down.
  peer(2).set_up(true);
  peer(0).set_up(false);
  absl::StatusOr<View> v = ProposeView(peers_, 2, WithServer(2));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (View{2, {0, 1, 2}, {}, {}}));
  EXPECT_EQ(peer(1).committed(), *v);
  EXPECT_EQ(peer(2).committed(), *v);
}

TEST_F(ViewConsensusTest, AViewAMajorityAcceptedIsNeverReplaced) {
  Make(3);
  // Proposer 1 gets view 1 without pserver 2 accepted by pservers 0 and 1
  // (decided), then no commit reaches anyone: it died.
  for (int i = 0; i < 3; ++i) peer(i).set_refuse_commits(true);
  peer(2).set_refuse_accepts(true);
  // (Two rounds: one learns view 0, one decides view 1.)
  ProposeView(peers_, 1, WithoutServer(2), 2).IgnoreError();
  for (int i = 0; i < 3; ++i) {
    peer(i).set_refuse_commits(false);
    peer(i).set_refuse_accepts(false);
    EXPECT_EQ(peer(i).committed().number, 0);
  }
  // Proposer 2 wants pserver 0 out: view 1 must still be proposer 1's,
  // and its own change comes as view 2.
  absl::StatusOr<View> v = ProposeView(peers_, 2, WithoutServer(0));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (View{2, {1}, {}, {}}));
  const std::vector<View> log = peer(1).log();
  ASSERT_GE(log.size(), 2u);
  EXPECT_EQ(log[log.size() - 2], (View{1, {0, 1}, {}, {}}));
}

TEST_F(ViewConsensusTest, ConcurrentProposersNeverDecideTwoViewsForANumber) {
  Make(5);
  for (int i = 0; i < 5; ++i) peer(i).set_drop_rate(0.2, 100 + i);
  // Four proposers, each removing one pserver and adding it back, over
  // lossy links, at once.
  std::vector<std::thread> threads;
  for (int p = 0; p < 4; ++p) {
    threads.emplace_back([this, p] {
      for (int k = 0; k < 5; ++k) {
        ProposeView(peers_, p, WithoutServer(p), 50).IgnoreError();
        ProposeView(peers_, p, WithServer(p), 50).IgnoreError();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::map<int64_t, View> decided;
  int commits = 0;
  for (int i = 0; i < 5; ++i) {
    for (const View& v : peer(i).log()) {
      ++commits;
      auto [it, fresh] = decided.emplace(v.number, v);
      EXPECT_EQ(it->second, v) << "two views numbered " << v.number;
    }
  }
  EXPECT_GT(decided.size(), 4u) << "too few views decided: the test is void";
  EXPECT_GT(commits, 10);
}

}  // namespace
}  // namespace shardps
