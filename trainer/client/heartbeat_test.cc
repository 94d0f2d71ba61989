#include "trainer/client/heartbeat.h"

#include <string>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "trainer/transport/testing/fake_ps_client.h"

namespace shardps {
namespace {

// Answers heartbeats with a settable status and counts them.
class HeartbeatServer : public testing::FakePsClient {
 public:
  void HeartbeatAsync(const HeartbeatRequest& req, HeartbeatResponse*,
                      StatusCallback done) override {
    absl::Status reply;
    {
      absl::MutexLock l(&mu_);
      ++count_;
      last_trainer_ = req.trainer_id();
      last_incarnation_ = req.incarnation();
      reply = reply_;
    }
    done(reply);
  }

  void set_reply(absl::Status s) {
    absl::MutexLock l(&mu_);
    reply_ = std::move(s);
  }
  int count() {
    absl::MutexLock l(&mu_);
    return count_;
  }
  // Blocks until `n` heartbeats came (or 10 s passed); whether they did.
  bool WaitForCount(int n) {
    absl::MutexLock l(&mu_);
    auto reached = [this, n]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return count_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(10));
  }
  int last_trainer() {
    absl::MutexLock l(&mu_);
    return last_trainer_;
  }
  uint64_t last_incarnation() {
    absl::MutexLock l(&mu_);
    return last_incarnation_;
  }

 private:
  absl::Mutex mu_;
  absl::Status reply_ ABSL_GUARDED_BY(mu_);
  int count_ ABSL_GUARDED_BY(mu_) = 0;
  int last_trainer_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t last_incarnation_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(HeartbeaterTest, EachRoundBeatsEveryServerUntilStopped) {
  HeartbeatServer a, b;
  Heartbeater hb({&a, &b}, 3, 77, absl::Seconds(1));
  hb.Beat();
  hb.Beat();
  EXPECT_EQ(a.count(), 2);
  EXPECT_EQ(b.count(), 2);
  EXPECT_EQ(a.last_trainer(), 3);
  EXPECT_EQ(b.last_incarnation(), 77u);
  EXPECT_TRUE(hb.status().ok());
  hb.Stop();
  hb.Beat();  // nothing once stopped
  EXPECT_EQ(a.count(), 2);
  hb.Stop();  // idempotent
}

TEST(HeartbeaterTest, TheThreadBeatsEveryInterval) {
  HeartbeatServer a, b;
  Heartbeater hb({&a, &b}, 0, 1, absl::Milliseconds(10));
  hb.Start();
  ASSERT_TRUE(a.WaitForCount(3));
  ASSERT_TRUE(b.WaitForCount(3));
  hb.Stop();
  const int after = a.count();
  hb.Beat();
  EXPECT_EQ(a.count(), after);
}

TEST(HeartbeaterTest, ReportsADroppedTrainerAndIgnoresUnreachable) {
  HeartbeatServer a, b;
  a.set_reply(absl::UnavailableError("pserver down"));
  Heartbeater hb({&a, &b}, 0, 1, absl::Seconds(1));
  hb.Beat();
  hb.Beat();
  EXPECT_EQ(a.count(), 2);
  EXPECT_TRUE(hb.status().ok()) << hb.status();
  b.set_reply(absl::FailedPreconditionError("trainer 0 was dropped"));
  hb.Beat();
  EXPECT_EQ(hb.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(hb.status().message(), "trainer 0 was dropped");
  b.set_reply(absl::OkStatus());
  hb.Beat();
  EXPECT_FALSE(hb.status().ok());  // sticky
}

}  // namespace
}  // namespace shardps
