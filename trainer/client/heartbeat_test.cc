#include "trainer/client/heartbeat.h"

#include <atomic>
#include <functional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

// Answers heartbeats with a settable status and counts them; every other
// call is unused here.
class HeartbeatServer : public PsClientInterface {
 public:
  const std::string& address() const override { return name_; }
  void InitJobAsync(const InitJobRequest&, InitJobResponse*,
                    StatusCallback done) override {
    done(absl::UnimplementedError(""));
  }
  void SetInitialValuesAsync(const SetInitialValuesRequest&,
                             SetInitialValuesResponse*,
                             StatusCallback done) override {
    done(absl::UnimplementedError(""));
  }
  void CommitInitAsync(const CommitInitRequest&, CommitInitResponse*,
                       StatusCallback done) override {
    done(absl::UnimplementedError(""));
  }
  void RegisterAsync(const RegisterRequest&, RegisterResponse*,
                     StatusCallback done) override {
    done(absl::UnimplementedError(""));
  }
  void GetStatusAsync(const GetStatusRequest&, GetStatusResponse*,
                      StatusCallback done) override {
    done(absl::UnimplementedError(""));
  }
  void PullAsync(const PullRequest&, PullResponse*,
                 StatusCallback done) override {
    done(absl::UnimplementedError(""));
  }
  void PushAsync(const PushRequest&, PushResponse*,
                 StatusCallback done) override {
    done(absl::UnimplementedError(""));
  }
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
  void LeaveAsync(const LeaveRequest&, LeaveResponse*,
                  StatusCallback done) override {
    done(absl::UnimplementedError(""));
  }
  void CheckpointAsync(const CheckpointRequest&, CheckpointResponse*,
                       StatusCallback done) override {
    done(absl::UnimplementedError(""));
  }
  void RollbackAsync(const RollbackRequest&, RollbackResponse*,
                     StatusCallback done) override {
    done(absl::UnimplementedError(""));
  }

  void set_reply(absl::Status s) {
    absl::MutexLock l(&mu_);
    reply_ = std::move(s);
  }
  int count() {
    absl::MutexLock l(&mu_);
    return count_;
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
  const std::string name_ = "fake";
  absl::Mutex mu_;
  absl::Status reply_ ABSL_GUARDED_BY(mu_);
  int count_ ABSL_GUARDED_BY(mu_) = 0;
  int last_trainer_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t last_incarnation_ ABSL_GUARDED_BY(mu_) = 0;
};

bool WaitFor(const std::function<bool()>& done) {
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > limit) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

TEST(HeartbeaterTest, BeatsEveryServerUntilStopped) {
  HeartbeatServer a, b;
  Heartbeater hb({&a, &b}, 3, 77, absl::Milliseconds(10));
  ASSERT_TRUE(WaitFor([&] { return a.count() >= 3 && b.count() >= 3; }));
  EXPECT_EQ(a.last_trainer(), 3);
  EXPECT_EQ(b.last_incarnation(), 77u);
  EXPECT_TRUE(hb.status().ok());
  hb.Stop();
  const int after = a.count();
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(a.count(), after);
  hb.Stop();  // idempotent
}

TEST(HeartbeaterTest, ReportsADroppedTrainerAndIgnoresUnreachable) {
  HeartbeatServer a, b;
  a.set_reply(absl::UnavailableError("pserver down"));
  Heartbeater hb({&a, &b}, 0, 1, absl::Milliseconds(10));
  ASSERT_TRUE(WaitFor([&] { return a.count() >= 2; }));
  EXPECT_TRUE(hb.status().ok()) << hb.status();
  b.set_reply(absl::FailedPreconditionError("trainer 0 was dropped"));
  ASSERT_TRUE(WaitFor([&] { return !hb.status().ok(); }));
  EXPECT_EQ(hb.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(hb.status().message(), "trainer 0 was dropped");
  b.set_reply(absl::OkStatus());
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(hb.status().ok());  // sticky
}

}  // namespace
}  // namespace shardps
