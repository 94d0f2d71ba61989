#include "pserver/store/rows/sighting_table.h"

#include <algorithm>
#include <tuple>

#include "common/placement/shard_map.h"

namespace shardps {

SightingTable::SightingTable(int64_t max_keys) { Reset(max_keys); }

void SightingTable::Reset(int64_t max_keys) {
  Clear();
  buckets_ = std::max<int64_t>(1, (max_keys + kWays - 1) / kWays);
}

size_t SightingTable::Bucket(uint64_t key) const {
  // Not the bits that chose the pserver (low) or the stripe (high).
  return static_cast<size_t>(Mix64(key ^ 0x9e3779b97f4a7c15ULL) %
                             static_cast<uint64_t>(buckets_));
}

SightingTable::Entry* SightingTable::Slot(uint64_t key, bool* found,
                                          bool* full) {
  if (entries_.empty()) entries_.resize(static_cast<size_t>(buckets_) * kWays);
  Entry* bucket = entries_.data() + Bucket(key) * kWays;
  Entry* empty = nullptr;
  Entry* weakest = nullptr;
  for (int w = 0; w < kWays; ++w) {
    Entry& e = bucket[w];
    if (e.seen.count == 0) {
      if (empty == nullptr) empty = &e;
      continue;
    }
    if (e.key == key) {
      *found = true;
      return &e;
    }
    if (weakest == nullptr ||
        std::tie(e.seen.count, e.seen.last_step, e.key) <
            std::tie(weakest->seen.count, weakest->seen.last_step,
                     weakest->key)) {
      weakest = &e;
    }
  }
  *found = false;
  *full = empty == nullptr;
  return empty != nullptr ? empty : weakest;
}

SightingTable::Entry* SightingTable::Claim(uint64_t key, uint64_t* dropped,
                                           bool* dropped_any) {
  bool found = false, full = false;
  Entry* e = Slot(key, &found, &full);
  if (found) return e;
  if (full) {
    *dropped = e->key;
    *dropped_any = true;
  } else {
    ++size_;
  }
  e->key = key;
  e->seen = Sighting{};
  return e;
}

int64_t SightingTable::See(uint64_t key, int64_t step, uint64_t* dropped,
                           bool* dropped_any) {
  Entry* e = Claim(key, dropped, dropped_any);
  ++e->seen.count;
  e->seen.last_step = step;
  return e->seen.count;
}

const Sighting* SightingTable::Find(uint64_t key) const {
  if (entries_.empty()) return nullptr;
  const Entry* bucket = entries_.data() + Bucket(key) * kWays;
  for (int w = 0; w < kWays; ++w) {
    if (bucket[w].seen.count > 0 && bucket[w].key == key) {
      return &bucket[w].seen;
    }
  }
  return nullptr;
}

void SightingTable::Set(uint64_t key, Sighting seen, uint64_t* dropped,
                        bool* dropped_any) {
  if (seen.count <= 0) {
    Erase(key);
    return;
  }
  Claim(key, dropped, dropped_any)->seen = seen;
}

void SightingTable::Erase(uint64_t key) {
  if (entries_.empty()) return;
  Entry* bucket = entries_.data() + Bucket(key) * kWays;
  for (int w = 0; w < kWays; ++w) {
    if (bucket[w].seen.count > 0 && bucket[w].key == key) {
      bucket[w].seen = Sighting{};
      --size_;
      return;
    }
  }
}

void SightingTable::Clear() {
  std::vector<Entry>().swap(entries_);
  size_ = 0;
}

}  // namespace shardps
