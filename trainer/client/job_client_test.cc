// JobClient against in-process pservers (InProcessPsClient over their
// request handlers): set-up, readiness, joining, leaving, checkpoints and
// rollbacks on every pserver at once.
#include "trainer/client/job_client.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/testing/temp_dir.h"
#include "common/transport/in_process_ps_client.h"
#include "gtest/gtest.h"
#include "pserver/server/call_table.h"
#include "pserver/server/pserver.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

// A pserver that has stopped as far as its client can tell: calls are
// never answered (a gRPC client would retry them until --rpc_retry_s),
// until the client goes, when they end CANCELLED.
class SilentClient final : public PsClientInterface {
 public:
  ~SilentClient() override {
    for (StatusCallback& done : held_) done(absl::CancelledError("closed"));
  }
  const std::string& address() const override { return address_; }
  void CallAsync(PsRpc rpc, const google::protobuf::Message& req,
                 google::protobuf::Message* resp,
                 StatusCallback done) override {
    absl::MutexLock l(&mu_);
    held_.push_back(std::move(done));
  }
  int held() {
    absl::MutexLock l(&mu_);
    return static_cast<int>(held_.size());
  }

 private:
  const std::string address_ = "silent:7164";
  absl::Mutex mu_;
  std::vector<StatusCallback> held_;
};

class JobClientTest : public ::testing::Test {
 protected:
  // Two pservers; with `checkpoints`, each with a checkpoint directory.
  void Start(bool checkpoints) {
    for (int s = 0; s < 2; ++s) {
      PserverOptions o;
      if (checkpoints) o.checkpoint_dir = tmp_.Path(absl::StrCat("ps", s));
      servers_.push_back(std::move(*Pserver::Create(o)));
      ASSERT_TRUE(servers_.back()->Start().ok());
      targets_.push_back(
          std::make_unique<SingleJobTarget>(servers_.back()->handler()));
      clients_.push_back(std::make_unique<InProcessPsClient>(
          targets_.back().get(), absl::StrCat("pserver-", s)));
      ptrs_.push_back(clients_.back().get());
    }
  }

  JobSpec Job() {
    return testing::MakeJobSpec(
        SYNC, 1, {testing::DenseTableSpec("w", 6, 2, testing::Sgd(1.0f))});
  }
  ChunkPlan Plan() { return PlanChunks({{"w", 6, 2}}, 2, size_t{1} << 20); }

  testing::ScopedTempDir tmp_{"job_client_test"};
  std::vector<std::unique_ptr<Pserver>> servers_;
  std::vector<std::unique_ptr<SingleJobTarget>> targets_;
  std::vector<std::unique_ptr<InProcessPsClient>> clients_;
  std::vector<PsClientInterface*> ptrs_;
};

TEST_F(JobClientTest, InitWaitJoinAndLeave) {
  Start(false);
  RequestStamp stamp(0, /*incarnation=*/5);
  JobClient client(ptrs_, &stamp);
  ASSERT_TRUE(client.Register().ok());
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(client.InitJob(Job(), Plan(), {w.data()}).ok());
  ASSERT_TRUE(client.WaitUntilReady(Job(), absl::Seconds(5)).ok());
  auto start = client.Join();
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(*start, 0);
  auto st = client.Statuses();
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->size(), 2u);
  EXPECT_TRUE((*st)[1].job_ready());
  EXPECT_EQ((*st)[0].live_trainers_size(), 1);
  ASSERT_TRUE(client.Leave().ok());
  st = client.Statuses();
  EXPECT_EQ((*st)[0].live_trainers_size(), 0);
  // Another spec than the pservers hold is named.
  JobSpec other = Job();
  other.mutable_tables(0)->set_block_size(3);
  absl::Status s = client.WaitUntilReady(other, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("pserver pserver-0 holds a job that differs"),
            std::string::npos)
      << s;
}

