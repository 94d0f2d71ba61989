#ifndef SHARDPS_PSERVER_SERVICE_SHARED_REGIONS_H_
#define SHARDPS_PSERVER_SERVICE_SHARED_REGIONS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shared_memory/shared_region.h"
#include "common/transport/dense_value_lane.h"
#include "proto/ps_service.pb.h"
#include "pserver/store/memory/memory_budget.h"
#include "pserver/store/parameter_store.h"

namespace shardps {

// How many shared regions all the jobs of a pserver hold together
// (--max_shared_regions): each costs a memfd, a mapping and, with a call
// area, a thread that serves it. Thread-safe.
class RegionQuota {
 public:
  explicit RegionQuota(int max) : max_(max) {}
  // Takes one region's place; false when all are taken.
  bool TryTake() {
    int held = held_.load();
    while (held < max_) {
      if (held_.compare_exchange_weak(held, held + 1)) return true;
    }
    return false;
  }
  void Give() { held_.fetch_sub(1); }
  int held() const { return held_.load(); }
  int max() const { return max_; }

 private:
  const int max_;
  std::atomic<int> held_{0};
};

// The shared-memory regions of a job's trainers on this pserver's host
// (docs/wire_protocol.md, "Shared memory"): at most one per trainer id, each
// counted in the memory budget while held, known by a random id that
// requests name. Thread-safe.
class SharedRegions {
 public:
  // `store` (the job's) must outlive it.
  explicit SharedRegions(ParameterStore* store) : store_(store) {}

  // Creates a region of `req.bytes()` for `req.trainer_id()` and fills
  // `resp`, replacing the trainer's previous region (requests that name its
  // id are refused from then on; it stays mapped and counted while one
  // uses it). FAILED_PRECONDITION before the job is ready; INVALID_ARGUMENT
  // for a trainer id outside the job or a size outside [65, 64 + twice the
  // dense bytes held] (both plus the call area's bytes when `req.calls()`);
  // RESOURCE_EXHAUSTED past the budget or the quota.
  absl::Status Open(const SharedMemoryRequest& req, SharedMemoryResponse* resp);
  // The region `id` of `trainer_id`; NOT_FOUND, naming "shared region",
  // when it has none of that id (replaced, or the pserver restarted): the
  // trainer then sends the values over TCP.
  absl::StatusOr<std::shared_ptr<const SharedRegion>> Find(int trainer_id,
                                                           uint64_t id) const;
  // The values of a pull or push that names region `id` of `trainer_id`:
  // the region, held while the lane is; when Find has none, a lane whose
  // Check answers Find's NOT_FOUND for every block, so that the request
  // handler refuses the call after its own checks and de-duplication (a
  // retried push gets its first answer; a refused one is remembered under
  // its id).
  std::shared_ptr<const DenseValueLane> Lane(int trainer_id, uint64_t id) const;

  // The pserver's quota, which every region takes a place of while it is
  // mapped. Null (the default): none.
  void set_quota(std::shared_ptr<RegionQuota> quota) {
    quota_ = std::move(quota);
  }

 private:
  // A place in the quota and `bytes` of the budget; the function gives
  // both back. RESOURCE_EXHAUSTED naming the flag when either is full.
  absl::StatusOr<std::function<void()>> TakePlace(int64_t bytes);

  struct TrainerRegion {
    uint64_t id = 0;
    std::shared_ptr<const SharedRegion> region;
  };
  ParameterStore* const store_;
  std::shared_ptr<RegionQuota> quota_;  // set before any call
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, TrainerRegion> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVICE_SHARED_REGIONS_H_
