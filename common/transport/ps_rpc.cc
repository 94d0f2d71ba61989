#include "common/transport/ps_rpc.h"

#include <array>

#include "glog/logging.h"
#include "proto/ps_service.pb.h"

namespace shardps {

const google::protobuf::MethodDescriptor& PsRpcMethod(PsRpc rpc) {
  static const google::protobuf::ServiceDescriptor* const kService = [] {
    const google::protobuf::ServiceDescriptor* service =
        PushRequest::descriptor()->file()->FindServiceByName("ParameterServer");
    CHECK(service != nullptr)
        << "proto/ps_service.proto has no ParameterServer";
    CHECK_EQ(service->method_count(), kNumPsRpcs)
        << "PsRpc (common/transport/ps_rpc.h) and the ParameterServer "
           "service disagree";
    return service;
  }();
  const int i = static_cast<int>(rpc);
  CHECK(i >= 0 && i < kNumPsRpcs) << "unknown PsRpc " << i;
  return *kService->method(i);
}

}  // namespace shardps
