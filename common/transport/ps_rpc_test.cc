#include "common/transport/ps_rpc.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/ps_service.pb.h"
#include "proto/replication.pb.h"

namespace shardps {
namespace {

// The list (ps_calls.h) follows the protos, name by name and type by type.
TEST(PsRpcTest, ListFollowsTheServices) {
  struct Call {
    PsRpc rpc;
    std::string name;
    const google::protobuf::Descriptor* request;
    const google::protobuf::Descriptor* response;
  };
  const std::vector<Call> calls = {
#define SHARDPS_CALL(Name, Request, Response) \
  {PsRpc::k##Name, #Name, Request::descriptor(), Response::descriptor()},
      SHARDPS_PS_CALLS(SHARDPS_CALL) SHARDPS_REPLICATION_CALLS(SHARDPS_CALL)
#undef SHARDPS_CALL
  };
  ASSERT_EQ(calls.size(), static_cast<size_t>(kNumPsRpcs));
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    EXPECT_EQ(static_cast<size_t>(c.rpc), i);
    const google::protobuf::MethodDescriptor& m = PsRpcMethod(c.rpc);
    EXPECT_EQ(m.name(), c.name);
    EXPECT_EQ(m.input_type(), c.request) << c.name;
    EXPECT_EQ(m.output_type(), c.response) << c.name;
  }
  EXPECT_EQ(kFirstReplicationRpc, static_cast<int>(PsRpc::kForward));
  EXPECT_EQ(PsRpcMethod(PsRpc::kChangeView).service()->full_name(),
            "shardps.ParameterServer");
  EXPECT_EQ(PsRpcMethod(PsRpc::kForward).service()->full_name(),
            "shardps.Replication");
  EXPECT_EQ(PsRpcMethod(PsRpc::kViewInspect).service()->full_name(),
            "shardps.Replication");
}

}  // namespace
}  // namespace shardps
