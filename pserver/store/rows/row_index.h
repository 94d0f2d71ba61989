#ifndef SHARDPS_PSERVER_STORE_ROWS_ROW_INDEX_H_
#define SHARDPS_PSERVER_STORE_ROWS_ROW_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/placement/shard_map.h"

namespace shardps {

// A sparse table stripe's index from a key to its row's slot, built for
// batches of lookups: open addressing with linear probing over 8-byte
// entries (32 bits of the key's hash, the slot), at most three quarters
// full. The key itself lives in the row, so an entry is half of what
// absl::flat_hash_map<uint64_t, uint32_t> spends, and a batch can look up
// every key's entry first (prefetched) and its row second (prefetched
// while the other keys are looked up). Deletion shifts the entries after
// it back, so there are no tombstones and lookups stay short after
// eviction. Not thread-safe (a stripe's lock guards it).
class RowIndex {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  RowIndex() = default;
  RowIndex(const RowIndex&) = delete;
  RowIndex& operator=(const RowIndex&) = delete;

  // The hash of `key` the index files it under. Independent of Mix64(key),
  // whose bits chose the key's pserver and stripe.
  static uint32_t Hash(uint64_t key) {
    return static_cast<uint32_t>(Mix64(key ^ 0x9E3779B97F4A7C15ULL));
  }

  // Brings the entries where `hash` starts probing into the cache.
  void Prefetch(uint32_t hash) const {
    if (capacity_ > 0) __builtin_prefetch(&entries_[hash & mask_]);
  }
  // The slot of the first entry filed under `hash` (kNone: no key with this
  // hash): the caller checks the row's key, and on a mismatch asks Find.
  uint32_t First(uint32_t hash) const;
  // The slot of `key` (kNone: absent); key_of(slot) is the key of a row.
  template <typename KeyOf>
  uint32_t Find(uint64_t key, uint32_t hash, const KeyOf& key_of) const;
  // Files `slot` under `hash`. REQUIRES: its key is not in the index.
  void Insert(uint32_t hash, uint32_t slot);
  // Removes the entry of `slot` filed under `hash`; false if none.
  bool Erase(uint32_t hash, uint32_t slot);
  // f(slot) for every entry, in no particular order.
  template <typename F>
  void ForEach(const F& f) const;

  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  size_t Bytes() const { return capacity_ * sizeof(Entry); }
  // The bytes the next Insert adds by growing the index (0: it will not).
  size_t GrowthBytes() const {
    if ((size_ + 1) * 4 <= capacity_ * 3) return 0;
    return (capacity_ == 0 ? kMinCapacity : capacity_) * sizeof(Entry);
  }
  // The bytes of an index that holds `n` keys having grown only as far as
  // they need.
  static size_t BytesFor(size_t n);
  void Clear();

  // The smallest index allocated, in entries, and an entry's bytes.
  static constexpr size_t kMinCapacity = 16;
  static constexpr size_t kEntryBytes = 8;

 private:
  struct Entry {
    uint32_t hash;
    uint32_t slot;  // kNone: empty
  };
  static_assert(sizeof(Entry) == kEntryBytes);
  void Grow();

  std::unique_ptr<Entry[]> entries_;
  size_t capacity_ = 0;  // a power of two, or 0
  size_t mask_ = 0;
  size_t size_ = 0;
};

template <typename KeyOf>
uint32_t RowIndex::Find(uint64_t key, uint32_t hash,
                        const KeyOf& key_of) const {
  if (capacity_ == 0) return kNone;
  for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
    const Entry& e = entries_[i];
    if (e.slot == kNone) return kNone;
    if (e.hash == hash && key_of(e.slot) == key) return e.slot;
  }
}

template <typename F>
void RowIndex::ForEach(const F& f) const {
  for (size_t i = 0; i < capacity_; ++i) {
    if (entries_[i].slot != kNone) f(entries_[i].slot);
  }
}

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_ROWS_ROW_INDEX_H_
