#ifndef SHARDPS_PSERVER_SERVER_DISPATCHER_H_
#define SHARDPS_PSERVER_SERVER_DISPATCHER_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/transport/ps_rpc.h"
#include "google/protobuf/message.h"
#include "pserver/server/blocking_pool.h"
#include "pserver/server/call_table.h"
#include "pserver/server/pserver.h"
#include "pserver/server/pserver_metrics.h"
#include "pserver/service/request_handler.h"

namespace shardps {

// The pserver's calls, whatever transport brought them: finds the job the
// call names (JobDirectory), runs the call table's entry on its handler on
// the threads the entry asks for (a replicated job's calls on pools of our
// own: a ring of pservers each waiting on the next on gRPC's threads would
// leave none to answer), turns a failed allocation into RESOURCE_EXHAUSTED,
// and reports every call to RpcMetrics. The gRPC binding, the shared-memory
// binding and in-process clients only convert bytes. Until SetServing(true)
// every call is answered UNAVAILABLE (the pserver is loading its
// checkpoints). Thread-safe.
class Dispatcher : public PsCallTarget {
 public:
  // `jobs` and `metrics` (null: none) must outlive it.
  Dispatcher(JobDirectory* jobs, RpcMetrics* metrics);

  // The RPC names, as RpcMetrics labels them (the proto's).
  static std::vector<std::string> MethodNames();
  // Whether calls are reported to RpcMetrics (a transport may then skip
  // counting their bytes).
  bool has_metrics() const { return metrics_ != nullptr; }
  // Whether calls are served (true once the pserver has started).
  void SetServing(bool serving) { serving_.store(serving); }

  // PsCallTarget: the call on the job ctx.job_id names.
  void Call(PsRpc rpc, const CallContext& ctx,
            const google::protobuf::Message& req,
            google::protobuf::Message* resp, StatusCallback done) override;
  // The call on `job`, whose handler the transport holds, on this thread
  // whatever the table says (the shared-call server's own thread).
  void CallOn(const std::shared_ptr<RequestHandler>& job, PsRpc rpc,
              const CallContext& ctx, const google::protobuf::Message& req,
              google::protobuf::Message* resp, StatusCallback done);
  // Reports a call that its transport refused before it reached here (a
  // request that does not parse).
  void Refused(PsRpc rpc, const absl::Status& s, size_t request_bytes);

  // The handler of the job `job_id`, UNAVAILABLE before serving.
  absl::StatusOr<std::shared_ptr<RequestHandler>> Job(
      const std::string& job_id, JobAccess access = JobAccess::kMake) const;

 private:
  // Runs `e` on `job` now; reports the call and calls `done` when it ends.
  void Run(const CallEntry& e, std::shared_ptr<RequestHandler> job,
           const CallContext& ctx, const google::protobuf::Message& req,
           google::protobuf::Message* resp, StatusCallback done,
           absl::Time start, size_t request_bytes);
  // The pool the call runs on; null: the caller's thread.
  BlockingPool* PoolFor(const CallEntry& e, const RequestHandler& job);
  // Reports a call; `reply_value_bytes`: values sent outside the reply.
  void Record(PsRpc rpc, const absl::Status& s, absl::Time start,
              size_t request_bytes, const google::protobuf::Message* resp,
              uint64_t reply_value_bytes = 0);

  JobDirectory* const jobs_;
  RpcMetrics* const metrics_;
  std::atomic<bool> serving_{true};
  // A replicated job's calls from trainers (a push waits on other
  // pservers; the rest may wait on blocks it holds), and those from other
  // pservers, apart: a call between pservers never queues behind a push.
  BlockingPool blocking_{64, size_t{64} << 20};
  BlockingPool peer_pool_{16, size_t{64} << 20};
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVER_DISPATCHER_H_
