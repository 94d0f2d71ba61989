// The pserver over gRPC, in process: the binding carries the handler's
// answers (code and message) across the wire, the health service answers,
// and a shutdown answers a waiting pull UNAVAILABLE.
#include "pserver/server/grpc_service.h"

#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/ps_service.grpc.pb.h"
#include "pserver/server/grpc_server.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

using testing::BytesToFloats;
using testing::FloatBytes;

// The gate in front of pulls (reply_gate.h): under the bound every pull
// starts at once; past it they wait, in order, until replies are read.
TEST(ReplyGateTest, PullsWaitOnlyWhileUnreadRepliesPassTheBound) {
  ReplyGate gate(100, 100, 2);
  std::vector<int> started;
  EXPECT_TRUE(gate.Admit("a", [&] { started.push_back(1); }));
  gate.Hold("a", 60);
  EXPECT_TRUE(gate.Admit("a", [&] { started.push_back(2); }));
  gate.Hold("a", 60);  // 120 held: past the bound
  EXPECT_EQ(started, (std::vector<int>{1, 2}));
  EXPECT_TRUE(gate.Admit("a", [&] { started.push_back(3); }));
  EXPECT_TRUE(gate.Admit("a", [&] { started.push_back(4); }));
  EXPECT_FALSE(gate.Admit("a", [&] { started.push_back(5); }));  // 2 wait
  EXPECT_EQ(gate.waiting(), 2u);
  gate.Release("a", 10);  // 110: still past it
  EXPECT_EQ(started.size(), 2u);
  gate.Release("a", 60);  // 50: both start, in order
  EXPECT_EQ(started, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(gate.waiting(), 0u);
  EXPECT_EQ(gate.held(), 50);
}

TEST(ReplyGateTest, AWaitingPullStartsAtTheNextAdmitUnderTheBound) {
  ReplyGate gate(100, 100, 8);
  std::vector<int> started;
  gate.Hold("a", 100);
  EXPECT_TRUE(gate.Admit("a", [&] { started.push_back(1); }));
  EXPECT_TRUE(started.empty());
  gate.Release("a", 100);
  EXPECT_EQ(started, (std::vector<int>{1}));
  EXPECT_TRUE(gate.Admit("a", [&] { started.push_back(2); }));
  EXPECT_EQ(started, (std::vector<int>{1, 2}));
}

// Issue 34: a client of job a that stops reading its replies stalls job
// a's pulls, never job b's.
TEST(ReplyGateTest, OneJobsUnreadRepliesLeaveRoomForTheOthers) {
  ReplyGate gate(100, 75, 8);
  std::vector<std::string> started;
  EXPECT_TRUE(gate.Admit("a", [&] { started.push_back("a1"); }));
  gate.Hold("a", 80);  // job a past its share
  EXPECT_TRUE(gate.Admit("a", [&] { started.push_back("a2"); }));
  EXPECT_TRUE(gate.Admit("b", [&] { started.push_back("b1"); }));
  EXPECT_EQ(started, (std::vector<std::string>{"a1", "b1"}));
  gate.Hold("b", 30);  // 110 in all: everyone waits now
  EXPECT_TRUE(gate.Admit("b", [&] { started.push_back("b2"); }));
  EXPECT_EQ(gate.held("a"), 80);
  EXPECT_EQ(gate.held("b"), 30);
  gate.Release("b", 30);  // 80 in all, a still past its share
  EXPECT_EQ(started, (std::vector<std::string>{"a1", "b1", "b2"}));
  gate.Release("a", 80);
  EXPECT_EQ(started, (std::vector<std::string>{"a1", "b1", "b2", "a2"}));
  EXPECT_EQ(gate.held(), 0);
  EXPECT_EQ(gate.waiting(), 0u);
}

class GrpcServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GrpcServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    server_ = std::move(*GrpcPsServer::Create(o));
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_GT(server_->port(), 0);
    stub_ = ParameterServer::NewStub(server_->InProcessChannel());
  }

  void InitJob() {
    InitJobRequest req;
    req.set_trainer_id(0);
    *req.mutable_job() = testing::MakeJobSpec(
        SYNC, 2, {testing::DenseTableSpec("w", 4, 4, testing::Sgd(0.5f))});
    req.add_blocks()->set_block(0);
    InitJobResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->InitJob(&ctx, req, &resp).ok());
    SetInitialValuesRequest vreq;
    DenseBlock* b = vreq.add_blocks();
    b->set_values(FloatBytes({1, 2, 3, 4}));
    SetInitialValuesResponse vresp;
    grpc::ClientContext ctx2;
    ASSERT_TRUE(stub_->SetInitialValues(&ctx2, vreq, &vresp).ok());
    CommitInitResponse cresp;
    grpc::ClientContext ctx3;
    ASSERT_TRUE(stub_->CommitInit(&ctx3, CommitInitRequest(), &cresp).ok());
  }

  grpc::Status Push(int trainer, uint64_t request_id, uint32_t table_id,
                    const std::vector<float>& g) {
    PushRequest req;
    req.set_trainer_id(trainer);
    req.set_request_id(request_id);
    DenseBlock* b = req.add_blocks();
    b->set_table_id(table_id);
    b->set_values(FloatBytes(g));
    PushResponse resp;
    grpc::ClientContext ctx;
    return stub_->Push(&ctx, req, &resp);
  }

  std::unique_ptr<GrpcPsServer> server_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

