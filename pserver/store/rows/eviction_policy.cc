#include "pserver/store/rows/eviction_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

namespace shardps {
namespace {

// The smaller of two step TTLs, 0 meaning none.
int64_t SmallerTtl(int64_t a, int64_t b) {
  if (a <= 0) return std::max<int64_t>(b, 0);
  if (b <= 0) return a;
  return std::min(a, b);
}

double SquaredNorm(const float* value, int dim) {
  double sum = 0;
  for (int i = 0; i < dim; ++i) sum += double{value[i]} * value[i];
  return sum;
}

}  // namespace

EvictionPolicy::EvictionPolicy(const SparseTableOptions& options)
    : policy_(options.eviction().policy()),
      half_life_(static_cast<double>(options.eviction().lfu_half_life_steps())),
      ttl_steps_(SmallerTtl(options.evict_after_steps(),
                            options.eviction().ttl_steps())),
      ttl_seconds_(options.eviction().ttl_seconds()),
      min_l2_norm_(options.eviction().min_l2_norm()),
      scan_every_(options.eviction().scan_every_steps() > 0
                      ? options.eviction().scan_every_steps()
                      : 100),
      scan_(ttl_seconds_ > 0 || min_l2_norm_ > 0),
      refuse_when_full_(options.eviction().refuse_when_full()) {}

double EvictionPolicy::Score(const RowUse& use, const float* value, int dim,
                             int64_t step) const {
  switch (policy_) {
    case EvictionOptions::LFU: {
      const double count = static_cast<double>(use.updates);
      if (half_life_ <= 0) return count;
      const double idle =
          static_cast<double>(std::max<int64_t>(0, step - use.last_step));
      return count * std::exp2(-idle / half_life_);
    }
    case EvictionOptions::TTL:
      return static_cast<double>(use.last_seconds);
    case EvictionOptions::L2_NORM:
      return std::sqrt(SquaredNorm(value, dim));
    default:  // LRU
      return static_cast<double>(use.last_step);
  }
}

bool EvictionPolicy::Expired(const RowUse& use, const float* value, int dim,
                             int64_t step, int64_t now_seconds) const {
  if (ttl_steps_ > 0 && use.last_step < step - ttl_steps_) return true;
  if (ttl_seconds_ > 0 &&
      static_cast<double>(now_seconds - use.last_seconds) > ttl_seconds_) {
    return true;
  }
  return min_l2_norm_ > 0 &&
         SquaredNorm(value, dim) < min_l2_norm_ * min_l2_norm_;
}

bool EvictionPolicy::PassDue(int64_t step, int64_t last_pass, bool sync) const {
  if (!expires()) return false;
  int64_t every = std::numeric_limits<int64_t>::max() / 2;
  if (ttl_steps_ > 0) every = sync ? 1 : std::max<int64_t>(1, ttl_steps_ / 2);
  if (scan_) every = std::min(every, scan_every_);
  return step >= last_pass + every;
}

void EvictionPolicy::SelectLowest(std::vector<EvictionCandidate>* candidates,
                                  size_t k) {
  auto lower = [](const EvictionCandidate& a, const EvictionCandidate& b) {
    return std::tie(a.score, a.key) < std::tie(b.score, b.key);
  };
  k = std::min(k, candidates->size());
  if (k == 0) return;
  std::nth_element(candidates->begin(), candidates->begin() + (k - 1),
                   candidates->end(), lower);
  std::sort(candidates->begin(), candidates->begin() + k, lower);
}

}  // namespace shardps
