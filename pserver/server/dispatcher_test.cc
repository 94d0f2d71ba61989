// The call table and the dispatcher without a transport: every RPC has its
// entry, calls reach the job they name, and each is counted.
#include "pserver/server/dispatcher.h"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "pserver/server/call_table.h"

namespace shardps {
namespace {

// The value of `series` in the registry's text page; NaN when absent.
double Value(prometheus::Registry& registry, const std::string& series) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  for (absl::string_view line : absl::StrSplit(out.str(), '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      return std::strtod(std::string(line.substr(series.size() + 1)).c_str(),
                         nullptr);
    }
  }
  return std::nan("");
}

class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PserverOptions o;
    o.store.num_trainers = 1;
    auto p = Pserver::Create(o);
    ASSERT_TRUE(p.ok()) << p.status();
    pserver_ = *std::move(p);
    ASSERT_TRUE(pserver_->Start().ok());
    metrics_ =
        std::make_unique<RpcMetrics>(&registry_, Dispatcher::MethodNames());
    dispatcher_ = std::make_unique<Dispatcher>(pserver_.get(), metrics_.get());
  }
  void TearDown() override { pserver_->Stop(); }

  // Calls `rpc` of job `job_id` and waits for its answer.
  absl::Status Call(PsRpc rpc, const std::string& job_id,
                    const google::protobuf::Message& req,
                    google::protobuf::Message* resp) {
    absl::Notification answered;
    absl::Status status;
    dispatcher_->Call(rpc, CallContext{job_id, "test", nullptr, 0, ""}, req,
                      resp, [&](absl::Status s) {
                        status = std::move(s);
                        answered.Notify();
                      });
    answered.WaitForNotification();
    return status;
  }

  prometheus::Registry registry_;
  std::unique_ptr<Pserver> pserver_;
  std::unique_ptr<RpcMetrics> metrics_;
  std::unique_ptr<Dispatcher> dispatcher_;
};

TEST(CallTableTest, OneEntryPerRpcInTheProtosOrder) {
  for (int i = 0; i < kNumPsRpcs; ++i) {
    EXPECT_EQ(static_cast<int>(CallTableEntry(static_cast<PsRpc>(i)).rpc), i);
  }
  std::vector<std::string> names = Dispatcher::MethodNames();
  ASSERT_EQ(names.size(), static_cast<size_t>(kNumPsRpcs));
  EXPECT_EQ(names.front(), "InitJob");
  EXPECT_EQ(names[static_cast<int>(PsRpc::kPush)], "Push");
  EXPECT_EQ(names.back(), "ViewInspect");
}

TEST(CallTableTest, ThreadsOfTheCallsThatMayWait) {
  EXPECT_EQ(CallTableEntry(PsRpc::kPush).threads,
            CallThreads::kPoolIfReplicated);
  EXPECT_EQ(CallTableEntry(PsRpc::kPull).threads,
            CallThreads::kPoolIfReplicated);
  EXPECT_EQ(CallTableEntry(PsRpc::kChangeView).threads, CallThreads::kPool);
  EXPECT_EQ(CallTableEntry(PsRpc::kForward).threads,
            CallThreads::kPeerIfReplicated);
  // Answered at once, never waiting: a pserver asks it while others wait
  // on the peer pool.
  EXPECT_EQ(CallTableEntry(PsRpc::kViewInspect).threads, CallThreads::kCaller);
  EXPECT_EQ(CallTableEntry(PsRpc::kOpenSharedMemory).threads,
            CallThreads::kCaller);
}

TEST_F(DispatcherTest, ReachesTheJobItNamesAndCountsTheCall) {
  GetStatusRequest req;
  GetStatusResponse resp;
  ASSERT_TRUE(Call(PsRpc::kGetStatus, "job-a", req, &resp).ok());
  EXPECT_FALSE(resp.job_ready());  // waiting for its chief
  EXPECT_EQ(Value(registry_,
                  "shardps_pserver_rpcs_total{code=\"OK\","
                  "method=\"GetStatus\"}"),
            1);
}

