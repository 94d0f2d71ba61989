#ifndef SHARDPS_TRAINER_TRANSPORT_SHARED_MEMORY_CLIENT_H_
#define SHARDPS_TRAINER_TRANSPORT_SHARED_MEMORY_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/shared_memory/shared_calls.h"
#include "common/shared_memory/shared_region.h"
#include "common/transport/ps_client_interface.h"
#include "proto/ps_service.pb.h"
#include "trainer/transport/request_stamp.h"

namespace shardps {

// A PsClientInterface decorator, as ReplicaRouter's shard clients are, for
// a pserver on this host: float32 dense pushes and pulls move their values
// through a region both processes map (common/shared_memory/shared_region.h)
// and carry only offsets, over gRPC or, when the pserver serves them,
// through the region's call slots (common/shared_memory/shared_calls.h). Every
// other call, and a push or pull it cannot place in the region (another
// encoding, a block it was not opened for), goes to the pserver's client
// as it is. A pserver that no longer holds the region (it restarted, or the
// region was replaced) answers NOT_FOUND: the call is sent again in the
// message, a push under a new request id (the pserver remembers the refusal
// under the old one), and every later call goes over TCP too (lost()). A
// call through the slots answered UNAVAILABLE or DEADLINE_EXCEEDED goes
// again over gRPC, whose client retries such failures.
// Every other call goes to the pserver's client through its CallAsync (a
// typed override of that client is not used). Thread-safe once open, but
// for PushDenseAsync, which draws a request id from the trainer's
// RequestStamp: call it on the stamp's thread (the training thread).
class SharedMemoryPsClient final : public ForwardingPsClient {
 public:
  // A dense block whose values may go through the region: `size` floats.
  struct Block {
    uint32_t table_id = 0;
    uint32_t block = 0;
    int64_t size = 0;
  };
  struct Options {
    std::vector<Block> pushes;  // in the order they are laid out
    std::vector<Block> pulls;   // after the pushes
    // Whether the calls go through the region's slots too.
    bool calls = true;
  };

  // Asks the pserver `inner` reaches for a region for these blocks and maps
  // it. The status says why not (the pserver is on another host, in another
  // PID namespace or of another user, or holds none of the blocks). `inner`
  // and `stamp` (whose request ids a resent push takes; called on the
  // thread that pushes) must outlive it.
  static absl::StatusOr<std::unique_ptr<SharedMemoryPsClient>> Open(
      PsClientInterface* inner, RequestStamp* stamp, const Options& options);

  // Ends its calls through the region's slots CANCELLED (SharedCaller::
  // CancelPending), then the pserver client's.
  void CancelCalls() override;
  void PullDenseAsync(const PullRequest& req, const DensePullTargets* targets,
                      PullResponse* resp, StatusCallback done) override;
  void PushDenseAsync(const DensePush& push, PushResponse* resp,
                      StatusCallback done) override;

  // Whether float32 pushes (pulls) of its blocks go through the region now.
  bool pushes() const { return !lost() && !push_at_.empty(); }
  bool pulls() const { return !lost() && !pull_at_.empty(); }
  // Whether the pserver lost the region (every call goes over TCP since).
  bool lost() const { return lost_.load(); }
  // Ends the calls in flight through the region's slots CANCELLED at once.
  void CancelSharedCalls();

 private:
  // Where a block's values are in the region.
  struct Slot {
    uint64_t offset = 0;
    int64_t size = 0;
  };
  using Slots = absl::flat_hash_map<std::pair<uint32_t, uint32_t>, Slot>;
  struct PullCall;
  struct PushCall;

  SharedMemoryPsClient(PsClientInterface* inner, RequestStamp* stamp)
      : ForwardingPsClient(inner), stamp_(stamp) {}
  // The slot of every block of `req` (`push`), in its order, when all of
  // them are float32 values this region holds; false otherwise.
  bool PlacePull(const PullRequest& req, const DensePullTargets& targets,
                 std::vector<uint64_t>* at) const;
  bool PlacePush(const DensePush& push, std::vector<uint64_t>* at) const;
  // Sends `req` through the region's slots when it has them and the
  // pserver serves them, over gRPC (`over_grpc`) otherwise, or when the
  // reply did not fit its slot.
  template <typename Request, typename Response>
  void Send(shared_calls::Method method, const Request& req, Response* resp,
            std::function<void(StatusCallback)> over_grpc, StatusCallback done);
  // Copies a pull's values out of the region, checking the reply.
  absl::Status TakePulled(const PullCall& p) const;
  // The pserver no longer holds the region: later calls go over TCP.
  void Lose(const absl::Status& why);

  RequestStamp* const stamp_;
  std::unique_ptr<SharedRegion> region_;
  uint64_t id_ = 0;
  Slots push_at_, pull_at_;
  std::atomic<bool> lost_{false};
  // Null: calls go over gRPC. Declared after the region, so that it stops
  // before the region is unmapped.
  std::unique_ptr<SharedCaller> caller_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_TRANSPORT_SHARED_MEMORY_CLIENT_H_
