#include "common/shared_memory/shared_calls.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "proto/ps_service.pb.h"

namespace shardps {
namespace {

using shared_calls::kAreaBytes;
using shared_calls::kBellBytes;
using shared_calls::kPull;
using shared_calls::kPush;
using shared_calls::kSlotBytes;

// A pserver side and a trainer side of one region, in this process.
class SharedCallsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto owner = SharedRegion::Create(SharedRegion::kHeaderBytes + kAreaBytes);
    ASSERT_TRUE(owner.ok()) << owner.status();
    owner_ = *std::move(owner);
    auto peer = SharedRegion::Attach(getpid(), owner_->fd(), owner_->size(),
                                     owner_->token());
    ASSERT_TRUE(peer.ok()) << peer.status();
    peer_ = *std::move(peer);
  }

  // Serves with `dispatch`.
  void Serve(SharedCallServer::Dispatch dispatch) {
    server_ = std::make_unique<SharedCallServer>(owner_, std::move(dispatch));
  }
  std::unique_ptr<SharedCaller> Caller(
      absl::Duration deadline = absl::Seconds(60), pid_t pid = getpid()) {
    auto c = SharedCaller::Create(peer_.get(), pid, deadline);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }
  // A control word of slot i, as the trainer sees it.
  uint32_t* Word(int i, shared_calls::ControlWord w) {
    return reinterpret_cast<uint32_t*>(peer_->data() +
                                       SharedRegion::kHeaderBytes + kBellBytes +
                                       i * kSlotBytes) +
           w;
  }

  // Serves by holding every call's reply, unanswered, in held_.
  void ServeHolding() {
    Serve([this](shared_calls::Method, absl::string_view,
                 SharedCallServer::Reply reply) {
      absl::MutexLock l(&held_mu_);
      held_.push_back(std::move(reply));
    });
  }
  // Waits until `n` calls are held.
  void AwaitHeld(size_t n) {
    absl::MutexLock l(&held_mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(held_mu_) {
      return held_.size() >= n;
    };
    held_mu_.Await(absl::Condition(&enough));
  }
  size_t NumHeld() {
    absl::MutexLock l(&held_mu_);
    return held_.size();
  }
  SharedCallServer::Reply Held(size_t i) {
    absl::MutexLock l(&held_mu_);
    return held_[i];
  }

  std::shared_ptr<SharedRegion> owner_;
  std::unique_ptr<SharedRegion> peer_;
  absl::Mutex held_mu_;
  std::vector<SharedCallServer::Reply> held_ ABSL_GUARDED_BY(held_mu_);
  std::unique_ptr<SharedCallServer> server_;  // stops before held_ goes
};

// Waits for `done` of a call and returns its status.
struct Waiter {
  absl::Notification n;
  absl::Status status;
  std::function<void(absl::Status)> Done() {
    return [this](absl::Status s) {
      status = std::move(s);
      n.Notify();
    };
  }
  absl::Status Wait() {
    EXPECT_TRUE(n.WaitForNotificationWithTimeout(absl::Seconds(10)));
    return status;
  }
};

TEST_F(SharedCallsTest, ARequestAndItsReply) {
  Serve([](shared_calls::Method m, absl::string_view bytes,
           SharedCallServer::Reply reply) {
    PushRequest req;
    ASSERT_TRUE(req.ParseFromArray(bytes.data(), bytes.size()));
    EXPECT_EQ(m, kPush);
    PushResponse resp;
    resp.set_late_blocks(static_cast<int>(req.step()) + 1);
    reply(absl::OkStatus(), &resp);
  });
  auto caller = Caller();
  for (int step = 0; step < 100; ++step) {  // slots are used again
    PushRequest req;
    req.set_step(step);
    PushResponse resp;
    Waiter w;
    ASSERT_TRUE(caller->TryCall(kPush, req, &resp, w.Done()));
    ASSERT_TRUE(w.Wait().ok()) << w.status;
    EXPECT_EQ(resp.late_blocks(), step + 1);
  }
}

TEST_F(SharedCallsTest, ErrorsKeepTheirCodeAndMessage) {
  Serve([](shared_calls::Method, absl::string_view,
           SharedCallServer::Reply reply) {
    reply(absl::FailedPreconditionError("not yet"), nullptr);
  });
  auto caller = Caller();
  PullRequest req;
  PullResponse resp;
  Waiter w;
  ASSERT_TRUE(caller->TryCall(kPull, req, &resp, w.Done()));
  EXPECT_EQ(w.Wait(), absl::FailedPreconditionError("not yet"));
}

TEST_F(SharedCallsTest, RepliesMayComeLaterFromAnotherThreadAndSlotsRunOut) {
  ServeHolding();
  auto caller = Caller();
  PullRequest req;
  std::vector<PullResponse> resps(shared_calls::kSlots + 1);
  std::vector<Waiter> waiters(shared_calls::kSlots);
  for (int i = 0; i < shared_calls::kSlots; ++i) {
    ASSERT_TRUE(caller->TryCall(kPull, req, &resps[i], waiters[i].Done()));
  }
  // Every slot is in use: the next call goes over gRPC.
  EXPECT_FALSE(caller->TryCall(kPull, req, &resps.back(), [](absl::Status) {}));
  AwaitHeld(shared_calls::kSlots);
  std::thread answer([&] {
    for (size_t i = 0; i < shared_calls::kSlots; ++i) {
      PullResponse r;
      r.set_wait_micros(static_cast<int64_t>(i));
      Held(i)(absl::OkStatus(), &r);
    }
  });
  answer.join();
  for (auto& w : waiters) EXPECT_TRUE(w.Wait().ok());
}

TEST_F(SharedCallsTest, TooLargeRequestsAndRepliesGoOverGrpc) {
  Serve([](shared_calls::Method, absl::string_view,
           SharedCallServer::Reply reply) {
    PullResponse big;
    for (int i = 0; i < 2000; ++i) big.add_blocks()->set_table_id(i);
    reply(absl::OkStatus(), &big);
  });
  auto caller = Caller();
  PushRequest huge;
  huge.add_blocks()->set_values(std::string(shared_calls::kRequestBytes, 'x'));
  PushResponse unused;
  EXPECT_FALSE(caller->TryCall(kPush, huge, &unused, [](absl::Status) {}));
  PullRequest req;
  PullResponse resp;
  Waiter w;
  ASSERT_TRUE(caller->TryCall(kPull, req, &resp, w.Done()));
  absl::Status s = w.Wait();
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "shared call:")) << s;
}