// Issue 34: GetStatus calls with new job ids filled --max_jobs. A job is
// made by its chief's InitJob (or from its checkpoints) only; before that,
// the calls a trainer makes while it waits are answered as an empty job
// would answer them, and the others as "not initialised".
TEST_F(DispatcherTest, OnlyInitJobMakesAJob) {
  GetStatusResponse status;
  ASSERT_TRUE(
      Call(PsRpc::kGetStatus, "job-a", GetStatusRequest(), &status).ok());
  EXPECT_FALSE(status.job_ready());
  RegisterRequest reg;
  reg.set_trainer_id(1);
  reg.set_incarnation(7);
  RegisterResponse registered;
  ASSERT_TRUE(Call(PsRpc::kRegister, "job-a", reg, &registered).ok());
  EXPECT_FALSE(registered.job_ready());
  HeartbeatRequest beat;
  beat.set_trainer_id(1);
  beat.set_incarnation(7);
  HeartbeatResponse beat_resp;
  EXPECT_TRUE(Call(PsRpc::kHeartbeat, "job-a", beat, &beat_resp).ok());
  PushRequest push;
  PushResponse push_resp;
  absl::Status s = Call(PsRpc::kPush, "job-a", push, &push_resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "job is not initialised")) << s;
  EXPECT_EQ(pserver_->JobIds(), (std::vector<std::string>{"default"}));

  InitJobRequest init;
  InitJobResponse init_resp;
  // Refused (no tables), but its job is made, as a chief's would be.
  EXPECT_FALSE(Call(PsRpc::kInitJob, "job-a", init, &init_resp).ok());
  EXPECT_EQ(pserver_->JobIds(), (std::vector<std::string>{"default", "job-a"}));
}

TEST_F(DispatcherTest, BadJobIdIsRefusedAndCounted) {
  GetStatusRequest req;
  GetStatusResponse resp;
  absl::Status s = Call(PsRpc::kGetStatus, "no spaces", req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(Value(registry_,
                  "shardps_pserver_rpcs_total{code=\"INVALID_ARGUMENT\","
                  "method=\"GetStatus\"}"),
            1);
}

TEST_F(DispatcherTest, UnavailableUntilServing) {
  dispatcher_->SetServing(false);
  GetStatusRequest req;
  GetStatusResponse resp;
  EXPECT_EQ(Call(PsRpc::kGetStatus, "default", req, &resp).code(),
            absl::StatusCode::kUnavailable);
  dispatcher_->SetServing(true);
  EXPECT_TRUE(Call(PsRpc::kGetStatus, "default", req, &resp).ok());
}

TEST_F(DispatcherTest, HandlerErrorsPassThroughWithTheirCode) {
  PushRequest req;  // no request id
  PushResponse resp;
  absl::Status s = Call(PsRpc::kPush, "default", req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "request_id")) << s;
}

TEST_F(DispatcherTest, RefusedCallsAreCounted) {
  dispatcher_->Refused(PsRpc::kPull, absl::InvalidArgumentError("bad bytes"),
                       10);
  EXPECT_EQ(Value(registry_,
                  "shardps_pserver_rpcs_total{code=\"INVALID_ARGUMENT\","
                  "method=\"Pull\"}"),
            1);
  EXPECT_EQ(
      Value(registry_, "shardps_pserver_received_bytes_total{method=\"Pull\"}"),
      10);
}

TEST(SingleJobTargetTest, RunsTheTableOnOneHandler) {
  PserverOptions o;
  o.store.num_trainers = 1;
  auto p = Pserver::Create(o);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Start().ok());
  SingleJobTarget target((*p)->handler());
  GetStatusRequest req;
  GetStatusResponse resp;
  absl::Status status = absl::UnknownError("not answered");
  target.Call(PsRpc::kGetStatus, CallContext{}, req, &resp,
              [&](absl::Status s) { status = s; });
  EXPECT_TRUE(status.ok()) << status;  // answered on the caller's thread
  (*p)->Stop();
}

}  // namespace
}  // namespace shardps
