#ifndef SHARDPS_PSERVER_SERVER_CALL_TABLE_H_
#define SHARDPS_PSERVER_SERVER_CALL_TABLE_H_

#include "common/transport/ps_rpc.h"
#include "google/protobuf/message.h"
#include "pserver/service/request_handler.h"

namespace shardps {

// Where a call's handler may run.
enum class CallThreads {
  kCaller,            // on the transport's thread
  kPoolIfReplicated,  // a replicated job's: on the blocking pool (its
                      // units may wait for the backups meanwhile)
  kPool,              // always on the blocking pool (waits for a majority)
  kPeerIfReplicated,  // from another pserver: on the peer pool
};

// One RPC of the ParameterServer service, as the pserver serves it. The
// table (CallTableEntry) holds one for each PsRpc, in the proto's order;
// every transport goes through it (pserver/server/dispatcher.h), so a
// call's handler, its threads and its metric name are written once.
struct CallEntry {
  PsRpc rpc;
  CallThreads threads;
  // Runs the call on the job's handler; `done` runs once, with the
  // status to answer (at once for all but Pull). An allocation that fails
  // in the handler is RESOURCE_EXHAUSTED: the handler leaves nothing
  // half-done.
  void (*run)(RequestHandler& h, const CallContext& ctx,
              const google::protobuf::Message& req,
              google::protobuf::Message* resp, StatusCallback done);
};

// The entry of `rpc`.
const CallEntry& CallTableEntry(PsRpc rpc);

// RESOURCE_EXHAUSTED for an allocation that failed while serving a call.
absl::Status OutOfMemoryStatus();

// A PsCallTarget of one job's handler, answering on the caller's thread:
// no job lookup, pools or metrics (an in-process client's pserver in
// tests and benchmarks). `handler` must outlive it.
class SingleJobTarget : public PsCallTarget {
 public:
  explicit SingleJobTarget(RequestHandler* handler) : handler_(handler) {}
  void Call(PsRpc rpc, const CallContext& ctx,
            const google::protobuf::Message& req,
            google::protobuf::Message* resp, StatusCallback done) override;

 private:
  RequestHandler* const handler_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVER_CALL_TABLE_H_
