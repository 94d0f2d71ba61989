#ifndef SHARDPS_COMMON_TRANSPORT_PS_RPC_H_
#define SHARDPS_COMMON_TRANSPORT_PS_RPC_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/transport/dense_value_lane.h"
#include "common/transport/ps_calls.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace shardps {

using StatusCallback = std::function<void(absl::Status)>;

// The calls of the ParameterServer service, then those of the Replication
// service between pservers, in the protos' order: made from the one list
// (ps_calls.h). PsRpcMethod fails at start if the list and the services
// disagree in number; ps_rpc_test checks each name and message type.
enum class PsRpc {
#define SHARDPS_ENUM(Name, Request, Response) k##Name,
  SHARDPS_PS_CALLS(SHARDPS_ENUM) SHARDPS_REPLICATION_CALLS(SHARDPS_ENUM)
#undef SHARDPS_ENUM
};
#define SHARDPS_COUNT(Name, Request, Response) +1
inline constexpr int kFirstReplicationRpc =
    0 SHARDPS_PS_CALLS(SHARDPS_COUNT);  // PsRpc::kForward
inline constexpr int kNumPsRpcs =
    kFirstReplicationRpc SHARDPS_REPLICATION_CALLS(SHARDPS_COUNT);
#undef SHARDPS_COUNT

// The service's method for `rpc`: its name ("Push") and its request and
// response types. Thread-safe.
const google::protobuf::MethodDescriptor& PsRpcMethod(PsRpc rpc);

// What a transport knows of a call besides its messages.
struct CallContext {
  std::string job_id;  // the job it names (base/job_id.h)
  std::string peer;    // who sent it, for Register's log line ("": unknown)
  // Where a pull's or push's dense values are when its transport moved
  // them outside the messages itself (the TCP lane); null otherwise.
  std::shared_ptr<const DenseValueLane> lane;
  // Bytes of values the transport carried outside the messages over the
  // network (the TCP lane's float32 values): a push's are counted with its
  // request's bytes, a pull's with its reply's.
  uint64_t value_bytes = 0;
  // A call between pservers: the address of the pserver that made it, as
  // its token proved (--peer_identities_file); "": not known (one peer
  // token for all pservers, or another transport).
  std::string peer_identity;
};

// Where a transport hands the calls it receives: the pserver's dispatcher
// (pserver/server/dispatcher.h), whichever transport brought them (gRPC,
// shared-memory slots, an in-process client). `req` and `resp` are of the
// types PsRpcMethod(rpc) names and must stay alive until `done`, which
// runs once, on this thread or another, with the status the call answers.
class PsCallTarget {
 public:
  virtual ~PsCallTarget() = default;
  virtual void Call(PsRpc rpc, const CallContext& ctx,
                    const google::protobuf::Message& req,
                    google::protobuf::Message* resp, StatusCallback done) = 0;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_TRANSPORT_PS_RPC_H_
