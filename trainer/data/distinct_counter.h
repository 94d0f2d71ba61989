#ifndef SHARDPS_TRAINER_DATA_DISTINCT_COUNTER_H_
#define SHARDPS_TRAINER_DATA_DISTINCT_COUNTER_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <set>

#include "common/placement/shard_map.h"

namespace shardps {

// Estimates how many distinct 64-bit ids a stream holds from the k smallest
// of their hashes (the k-minimum-values sketch, Bar-Yossef et al. 2002), in
// O(k) memory however many ids there are: exact while fewer than k distinct
// ids were added, else with a standard error of about 1/sqrt(k) (0.8% at
// k = 16384). The hash is a bijection, so equal estimates come from equal
// id sets whatever their order: every trainer scanning the same files gets
// the same figure.
// Requires external synchronization.
class DistinctCounter {
 public:
  explicit DistinctCounter(size_t k = 16384) : k_(k < 2 ? 2 : k) {}

  void Add(uint64_t id) {
    const uint64_t h = Mix64(id);
    if (smallest_.size() == k_ && h >= *smallest_.rbegin()) return;
    if (!smallest_.insert(h).second || smallest_.size() <= k_) return;
    smallest_.erase(std::prev(smallest_.end()));
  }

  // The distinct ids added, estimated.
  double Estimate() const {
    if (smallest_.size() < k_) return static_cast<double>(smallest_.size());
    // The k-th smallest hash as a share of the hash range.
    const double kth = (static_cast<double>(*smallest_.rbegin()) + 1.0) /
                       18446744073709551616.0;  // 2^64
    return static_cast<double>(k_ - 1) / kth;
  }

 private:
  const size_t k_;
  std::set<uint64_t> smallest_;  // at most k_
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_DATA_DISTINCT_COUNTER_H_