TEST_F(SharedCallsTest, AHostileTrainerOnlyBreaksItsOwnCalls) {
  ServeHolding();
  // Slot 0: a size past the request area; slot 1: an unknown method. Both
  // are answered INVALID_ARGUMENT without reaching the dispatch.
  *Word(0, shared_calls::kMethod) = kPush;
  *Word(0, shared_calls::kRequestSize) = 1u << 31;
  *Word(1, shared_calls::kMethod) = 77;
  *Word(1, shared_calls::kRequestSize) = 0;
  // Slot 2: a call held by the pserver, which the trainer posts again and
  // again while it waits: dispatched once.
  *Word(2, shared_calls::kMethod) = kPull;
  *Word(2, shared_calls::kRequestSize) = 0;
  for (int i : {0, 1, 2}) {
    __atomic_store_n(Word(i, shared_calls::kState), 1, __ATOMIC_RELEASE);
  }
  auto ring = [&] {
    uint32_t* bell =
        reinterpret_cast<uint32_t*>(peer_->data() + SharedRegion::kHeaderBytes);
    __atomic_fetch_add(bell, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, bell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  };
  ring();
  for (int tries = 0; tries < 1000; ++tries) {
    if (__atomic_load_n(Word(0, shared_calls::kState), __ATOMIC_ACQUIRE) == 2 &&
        __atomic_load_n(Word(1, shared_calls::kState), __ATOMIC_ACQUIRE) == 2 &&
        NumHeld() == 1) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  for (int i : {0, 1}) {
    EXPECT_EQ(*Word(i, shared_calls::kState), 2u);
    EXPECT_EQ(*Word(i, shared_calls::kCode),
              static_cast<uint32_t>(absl::StatusCode::kInvalidArgument));
  }
  for (int i = 0; i < 20; ++i) {
    __atomic_store_n(Word(2, shared_calls::kState), 1, __ATOMIC_RELEASE);
    ring();
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(NumHeld(), 1u);  // dispatched once
  Held(0)(absl::OkStatus(), nullptr);
}

TEST_F(SharedCallsTest, NoAnswerInTheDeadlineEndsTheCallsAsLostRegion) {
  ServeHolding();
  auto caller = Caller(absl::Milliseconds(200));
  PullRequest req;
  PullResponse resp;
  Waiter w;
  ASSERT_TRUE(caller->TryCall(kPull, req, &resp, w.Done()));
  absl::Status s = w.Wait();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "shared region")) << s;
  EXPECT_FALSE(caller->usable());
  EXPECT_FALSE(caller->TryCall(kPull, req, &resp, [](absl::Status) {}));
}

TEST_F(SharedCallsTest, ThePserverProcessExitingEndsTheCalls) {
  // The "pserver" is a child that never answers and then exits.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  auto caller = Caller(absl::Seconds(60), child);
  PullRequest req;
  PullResponse resp;
  Waiter w;
  ASSERT_TRUE(caller->TryCall(kPull, req, &resp, w.Done()));
  kill(child, SIGKILL);
  absl::Status s = w.Wait();
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "exited")) << s;
}

