// Shared calls end to end: a pserver served over gRPC in this process, a
// trainer's ParamClient over GrpcPsClient, pushes and pulls through the
// region's slots (common/shared_memory/shared_calls.h) rather than gRPC.
#include "pserver/server/shared_call_binding.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "pserver/server/grpc_server.h"
#include "tests/client_server/grpc_one_table.h"
#include "trainer/client/job_client.h"
#include "trainer/client/param_client.h"
#include "trainer/transport/grpc_ps_client.h"

namespace shardps {
namespace {

class SharedCallBindingTest : public testing::GrpcOneTableTest {
 protected:
  void SetUp() override { Start(GrpcServerOptions{}); }

  // Opens a region with calls for trainer 0 over gRPC, as a trainer (or
  // another process of its user) would, and maps it.
  void OpenCallRegion(SharedMemoryResponse* resp,
                      std::unique_ptr<SharedRegion>* region) {
    SharedMemoryRequest req;
    req.set_trainer_id(0);
    req.set_incarnation(3);
    req.set_bytes(SharedRegion::kHeaderBytes + shared_calls::kAreaBytes + 48);
    req.set_calls(true);
    ASSERT_TRUE(grpc_->OpenSharedMemory(req, resp).ok());
    ASSERT_TRUE(resp->calls());
    auto attached =
        SharedRegion::Attach(static_cast<pid_t>(resp->pid()), resp->fd(),
                             resp->bytes(), resp->token());
    ASSERT_TRUE(attached.ok()) << attached.status();
    *region = *std::move(attached);
  }
};

TEST_F(SharedCallBindingTest, PushesAndPullsGoThroughTheRegion) {
  ASSERT_EQ(params_->UseSharedMemory(), 1);
  std::vector<float> w = w_;
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<float> g(6, 0.5f);
    g[step % 6] = 1.0f;
    for (int i = 0; i < 6; ++i) w[i] -= g[i];
    EXPECT_EQ(Step(step, g), w) << "step " << step;
  }
  EXPECT_EQ(client_->over_grpc.load(), 0);
}

// Trainer::CancelIfFatal's path for shared calls: a pull the pserver holds
// (its version needs a push that never comes) ends CANCELLED at once, not
// at --max_pull_wait_s, and calls made afterwards go ahead.
TEST_F(SharedCallBindingTest, CancelSharedCallsEndsAHeldPullAtOnce) {
  ASSERT_EQ(params_->UseSharedMemory(), 1);
  std::vector<float> out(6);
  std::unique_ptr<Transfer> pull = params_->StartPull(1, 1, {out.data()});
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(pull->Done());
  const absl::Time start = absl::Now();
  params_->CancelSharedCalls();
  absl::Status s = pull->Wait();
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  // The push applies step 0, which also answers the held pull into its
  // slot, where nothing reads it.
  EXPECT_EQ(Step(0, std::vector<float>(6, 1.0f)),
            (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(client_->over_grpc.load(), 0);
}

class SharedCallWaitTest : public testing::GrpcOneTableTest {
 protected:
  void SetUp() override {
    GrpcServerOptions opts;
    opts.pserver.store.max_pull_wait = absl::Milliseconds(100);
    opts.pserver.sweep_interval = absl::Milliseconds(20);
    Start(opts);
  }
};

// The pull waits for version 1, which the push 400 ms later makes: the
// pserver answers the slot's call DEADLINE_EXCEEDED after 100 ms, and the
// call goes on through gRPC, which waits for it (as the trainer's gRPC
// client retries any transient failure), instead of failing the step.
TEST_F(SharedCallWaitTest, APullThatWaitsItsLongestIsRetriedThroughGrpc) {
  ASSERT_EQ(params_->UseSharedMemory(), 1);
  EXPECT_EQ(PullHeldPastItsWait(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_GE(client_->over_grpc.load(), 1);
  EXPECT_EQ(params_->shared_servers(), 1);  // the region stays
}

TEST_F(SharedCallBindingTest, WithoutCallsOnlyTheValuesGoThroughTheRegion) {
  ASSERT_EQ(params_->UseSharedMemory(/*calls=*/false), 1);
  EXPECT_EQ(Step(0, std::vector<float>(6, 1.0f)),
            (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(client_->over_grpc.load(), 2);
}

TEST_F(SharedCallBindingTest, CallsNamingAnotherTrainerOrRegionAreRefused) {
  // A second process of the same user could write any request into the
  // slots: it is taken as the region's trainer's, and nothing else.
  SharedMemoryResponse resp;
  std::unique_ptr<SharedRegion> region;
  ASSERT_NO_FATAL_FAILURE(OpenCallRegion(&resp, &region));
  auto caller =
      SharedCaller::Create(region.get(), resp.pid(), absl::Seconds(10));
  ASSERT_TRUE(caller.ok()) << caller.status();
  auto call = [&](const PushRequest& push) {
    PushResponse out;
    absl::Notification n;
    absl::Status status;
    EXPECT_TRUE((*caller)->TryCall(shared_calls::kPush, push, &out,
                                   [&](absl::Status s) {
                                     status = s;
                                     n.Notify();
                                   }));
    n.WaitForNotification();
    return status;
  };
  PushRequest push;
  push.set_trainer_id(1);
  push.set_shared_region(resp.region_id());
  absl::Status s = call(push);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  push.set_trainer_id(0);
  push.set_shared_region(resp.region_id() + 1);
  s = call(push);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  // The region's own trainer and id reach the handler, which checks the
  // rest as for gRPC (no step of this job's yet: an empty push is fine or
  // refused, but never a crash); nothing here was applied.
  EXPECT_EQ(server_->pserver()
                ->handler()
                ->store_for_testing()
                ->counters()
                .block_updates,
            0);
}

TEST_F(SharedCallBindingTest, RandomBytesInTheCallAreaNeverHurtThePserver) {
  // What a buggy or hostile process of the trainer's user could write: the
  // whole call area random, slots posted at random, the doorbell rung, 3000
  // times. The pserver answers or ignores each, applies nothing, and still
  // serves the trainer afterwards.
  SharedMemoryResponse resp;
  std::unique_ptr<SharedRegion> region;
  ASSERT_NO_FATAL_FAILURE(OpenCallRegion(&resp, &region));
  char* area = region->data() + SharedRegion::kHeaderBytes;
  std::mt19937 rng(11);
  auto* bell = reinterpret_cast<uint32_t*>(area);
  for (int round = 0; round < 3000; ++round) {
    const size_t at = rng() % shared_calls::kAreaBytes;
    const size_t n =
        std::min<size_t>(1 + rng() % 512, shared_calls::kAreaBytes - at);
    for (size_t i = 0; i < n; ++i) area[at + i] = static_cast<char>(rng());
    // A slot's control line: state posted, a random method and size.
    const int slot = static_cast<int>(rng() % shared_calls::kSlots);
    auto* control = reinterpret_cast<uint32_t*>(
        area + shared_calls::kBellBytes + slot * shared_calls::kSlotBytes);
    control[shared_calls::kMethod] = 1 + rng() % 3;
    control[shared_calls::kRequestSize] =
        rng() % 2 ? rng() % shared_calls::kRequestBytes : rng();
    __atomic_store_n(&control[shared_calls::kState], 1, __ATOMIC_RELEASE);
    __atomic_fetch_add(bell, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, bell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }
  EXPECT_EQ(server_->pserver()
                ->handler()
                ->store_for_testing()
                ->counters()
                .block_updates,
            0);
  // The pserver still answers the area: an empty push in slot 0 names
  // trainer 0 but not the region.
  auto* control = reinterpret_cast<uint32_t*>(area + shared_calls::kBellBytes);
  absl::SleepFor(absl::Milliseconds(50));  // the storm's calls are answered
  control[shared_calls::kMethod] = shared_calls::kPush;
  control[shared_calls::kRequestSize] = 0;
  __atomic_store_n(&control[shared_calls::kState], 1, __ATOMIC_RELEASE);
  __atomic_fetch_add(bell, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, bell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  for (int i = 0; i < 1000 && __atomic_load_n(&control[shared_calls::kState],
                                              __ATOMIC_ACQUIRE) != 2;
       ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(control[shared_calls::kState], 2u);
  EXPECT_EQ(control[shared_calls::kCode],
            static_cast<uint32_t>(absl::StatusCode::kPermissionDenied));
  // The trainer's own lane (a new region) works as before.
  ASSERT_EQ(params_->UseSharedMemory(), 1);
  EXPECT_EQ(Step(0, std::vector<float>(6, 1.0f)),
            (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(client_->over_grpc.load(), 0);
}

TEST_F(SharedCallBindingTest, AReplacedRegionSendsItsCallsOverTcp) {
  ASSERT_EQ(params_->UseSharedMemory(), 1);
  EXPECT_EQ(Step(0, std::vector<float>(6, 1.0f)),
            (std::vector<float>{0, 1, 2, 3, 4, 5}));
  // Another region for the same trainer (as a restarted trainer process
  // would open): the pserver refuses the old one's id, and the client goes
  // over TCP, applying the push once.
  SharedMemoryRequest req;
  req.set_trainer_id(0);
  req.set_incarnation(3);
  req.set_bytes(SharedRegion::kHeaderBytes + 48);
  SharedMemoryResponse resp;
  ASSERT_TRUE(grpc_->OpenSharedMemory(req, &resp).ok());
  EXPECT_EQ(Step(1, std::vector<float>(6, 1.0f)),
            (std::vector<float>{-1, 0, 1, 2, 3, 4}));
  EXPECT_EQ(params_->shared_servers(), 0);
}

// Found by ps_fuzz against a 3-pserver job: a call area asked for in a
// region too small to hold it had the pserver's call loop read past the
// region (SIGBUS or SIGSEGV, 1 run in 3). Refused now, and the pserver
// goes on serving.
TEST_F(SharedCallBindingTest, ACallAreaLargerThanItsRegionIsRefused) {
  for (uint64_t bytes :
       {uint64_t{SharedRegion::kHeaderBytes + 1},
        uint64_t{SharedRegion::kHeaderBytes + shared_calls::kAreaBytes - 4}}) {
    SharedMemoryRequest req;
    req.set_trainer_id(0);
    req.set_incarnation(3);
    req.set_bytes(bytes);
    req.set_calls(true);
    SharedMemoryResponse resp;
    absl::Status s = grpc_->OpenSharedMemory(req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bytes << s;
    EXPECT_FALSE(resp.calls());
  }
  SharedMemoryResponse resp;
  std::unique_ptr<SharedRegion> region;
  OpenCallRegion(&resp, &region);
  EXPECT_EQ(Step(0, std::vector<float>(6, 1.0f)),
            (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace shardps
