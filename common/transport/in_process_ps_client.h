#ifndef SHARDPS_COMMON_TRANSPORT_IN_PROCESS_PS_CLIENT_H_
#define SHARDPS_COMMON_TRANSPORT_IN_PROCESS_PS_CLIENT_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/transport/ps_client_interface.h"
#include "common/transport/ps_rpc.h"

namespace shardps {

// PsClientInterface over a pserver in the same process (a PsCallTarget:
// the pserver's Dispatcher, or SingleJobTarget over one job's handler,
// pserver/server/call_table.h): no gRPC, no serialization. Each call is
// handed to the target on the caller's thread; `done` runs on this client's own
// thread, in the order the answers came, as gRPC runs it on one of its own (so
// a caller may hold a lock that its callback takes). Trainer tests and
// in-process benchmarks use it. Thread-safe.
class InProcessPsClient final : public PsClientInterface {
 public:
  // `target` must outlive the client; `address` names it, and this client
  // as the caller (CallContext::peer).
  InProcessPsClient(PsCallTarget* target, std::string address);
  // Runs every answer still queued, then stops its thread.
  ~InProcessPsClient() override;

  const std::string& address() const override { return address_; }

  void CallAsync(PsRpc rpc, const google::protobuf::Message& req,
                 google::protobuf::Message* resp, StatusCallback done) override;

 private:
  // Queues `done(status)` for the answering thread.
  void Answer(StatusCallback done, absl::Status status);
  void Loop();

  PsCallTarget* const target_;
  const std::string address_;
  absl::Mutex mu_;
  std::deque<std::pair<StatusCallback, absl::Status>> answers_
      ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_TRANSPORT_IN_PROCESS_PS_CLIENT_H_
