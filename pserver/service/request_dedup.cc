#include "pserver/service/request_dedup.h"

namespace shardps {

RequestDedup::Outcome RequestDedup::Begin(uint64_t request_id,
                                          absl::Status* first_status) {
  absl::MutexLock l(&mu_);
  auto [it, inserted] = entries_.try_emplace(request_id);
  if (!inserted) {
    if (!it->second.done) return Outcome::kInFlight;
    *first_status = it->second.status;
    return Outcome::kDone;
  }
  order_.push_back(request_id);
  while (order_.size() > capacity_) {
    const uint64_t oldest = order_.front();
    order_.pop_front();
    auto old = entries_.find(oldest);
    if (old != entries_.end() && !old->second.done) {
      // Still in flight: keep it, and look at it again later.
      order_.push_back(oldest);
      break;
    }
    if (old != entries_.end()) entries_.erase(old);
  }
  return Outcome::kNew;
}

void RequestDedup::Finish(uint64_t request_id, const absl::Status& status) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(request_id);
  if (it == entries_.end()) return;
  it->second.done = true;
  it->second.status = status;
}

size_t RequestDedup::size() const {
  absl::MutexLock l(&mu_);
  return entries_.size();
}

}  // namespace shardps
