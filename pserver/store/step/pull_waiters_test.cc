// The pulls that wait: answered by whoever releases the last hold, timed
// out and reported by Scan, closed on shutdown; and a pull answered at once
// is never watched.
#include "pserver/store/step/pull_waiters.h"

#include <memory>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

struct Answer {
  int calls = 0;
  absl::Status status;
  absl::Duration waited;
};

WaiterPtr NewPull(const FakeClock& clock, Answer* a, int holds) {
  auto w = std::make_shared<PullWaiter>();
  w->start = clock.Now();
  w->done = [a](absl::Status s, absl::Duration d) {
    ++a->calls;
    a->status = s;
    a->waited = d;
  };
  w->pending.store(holds + 1);  // + the registration's own hold
  return w;
}

TEST(PullWaitersTest, AnsweredOnceTheLastHoldIsReleased) {
  FakeClock clock;
  Answer a;  // outlives `waiters`, which answers on destruction
  std::atomic<UpdateForwarder*> no_forwarder{nullptr};
  PullWaiters waiters(&clock, &no_forwarder);
  WaiterPtr w = NewPull(clock, &a, /*holds=*/2);
  waiters.Start(w);
  EXPECT_EQ(waiters.size(), 1u);
  clock.Advance(absl::Milliseconds(30));
  waiters.Release(w);
  EXPECT_EQ(a.calls, 0);
  waiters.Release(w);
  EXPECT_EQ(a.calls, 1);
  EXPECT_TRUE(a.status.ok());
  EXPECT_EQ(a.waited, absl::Milliseconds(30));
  EXPECT_EQ(waiters.size(), 0u);
  waiters.Finish(w, absl::InternalError("late"));  // answered once only
  EXPECT_EQ(a.calls, 1);
}

TEST(PullWaitersTest, APullWithNothingToWaitForIsNeverWatched) {
  FakeClock clock;
  Answer a;  // outlives `waiters`, which answers on destruction
  std::atomic<UpdateForwarder*> no_forwarder{nullptr};
  PullWaiters waiters(&clock, &no_forwarder);
  waiters.Start(NewPull(clock, &a, 0));
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(waiters.size(), 0u);
}

TEST(PullWaitersTest, ScanFindsExpiredPullsAndReportsEachOnce) {
  FakeClock clock;
  Answer a, b;  // outlives `waiters`, which answers on destruction
  std::atomic<UpdateForwarder*> no_forwarder{nullptr};
  PullWaiters waiters(&clock, &no_forwarder);
  WaiterPtr old = NewPull(clock, &a, 1);
  waiters.Start(old);
  clock.Advance(absl::Seconds(6));
  WaiterPtr young = NewPull(clock, &b, 1);
  waiters.Start(young);
  std::vector<WaiterPtr> expired, report;
  waiters.Scan(clock.Now(), absl::Seconds(20), absl::Seconds(5), &expired,
               &report);
  EXPECT_TRUE(expired.empty());
  EXPECT_EQ(report, std::vector<WaiterPtr>{old});
  report.clear();
  clock.Advance(absl::Seconds(15));
  waiters.Scan(clock.Now(), absl::Seconds(20), absl::Seconds(5), &expired,
               &report);
  EXPECT_EQ(expired, std::vector<WaiterPtr>{old});
  EXPECT_EQ(report, std::vector<WaiterPtr>{young});  // reported once each
}

TEST(PullWaitersTest, CloseAnswersEveryWatchedPullAndEveryLaterOne) {
  FakeClock clock;
  Answer a, b;  // outlives `waiters`, which answers on destruction
  std::atomic<UpdateForwarder*> no_forwarder{nullptr};
  PullWaiters waiters(&clock, &no_forwarder);
  waiters.Start(NewPull(clock, &a, 1));
  waiters.Close(absl::UnavailableError("stopping"));
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(a.status.code(), absl::StatusCode::kUnavailable);
  waiters.Start(NewPull(clock, &b, 1));
  EXPECT_EQ(b.calls, 1);
  EXPECT_EQ(b.status.message(), "pserver is shutting down");
}

TEST(PullWaitersTest, WaitForSizeReturnsWhenAPullIsHeld) {
  FakeClock clock;
  Answer a;  // outlives `waiters`, which answers on destruction
  std::atomic<UpdateForwarder*> no_forwarder{nullptr};
  PullWaiters waiters(&clock, &no_forwarder);
  EXPECT_FALSE(waiters.WaitForSize(1, absl::Milliseconds(1)));
  waiters.Start(NewPull(clock, &a, 1));
  EXPECT_TRUE(waiters.WaitForSize(1, absl::Seconds(10)));
}

}  // namespace
}  // namespace shardps