TEST_F(GrpcServiceTest, AnswersCrossTheWireWithCodeAndMessage) {
  InitJob();
  const grpc::Status bad = Push(0, 1, /*table_id=*/3, {1, 1, 1, 1});
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(bad.error_message().find("unknown table id 3"), std::string::npos)
      << bad.error_message();
  ASSERT_TRUE(Push(0, 2, 0, {2, 2, 2, 2}).ok());
  ASSERT_TRUE(Push(1, 3, 0, {2, 2, 2, 2}).ok());
  PullRequest req;
  req.set_min_version(1);
  req.add_blocks();
  PullResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->Pull(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.blocks_size(), 1);
  EXPECT_EQ(BytesToFloats(resp.blocks(0).values()),
            (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(resp.blocks(0).version(), 1);
}

TEST_F(GrpcServiceTest, StatusAndHealth) {
  GetStatusRequest req;
  GetStatusResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->GetStatus(&ctx, req, &resp).ok());
  EXPECT_FALSE(resp.job_ready());
  InitJob();
  grpc::ClientContext ctx2;
  ASSERT_TRUE(stub_->GetStatus(&ctx2, req, &resp).ok());
  EXPECT_TRUE(resp.job_ready());
  EXPECT_EQ(resp.job().tables(0).name(), "w");
  // gRPC's health service answers for the whole server.
  grpc::GenericStub generic(server_->InProcessChannel());
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::ClientContext ctx3;
  absl::Notification done;
  grpc::Status health;
  generic.UnaryCall(&ctx3, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                    &request, &response, [&](grpc::Status s) {
                      health = s;
                      done.Notify();
                    });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(health.ok()) << health.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING
}

TEST_F(GrpcServiceTest, ShutdownAnswersWaitingPullUnavailable) {
  InitJob();
  PullRequest req;
  req.set_min_version(1);
  req.add_blocks();
  PullResponse resp;
  grpc::ClientContext ctx;
  grpc::Status result;
  std::thread t([&] { result = stub_->Pull(&ctx, req, &resp); });
  // Wait until the store holds the pull, not for a fixed time.
  ASSERT_TRUE(server_->store()->WaitForWaitingPulls(1, absl::Seconds(10)));
  server_->Shutdown(absl::Seconds(1));
  t.join();
  EXPECT_EQ(result.error_code(), grpc::StatusCode::UNAVAILABLE)
      << result.error_message();
}

}  // namespace
}  // namespace shardps
