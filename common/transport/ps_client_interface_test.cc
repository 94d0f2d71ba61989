#include "common/transport/ps_client_interface.h"

#include <string>

#include "gtest/gtest.h"

namespace shardps {
namespace {

// Records what each typed call hands to CallAsync.
class RecordingClient : public PsClientInterface {
 public:
  const std::string& address() const override { return address_; }
  void CallAsync(PsRpc rpc, const google::protobuf::Message& req,
                 google::protobuf::Message* resp,
                 StatusCallback done) override {
    rpc_ = rpc;
    req_type_ = req.GetDescriptor();
    resp_type_ = resp->GetDescriptor();
    done(absl::OkStatus());
  }

  // Checks that the last call was `rpc` with its own message types.
  void ExpectLast(PsRpc rpc) const {
    const google::protobuf::MethodDescriptor& m = PsRpcMethod(rpc);
    EXPECT_EQ(static_cast<int>(rpc_), static_cast<int>(rpc)) << m.name();
    EXPECT_EQ(req_type_, m.input_type()) << m.name();
    EXPECT_EQ(resp_type_, m.output_type()) << m.name();
  }

 private:
  const std::string address_ = "recording";
  PsRpc rpc_ = PsRpc::kInitJob;
  const google::protobuf::Descriptor* req_type_ = nullptr;
  const google::protobuf::Descriptor* resp_type_ = nullptr;
};

TEST(PsClientInterfaceTest, TypedCallsPassTheirRpcAndMessages) {
  RecordingClient c;
  {
    InitJobResponse r;
    ASSERT_TRUE(c.InitJob(InitJobRequest(), &r).ok());
    c.ExpectLast(PsRpc::kInitJob);
  }
  {
    SetInitialValuesResponse r;
    ASSERT_TRUE(c.SetInitialValues(SetInitialValuesRequest(), &r).ok());
    c.ExpectLast(PsRpc::kSetInitialValues);
  }
  {
    CommitInitResponse r;
    ASSERT_TRUE(c.CommitInit(CommitInitRequest(), &r).ok());
    c.ExpectLast(PsRpc::kCommitInit);
  }
  {
    RegisterResponse r;
    ASSERT_TRUE(c.Register(RegisterRequest(), &r).ok());
    c.ExpectLast(PsRpc::kRegister);
  }
  {
    GetStatusResponse r;
    ASSERT_TRUE(c.GetStatus(GetStatusRequest(), &r).ok());
    c.ExpectLast(PsRpc::kGetStatus);
  }
  {
    PullResponse r;
    ASSERT_TRUE(c.Pull(PullRequest(), &r).ok());
    c.ExpectLast(PsRpc::kPull);
  }
  {
    PushResponse r;
    ASSERT_TRUE(c.Push(PushRequest(), &r).ok());
    c.ExpectLast(PsRpc::kPush);
  }
  {
    HeartbeatResponse r;
    ASSERT_TRUE(c.Heartbeat(HeartbeatRequest(), &r).ok());
    c.ExpectLast(PsRpc::kHeartbeat);
  }
  {
    LeaveResponse r;
    ASSERT_TRUE(c.Leave(LeaveRequest(), &r).ok());
    c.ExpectLast(PsRpc::kLeave);
  }
  {
    CheckpointResponse r;
    ASSERT_TRUE(c.Checkpoint(CheckpointRequest(), &r).ok());
    c.ExpectLast(PsRpc::kCheckpoint);
  }
  {
    RollbackResponse r;
    ASSERT_TRUE(c.Rollback(RollbackRequest(), &r).ok());
    c.ExpectLast(PsRpc::kRollback);
  }
}

}  // namespace
}  // namespace shardps
