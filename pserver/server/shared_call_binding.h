#ifndef SHARDPS_PSERVER_SERVER_SHARED_CALL_BINDING_H_
#define SHARDPS_PSERVER_SERVER_SHARED_CALL_BINDING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/shared_memory/shared_calls.h"
#include "pserver/server/dispatcher.h"
#include "pserver/service/request_handler.h"

namespace shardps {

// The binding of the pserver to the calls of a shared region
// (common/shared_memory/shared_calls.h), as GrpcPsService is its binding to
// gRPC: pushes and pulls are parsed and handed to the Dispatcher for the
// handler of the job that opened the region, on the shared-call server's
// thread, and must name the region's trainer and region id
// (PERMISSION_DENIED otherwise). One server per (job, trainer id): a new
// region of the same trainer replaces the old one's. Thread-safe.
class SharedCallBinding {
 public:
  // `dispatcher` must outlive this object.
  explicit SharedCallBinding(Dispatcher* dispatcher)
      : dispatcher_(dispatcher) {}
  ~SharedCallBinding();

  // Serves the call area of region `region_id` of `trainer_id`, which
  // `handler` has just opened, in place of that trainer's previous one.
  absl::Status Serve(const std::string& job_id,
                     const std::shared_ptr<RequestHandler>& handler,
                     int trainer_id, uint64_t region_id);
  // Stops serving the calls of `trainer_id`'s region (it opened one
  // without calls).
  void Forget(const std::string& job_id, int trainer_id);

 private:
  Dispatcher* const dispatcher_;
  absl::Mutex mu_;
  struct Served {
    std::weak_ptr<RequestHandler> handler;  // gone: the job ended
    std::unique_ptr<SharedCallServer> server;
  };
  absl::flat_hash_map<std::pair<std::string, int>, Served> servers_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVER_SHARED_CALL_BINDING_H_
