#include "common/transport/ps_rpc.h"

#include <utility>

#include "glog/logging.h"
#include "proto/ps_service.pb.h"
#include "proto/replication.pb.h"

namespace shardps {

const google::protobuf::MethodDescriptor& PsRpcMethod(PsRpc rpc) {
  static const auto* const kServices = [] {
    const google::protobuf::ServiceDescriptor* ps =
        PushRequest::descriptor()->file()->FindServiceByName("ParameterServer");
    const google::protobuf::ServiceDescriptor* replication =
        ForwardRequest::descriptor()->file()->FindServiceByName("Replication");
    CHECK(ps != nullptr) << "proto/ps_service.proto has no ParameterServer";
    CHECK(replication != nullptr)
        << "proto/replication.proto has no Replication";
    CHECK_EQ(ps->method_count(), kFirstReplicationRpc)
        << "PsRpc (common/transport/ps_rpc.h) and the ParameterServer "
           "service disagree";
    CHECK_EQ(replication->method_count(), kNumPsRpcs - kFirstReplicationRpc)
        << "PsRpc (common/transport/ps_rpc.h) and the Replication service "
           "disagree";
    return new std::pair<const google::protobuf::ServiceDescriptor*,
                         const google::protobuf::ServiceDescriptor*>(
        ps, replication);
  }();
  const int i = static_cast<int>(rpc);
  CHECK(i >= 0 && i < kNumPsRpcs) << "unknown PsRpc " << i;
  return i < kFirstReplicationRpc
             ? *kServices->first->method(i)
             : *kServices->second->method(i - kFirstReplicationRpc);
}

}  // namespace shardps