TEST_F(JobClientTest, FinishAndWaitWaitsUntilEveryTrainerHasFinished) {
  Start(false);
  JobSpec job = testing::MakeJobSpec(
      SYNC, 2, {testing::DenseTableSpec("w", 6, 2, testing::Sgd(1.0f))});
  RequestStamp stamp0(0, 5), stamp1(1, 6);
  JobClient chief(ptrs_, &stamp0), other(ptrs_, &stamp1);
  ASSERT_TRUE(chief.Register().ok());
  ASSERT_TRUE(other.Register().ok());
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(chief.InitJob(job, Plan(), {w.data()}).ok());
  ASSERT_TRUE(chief.WaitUntilReady(job, absl::Seconds(5)).ok());
  // A plain Leave (the barrier only, before a sync trainer's final
  // evaluation) is not finishing.
  ASSERT_TRUE(other.Leave().ok());
  absl::Status s = chief.FinishAndWait(2, absl::Milliseconds(300), nullptr,
                                       absl::Milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("trainer(s) 1 had not finished after"),
            std::string::npos)
      << s;
  auto st = chief.Statuses();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ((*st)[0].finished_trainers_size(), 1);  // trainer 0 said so
  std::atomic<bool> stop{true};
  s = chief.FinishAndWait(2, absl::Seconds(60), &stop, absl::Milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  // Both wait for each other, and both go on.
  absl::Status other_done;
  std::thread t([&] {
    other_done = other.FinishAndWait(2, absl::Seconds(30), nullptr,
                                     absl::Milliseconds(20));
  });
  s = chief.FinishAndWait(2, absl::Seconds(30), nullptr,
                          absl::Milliseconds(20));
  t.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(other_done.ok()) << other_done;
  st = chief.Statuses();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ((*st)[1].finished_trainers_size(), 2);
  // A pserver that no longer answers (its pod stopped with its trainer)
  // holds up nothing, and is asked once while its call is unanswered.
  SilentClient gone;
  JobClient last({&gone, ptrs_[1]}, &stamp1);
  const absl::Time start = absl::Now();
  s = last.FinishAndWait(2, absl::Seconds(30), nullptr, absl::Milliseconds(20));
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  JobClient stuck({&gone}, &stamp1);
  s = stuck.FinishAndWait(2, absl::Milliseconds(200), nullptr,
                          absl::Milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(gone.held(), 2);  // one call per wait, not one per round
}

TEST_F(JobClientTest, WaitUntilReadyNamesThePserversNotReady) {
  Start(false);
  RequestStamp stamp(1);
  JobClient client(ptrs_, &stamp);
  absl::Status s = client.WaitUntilReady(Job(), absl::Milliseconds(150));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("pserver-0, pserver-1"), std::string::npos) << s;
}

TEST_F(JobClientTest, CheckpointsAndRollbackOnEveryPserver) {
  Start(true);
  RequestStamp stamp(0, 1);
  JobClient client(ptrs_, &stamp);
  ASSERT_TRUE(client.Register().ok());
  const std::vector<float> w(6, 1.0f);
  ASSERT_TRUE(client.InitJob(Job(), Plan(), {w.data()}).ok());
  ASSERT_TRUE(client.Checkpoint(0).ok());
  for (auto& s : servers_) s->Stop();  // flushes the checkpoint writes
  auto st = client.Statuses();
  ASSERT_TRUE(st.ok()) << st.status();
  for (const auto& r : *st) EXPECT_EQ(r.checkpoint_steps_size(), 1);
  ASSERT_TRUE(client.Rollback(0, 1).ok());
  st = client.Statuses();
  for (const auto& r : *st) EXPECT_EQ(r.generation(), 1u);
  EXPECT_EQ(client.Rollback(0, 1).code(), absl::StatusCode::kOk);  // again
}

TEST_F(JobClientTest, InProcessAnswersComeOnTheClientsOwnThread) {
  Start(false);
  GetStatusRequest req;
  GetStatusResponse resp;
  absl::Notification done;
  std::thread::id answered;
  clients_[0]->GetStatusAsync(req, &resp, [&](absl::Status s) {
    answered = std::this_thread::get_id();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_NE(answered, std::this_thread::get_id());
  EXPECT_FALSE(resp.job_ready());
}

}  // namespace
}  // namespace shardps
