// SparseTableEviction: what keeps a sparse table within its memory share
// (docs/sparse_memory.md): admission counted in a table of fixed size,
// eviction of the lowest-scored rows, expiry, and a backup's copy of its
// primary's evictions.
#include <algorithm>
#include <vector>

#include "pserver/store/sparse/sparse_table.h"

namespace shardps {

bool SparseTableEviction::Admit(SparseTable& t, SparseTable::Stripe& s,
                                uint64_t key, int64_t step) {
  const int64_t admit_after = std::max<int64_t>(1, t.options_.admit_after());
  if (admit_after <= 1) return true;
  t.Changed(s, key);
  const bool was_allocated = s.sightings.allocated();
  uint64_t dropped = 0;
  bool dropped_any = false;
  const int64_t count = s.sightings.See(key, step, &dropped, &dropped_any);
  if (!was_allocated) {
    // Counted whatever the limit: its size is part of the memory share.
    if (t.budget_ != nullptr) t.budget_->Add(s.sightings.Bytes());
    s.reserved += s.sightings.Bytes();
  }
  if (dropped_any) t.Changed(s, dropped);
  if (count < admit_after) {
    ++s.dropped;
    return false;
  }
  s.sightings.Erase(key);
  return true;
}

int64_t SparseTableEviction::EvictLowest(SparseTable& t, SparseTable::Stripe& s,
                                         int64_t count,
                                         SparseTable::ApplyContext* c) {
  if (count <= 0) return 0;
  std::vector<EvictionCandidate> candidates;
  candidates.reserve(s.rows.size());
  std::vector<float> value(t.dim_);
  const bool by_value = t.policy_.scores_value();  // else no row is decoded
  s.rows.ForEach([&](uint32_t slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const RowUse use = t.UseOf(s, slot);
    if (use.last_step == c->step) return;  // updated in this step: kept
    const float* v =
        by_value ? s.rows.Floats(slot, t.dim_, value.data()) : nullptr;
    candidates.push_back({t.policy_.Score(use, v, t.dim_, c->step),
                          s.rows.Head(slot)->key, slot});
  });
  const size_t n = std::min(candidates.size(), static_cast<size_t>(count));
  EvictionPolicy::SelectLowest(&candidates, n);
  if (t.store_ != nullptr) {
    // The disk tier: written there, not lost (and not a backup's concern).
    std::vector<uint32_t> slots(n);
    for (size_t i = 0; i < n; ++i) slots[i] = candidates[i].slot;
    return SparseTableDisk::Spill(t, s, slots) ? static_cast<int64_t>(n) : 0;
  }
  for (size_t i = 0; i < n; ++i) {
    t.RemoveRow(s, candidates[i].key, candidates[i].slot);
    if (c->evicted_full != nullptr)
      c->evicted_full->push_back(candidates[i].key);
  }
  s.evicted_full += static_cast<int64_t>(n);
  return static_cast<int64_t>(n);
}

int64_t SparseTableEviction::Expire(SparseTable& t, int64_t step,
                                    std::vector<uint64_t>* expired) {
  int64_t removed = 0;
  if (t.policy_.expires()) {
    const int64_t now = t.NowSeconds();
    std::vector<float> value(t.dim_);
    for (SparseTable::Stripe& s : t.stripes_) {
      absl::MutexLock l(&s.mu);
      SparseTableBlob::SaveIfPending(t, s);
      // Found first, then removed: removal moves index entries.
      std::vector<uint32_t> gone;
      s.rows.ForEach([&](uint32_t slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        if (t.policy_.Expired(t.UseOf(s, slot),
                              s.rows.Floats(slot, t.dim_, value.data()), t.dim_,
                              step, now)) {
          gone.push_back(slot);
        }
      });
      for (uint32_t slot : gone) {
        const uint64_t key = s.rows.Head(slot)->key;
        if (expired != nullptr) expired->push_back(key);
        t.RemoveRow(s, key, slot);
        ++s.expired;
        ++removed;
      }
    }
  }
  ForgetSightings(t, step);
  return removed;
}

void SparseTableEviction::ForgetSightings(SparseTable& t, int64_t step) {
  const int64_t ttl = t.policy_.ttl_steps();
  if (ttl <= 0) return;
  const int64_t oldest = step - ttl;
  for (SparseTable::Stripe& s : t.stripes_) {
    absl::MutexLock l(&s.mu);
    SparseTableBlob::SaveIfPending(t, s);
    s.sightings.RemoveIf(
        [oldest](uint64_t, const Sighting& seen) {
          return seen.last_step < oldest;
        },
        [&](uint64_t key)
            ABSL_NO_THREAD_SAFETY_ANALYSIS { t.Changed(s, key); });
  }
}

void SparseTableEviction::DropRows(SparseTable& t,
                                   absl::Span<const uint64_t> keys, bool full) {
  for (uint64_t key : keys) {
    SparseTable::Stripe& s = t.StripeOf(key);
    absl::MutexLock l(&s.mu);
    SparseTableBlob::SaveIfPending(t, s);
    const uint32_t slot = s.rows.Find(key);
    if (slot == SparseTable::kNoRow) continue;
    t.RemoveRow(s, key, slot);
    ++(full ? s.evicted_full : s.expired);
  }
}

}  // namespace shardps
