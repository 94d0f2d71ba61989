#include "pserver/service/shared_regions.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/shared_memory/shared_calls.h"
#include "glog/logging.h"

namespace shardps {

namespace {

// A region's values, as a pull or push that names it reaches them.
class RegionLane final : public DenseValueLane {
 public:
  explicit RegionLane(std::shared_ptr<const SharedRegion> region)
      : region_(std::move(region)) {}
  absl::Status Check(uint64_t offset, int64_t floats,
                     const char* what) const override {
    return region_->Check(offset, static_cast<uint64_t>(floats) * sizeof(float),
                          what);
  }
  void Write(uint64_t offset, absl::Span<const float> values) const override {
    std::memcpy(region_->data() + offset, values.data(),
                values.size() * sizeof(float));
  }
  void Read(uint64_t offset, absl::Span<float> to) const override {
    std::memcpy(to.data(), region_->data() + offset, to.size() * sizeof(float));
  }

 private:
  const std::shared_ptr<const SharedRegion> region_;
};

// A region this pserver does not hold (replaced, or it restarted): every
// block is refused with the status Find gave, where the handler checks it,
// after validation and de-duplication, as a region's bounds are.
class MissingLane final : public DenseValueLane {
 public:
  explicit MissingLane(absl::Status why) : why_(std::move(why)) {}
  absl::Status Check(uint64_t, int64_t, const char*) const override {
    return why_;
  }
  void Write(uint64_t, absl::Span<const float>) const override {
    LOG(FATAL) << "Write to a missing region: " << why_;
  }
  void Read(uint64_t, absl::Span<float>) const override {
    LOG(FATAL) << "Read from a missing region: " << why_;
  }

 private:
  const absl::Status why_;
};

}  // namespace

absl::StatusOr<std::function<void()>> SharedRegions::TakePlace(int64_t bytes) {
  // One of the pserver's --max_shared_regions.
  std::shared_ptr<RegionQuota> quota = quota_;
  if (quota != nullptr && !quota->TryTake()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "shared memory: this pserver holds ", quota->max(),
        " regions (--max_shared_regions); this trainer's values go over "
        "TCP"));
  }
  // Counted in --max_memory_mb: the pserver writes pulls into it.
  // Kept alive by the region, which may outlive its job (a trainer's
  // shared calls are served until it opens another).
  std::shared_ptr<MemoryBudget> budget = store_->state()->shared_budget;
  if (!budget->TryReserve(bytes)) {
    if (quota != nullptr) quota->Give();
    return absl::ResourceExhaustedError(absl::StrCat(
        "shared memory: a region of ", bytes,
        " bytes would pass "
        "--max_memory_mb (",
        budget->limit() >> 20, " MiB, ", budget->used() >> 20, " MiB held)"));
  }
  return [quota, budget, bytes] {
    if (quota != nullptr) quota->Give();
    budget->Release(bytes);
  };
}

absl::Status SharedRegions::Open(const SharedMemoryRequest& req,
                                 SharedMemoryResponse* resp) {
  ParameterStore* const store = store_;
  const int k = req.trainer_id();
  if (!store->ready()) {
    return absl::FailedPreconditionError(
        "shared memory: the job is not initialized on this pserver yet");
  }
  if (k < 0 || k >= store->job().num_trainers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: trainer id ", k, " is not in [0, ",
                     store->job().num_trainers(), ")"));
  }
  RETURN_IF_ERROR(store->CheckIncarnation(k, req.incarnation()));
  const uint64_t area = req.calls() ? shared_calls::kAreaBytes : 0;
  const uint64_t limit = SharedRegion::kHeaderBytes + area +
                         2 * static_cast<uint64_t>(store->dense_bytes());
  // A call area is served where the request says: the region must hold it
  // whole (a smaller one had the pserver's call loop read past its end).
  const uint64_t least =
      SharedRegion::kHeaderBytes + std::max<uint64_t>(area, 1);
  if (req.bytes() < least || req.bytes() > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory: ", req.bytes(), " bytes asked; a region holds ", least,
        " to ", limit,
        " (a header, a call area when asked for, and twice the dense bytes "
        "of this pserver)"));
  }
  {
    // The trainer's previous region goes first (its bytes are given back
    // once no request uses it), so that a new one fits where it did.
    absl::MutexLock l(&mu_);
    regions_.erase(k);
  }
  const int64_t bytes = static_cast<int64_t>(req.bytes());
  ASSIGN_OR_RETURN(std::function<void()> give_back, TakePlace(bytes));
  absl::StatusOr<std::unique_ptr<SharedRegion>> created =
      SharedRegion::Create(req.bytes());
  if (!created.ok()) {
    give_back();
    return created.status();
  }
  std::shared_ptr<const SharedRegion> region(
      created->release(), [give_back](const SharedRegion* r) {
        delete r;
        give_back();
      });
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{rd()} << 32) | rd();
  resp->set_pid(getpid());
  resp->set_fd(region->fd());
  resp->set_bytes(region->size());
  resp->set_token(region->token());
  resp->set_region_id(id);
  absl::MutexLock l(&mu_);
  // The old region stays mapped (and counted) while a request uses it.
  regions_[k] = TrainerRegion{id, std::move(region)};
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const SharedRegion>> SharedRegions::Find(
    int trainer_id, uint64_t id) const {
  absl::MutexLock l(&mu_);
  auto it = regions_.find(trainer_id);
  if (it == regions_.end() || it->second.id != id) {
    return absl::NotFoundError(absl::StrCat(
        "trainer ", trainer_id, " names shared region ", id,
        ", which this pserver does not hold (replaced, or the pserver "
        "restarted); send the values in the message"));
  }
  return it->second.region;
}

std::shared_ptr<const DenseValueLane> SharedRegions::Lane(int trainer_id,
                                                          uint64_t id) const {
  absl::StatusOr<std::shared_ptr<const SharedRegion>> region =
      Find(trainer_id, id);
  if (!region.ok()) return std::make_shared<const MissingLane>(region.status());
  return std::make_shared<const RegionLane>(*std::move(region));
}

}  // namespace shardps