TEST_F(SharedCallsTest, AfterTheServerStopsNoCallIsTakenAndHeldOnesEnd) {
  ServeHolding();
  auto caller = Caller();
  PullRequest req;
  PullResponse resp;
  Waiter w;
  ASSERT_TRUE(caller->TryCall(kPull, req, &resp, w.Done()));
  AwaitHeld(1);
  server_.reset();  // the region was replaced, say
  // A pull that was waiting may still be answered into the region (the
  // mapping stays), or the trainer has already ended it to go over TCP.
  PullResponse r;
  r.set_wait_micros(7);
  Held(0)(absl::OkStatus(), &r);
  const absl::Status s = w.Wait();
  if (s.ok()) {
    EXPECT_EQ(resp.wait_micros(), 7);
  } else {
    EXPECT_TRUE(absl::IsNotFound(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "shared region")) << s;
  }
  // New calls are not taken: they go over gRPC.
  PullResponse unused;
  EXPECT_FALSE(caller->TryCall(kPull, req, &unused, [](absl::Status) {}));
}

TEST_F(SharedCallsTest, ACallerClosingEndsItsCallsCancelled) {
  Serve([](shared_calls::Method, absl::string_view, SharedCallServer::Reply) {
  });  // never answered
  auto caller = Caller();
  PullRequest req;
  PullResponse resp;
  Waiter w;
  ASSERT_TRUE(caller->TryCall(kPull, req, &resp, w.Done()));
  caller.reset();
  EXPECT_TRUE(absl::IsCancelled(w.Wait()));
}

TEST_F(SharedCallsTest, CancelPendingEndsHeldCallsAtOnceAndLaterOnesGoAhead) {
  ServeHolding();
  auto caller = Caller();
  PullRequest req;
  std::vector<std::unique_ptr<PullResponse>> resps;
  std::vector<Waiter> waiters(shared_calls::kSlots);
  for (int i = 0; i < shared_calls::kSlots; ++i) {
    resps.push_back(std::make_unique<PullResponse>());
    ASSERT_TRUE(caller->TryCall(kPull, req, resps[i].get(), waiters[i].Done()));
  }
  AwaitHeld(shared_calls::kSlots);
  const absl::Time start = absl::Now();
  caller->CancelPending();
  for (Waiter& w : waiters) {
    absl::Status s = w.Wait();
    EXPECT_TRUE(absl::IsCancelled(s)) << s;
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  // The replies may go; the slots stay taken until the pserver answers.
  resps.clear();
  PullResponse resp;
  EXPECT_FALSE(caller->TryCall(kPull, req, &resp, [](absl::Status) {}));
  for (size_t i = 0; i < shared_calls::kSlots; ++i) {
    PullResponse r;
    r.set_wait_micros(7);
    Held(i)(absl::OkStatus(), &r);  // written nowhere, `done` not run again
  }
  // A call posted after the cancel goes ahead once a slot is free.
  Waiter later;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!caller->TryCall(kPull, req, &resp, later.Done())) {
    ASSERT_LT(absl::Now(), deadline) << "no slot came free";
    absl::SleepFor(absl::Milliseconds(1));
  }
  AwaitHeld(shared_calls::kSlots + 1);
  PullResponse r;
  r.set_wait_micros(11);
  Held(shared_calls::kSlots)(absl::OkStatus(), &r);
  ASSERT_TRUE(later.Wait().ok()) << later.status;
  EXPECT_EQ(resp.wait_micros(), 11);
  EXPECT_TRUE(caller->usable());
}

}  // namespace
}  // namespace shardps
