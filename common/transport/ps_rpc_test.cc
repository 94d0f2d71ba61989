#include "common/transport/ps_rpc.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/ps_service.pb.h"

namespace shardps {
namespace {

// The enum follows the proto's order, name by name.
TEST(PsRpcTest, EnumFollowsTheService) {
  const std::vector<std::pair<PsRpc, std::string>> names = {
      {PsRpc::kInitJob, "InitJob"},
      {PsRpc::kSetInitialValues, "SetInitialValues"},
      {PsRpc::kCommitInit, "CommitInit"},
      {PsRpc::kRegister, "Register"},
      {PsRpc::kGetStatus, "GetStatus"},
      {PsRpc::kPull, "Pull"},
      {PsRpc::kPush, "Push"},
      {PsRpc::kHeartbeat, "Heartbeat"},
      {PsRpc::kLeave, "Leave"},
      {PsRpc::kCheckpoint, "Checkpoint"},
      {PsRpc::kRollback, "Rollback"},
      {PsRpc::kOpenSharedMemory, "OpenSharedMemory"},
      {PsRpc::kChangeView, "ChangeView"},
      {PsRpc::kOpenTcpLane, "OpenTcpLane"},
      {PsRpc::kExportRows, "ExportRows"},
      {PsRpc::kForward, "Forward"},
      {PsRpc::kViewPrepare, "ViewPrepare"},
      {PsRpc::kViewAccept, "ViewAccept"},
      {PsRpc::kViewCommit, "ViewCommit"},
      {PsRpc::kInstallUnit, "InstallUnit"},
      {PsRpc::kViewInspect, "ViewInspect"},
  };
  ASSERT_EQ(names.size(), static_cast<size_t>(kNumPsRpcs));
  for (const auto& [rpc, name] : names) {
    EXPECT_EQ(PsRpcMethod(rpc).name(), name);
  }
  EXPECT_EQ(PsRpcMethod(PsRpc::kPush).input_type(), PushRequest::descriptor());
  EXPECT_EQ(PsRpcMethod(PsRpc::kPull).output_type(),
            PullResponse::descriptor());
  EXPECT_EQ(PsRpcMethod(PsRpc::kChangeView).service()->full_name(),
            "shardps.ParameterServer");
  EXPECT_EQ(PsRpcMethod(PsRpc::kForward).service()->full_name(),
            "shardps.Replication");
  EXPECT_EQ(PsRpcMethod(PsRpc::kInstallUnit).service()->full_name(),
            "shardps.Replication");
}

}  // namespace
}  // namespace shardps
