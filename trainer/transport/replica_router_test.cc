// ReplicaRouter against scripted pservers: what a trainer does when a
// shard's primary moves (docs/replication.md, "Failover").
#include "trainer/transport/replica_router.h"

#include <deque>
#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "trainer/transport/testing/fake_ps_client.h"

namespace shardps {
namespace {

// Answers each call with the next scripted status for its method (OK when
// none is left); a ChangeView that is answered OK returns `view`. Counts
// the pushes of each step.
class ScriptedPserver : public testing::FakePsClient {
 public:
  explicit ScriptedPserver(std::string address) : FakePsClient(address) {}

  void CallAsync(PsRpc rpc, const google::protobuf::Message& req,
                 google::protobuf::Message* resp,
                 StatusCallback done) override {
    absl::Status s;
    {
      absl::MutexLock l(&mu_);
      std::deque<absl::Status>& script = script_[rpc];
      if (!script.empty()) {
        s = script.front();
        script.pop_front();
      }
      if (rpc == PsRpc::kPush) {
        ++pushes_[static_cast<const PushRequest&>(req).step()];
      }
      if (rpc == PsRpc::kChangeView && s.ok()) {
        *static_cast<ChangeViewResponse*>(resp)->mutable_view() = view_;
      }
    }
    done(s);
  }

  void Then(PsRpc rpc, absl::Status s) {
    absl::MutexLock l(&mu_);
    script_[rpc].push_back(std::move(s));
  }
  void set_view(const ViewMessage& v) {
    absl::MutexLock l(&mu_);
    view_ = v;
  }
  // Waits up to 5 s for `n` pushes of `step`; the count then.
  int WaitForPushes(int64_t step, int n) {
    const absl::Time until = absl::Now() + absl::Seconds(5);
    while (Pushes(step) < n && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    return Pushes(step);
  }
  int Pushes(int64_t step) {
    absl::MutexLock l(&mu_);
    return pushes_[step];
  }

 private:
  absl::Mutex mu_;
  std::map<PsRpc, std::deque<absl::Status>> script_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, int> pushes_ ABSL_GUARDED_BY(mu_);
  ViewMessage view_ ABSL_GUARDED_BY(mu_);
};

// The new primary of a shard has not learned the view yet when the trainer
// sends it, again, a push the old primary acknowledged: it answers "not the
// primary". The push is sent again until it takes it (found as a job stuck
// under 10% packet loss: the step waited for that push until the trainers
// gave up).
TEST(ReplicaRouterTest, APushSentAgainToAPrimaryBehindTheViewIsSentUntilTaken) {
  ScriptedPserver s0("ps0"), s1("ps1"), s2("ps2");
  ReplicaRouter::Options o;
  o.replication = 2;
  o.sync = true;
  o.trainer_id = 1;
  o.give_up_after = absl::Seconds(20);
  ReplicaRouter router({&s0, &s1, &s2}, o);
  PsClientInterface* shard2 = router.shard_clients()[2];
  ASSERT_EQ(router.Primary(2), 2);

  // Step 0's push, acknowledged by pserver 2.
  PushRequest push;
  push.set_trainer_id(1);
  push.set_step(0);
  push.set_request_id(77);
  PushResponse presp;
  ASSERT_TRUE(shard2->Push(push, &presp).ok());

  // Pserver 2 has been taken out: the pull is moved, the trainer learns
  // view 1 from pserver 0, which is shard 2's primary there but answers
  // the push sent again as if in view 0, twice, before it learns view 1.
  ViewMessage v1;
  v1.set_number(1);
  for (int m : {0, 1}) v1.add_members(m);
  for (int p : {0, 1, 0}) v1.add_primaries(p);
  s0.set_view(v1);
  s1.set_view(v1);
  s2.Then(PsRpc::kPull, absl::FailedPreconditionError(
                            "pserver 2 is not the primary of shard 2 in view "
                            "1 {0,1} primaries [0,1,0] (its primary is "
                            "pserver 0)"));
  for (int i = 0; i < 2; ++i) {
    s0.Then(PsRpc::kPush, absl::FailedPreconditionError(
                              "pserver 0 is not the primary of shard 2 in "
                              "view 0 {0,1,2} (its primary is pserver 2)"));
  }
  PullRequest pull;
  pull.set_trainer_id(1);
  PullResponse pull_resp;
  ASSERT_TRUE(shard2->Pull(pull, &pull_resp).ok());
  EXPECT_EQ(router.Primary(2), 0);
  EXPECT_EQ(router.view_number(), 1);
  // Refused twice, taken the third time.
  EXPECT_EQ(s0.WaitForPushes(0, 3), 3);
}

}  // namespace
}  // namespace shardps
