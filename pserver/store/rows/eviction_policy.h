#ifndef SHARDPS_PSERVER_STORE_ROWS_EVICTION_POLICY_H_
#define SHARDPS_PSERVER_STORE_ROWS_EVICTION_POLICY_H_

#include <cstdint>
#include <vector>

#include "proto/ps_service.pb.h"

namespace shardps {

// What a sparse table keeps of a row's use, for eviction.
struct RowUse {
  int64_t last_step = 0;     // the step of its last update
  int64_t updates = 0;       // updates applied
  int64_t last_seconds = 0;  // the wall clock (seconds) of its last update
};

// A candidate for eviction: its score (lower goes first), key and slot.
struct EvictionCandidate {
  double score;
  uint64_t key;
  uint32_t slot;
};

// A sparse table's EvictionOptions as plain functions of a row's use and
// value: which rows go first when the table is full (Score), and which go
// whatever the memory (Expired). Thread-safe (immutable).
class EvictionPolicy {
 public:
  explicit EvictionPolicy(const SparseTableOptions& options);

  // Lower goes first: LRU the last update step, LFU the update count
  // halved for every lfu_half_life_steps since the last update, TTL the
  // last update's wall clock, L2_NORM the value's norm.
  double Score(const RowUse& use, const float* value, int dim,
               int64_t step) const;
  // Whether the row is past ttl_steps (or evict_after_steps), ttl_seconds
  // or below min_l2_norm at (step, now_seconds).
  bool Expired(const RowUse& use, const float* value, int dim, int64_t step,
               int64_t now_seconds) const;
  // Whether rows can expire at all, and whether the expiry pass at `step`
  // (after the one at `last_pass`) is due: with a step TTL after every
  // sync step and every TTL / 2 ASYNC steps; with a wall-clock TTL or a
  // norm every scan_every_steps.
  bool expires() const { return ttl_steps_ > 0 || scan_; }
  bool PassDue(int64_t step, int64_t last_pass, bool sync) const;
  // Evict the lowest-scored rows when full, rather than refuse new ones.
  bool evicts_when_full() const { return !refuse_when_full_; }
  // Whether rows need the wall clock of their last update (TTL, or
  // ttl_seconds): the table keeps it only then.
  bool uses_clock() const {
    return policy_ == EvictionOptions::TTL || ttl_seconds_ > 0;
  }
  // Whether Score looks at a row's value (L2_NORM): else it may be null.
  bool scores_value() const { return policy_ == EvictionOptions::L2_NORM; }
  // The smallest step TTL in force (0: none).
  int64_t ttl_steps() const { return ttl_steps_; }

  // Moves the `k` lowest (score, key) candidates to the front, in order.
  static void SelectLowest(std::vector<EvictionCandidate>* candidates,
                           size_t k);

 private:
  const EvictionOptions::Policy policy_;
  const double half_life_;
  const int64_t ttl_steps_;
  const double ttl_seconds_;
  const double min_l2_norm_;
  const int64_t scan_every_;
  const bool scan_;
  const bool refuse_when_full_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_ROWS_EVICTION_POLICY_H_
