#include "trainer/client/ps_client_interface.h"

#include <array>

#include "glog/logging.h"

namespace shardps {
namespace {

const char* RpcName(PsRpc rpc) {
  switch (rpc) {
    case PsRpc::kInitJob:
      return "InitJob";
    case PsRpc::kSetInitialValues:
      return "SetInitialValues";
    case PsRpc::kCommitInit:
      return "CommitInit";
    case PsRpc::kRegister:
      return "Register";
    case PsRpc::kGetStatus:
      return "GetStatus";
    case PsRpc::kPull:
      return "Pull";
    case PsRpc::kPush:
      return "Push";
    case PsRpc::kHeartbeat:
      return "Heartbeat";
    case PsRpc::kLeave:
      return "Leave";
    case PsRpc::kCheckpoint:
      return "Checkpoint";
    case PsRpc::kRollback:
      return "Rollback";
    case PsRpc::kOpenSharedMemory:
      return "OpenSharedMemory";
    case PsRpc::kChangeView:
      return "ChangeView";
    case PsRpc::kForward:
      return "Forward";
    case PsRpc::kViewPrepare:
      return "ViewPrepare";
    case PsRpc::kViewAccept:
      return "ViewAccept";
    case PsRpc::kViewCommit:
      return "ViewCommit";
    case PsRpc::kInstallUnit:
      return "InstallUnit";
  }
  LOG(FATAL) << "unknown PsRpc " << static_cast<int>(rpc);
}

}  // namespace

const google::protobuf::MethodDescriptor& PsRpcMethod(PsRpc rpc) {
  static const auto* const kMethods = [] {
    const google::protobuf::ServiceDescriptor* service =
        PushRequest::descriptor()->file()->FindServiceByName("ParameterServer");
    CHECK(service != nullptr)
        << "proto/ps_service.proto has no ParameterServer";
    auto* methods =
        new std::array<const google::protobuf::MethodDescriptor*, kNumPsRpcs>;
    for (int i = 0; i < kNumPsRpcs; ++i) {
      const char* name = RpcName(static_cast<PsRpc>(i));
      (*methods)[i] = service->FindMethodByName(name);
      CHECK((*methods)[i] != nullptr) << "ParameterServer has no " << name;
    }
    return methods;
  }();
  const int i = static_cast<int>(rpc);
  CHECK(i >= 0 && i < kNumPsRpcs) << "unknown PsRpc " << i;
  return *(*kMethods)[i];
}

void PsClientInterface::PushDenseAsync(const DensePush& push,
                                       PushResponse* resp,
                                       StatusCallback done) {
  auto req = std::make_shared<const PushRequest>(ToPushRequest(push));
  PushAsync(*req, resp, [req, done = std::move(done)](absl::Status s) {
    done(std::move(s));
  });
}

}  // namespace shardps
