#ifndef SHARDPS_PSERVER_STORE_ROWS_SIGHTING_TABLE_H_
#define SHARDPS_PSERVER_STORE_ROWS_SIGHTING_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardps {

// How often a key not yet admitted has been pushed, and when last.
struct Sighting {
  int64_t count = 0;
  int64_t last_step = 0;
};

// The sightings of a sparse table's keys not yet admitted (admit_after),
// in a table of fixed size: buckets of kWays keys, a key's bucket chosen by
// its hash. A key that finds its bucket full takes the place of the entry
// with the lowest count (then the oldest, then the smallest key), so a
// stream of keys seen once cannot grow memory, and the same sightings in
// the same order drop the same keys. Memory is allocated on the first
// sighting. Not thread-safe (a SparseTable stripe's lock guards it).
class SightingTable {
 public:
  static constexpr int kWays = 8;
  static constexpr int64_t kEntryBytes = 24;

  // Room for `max_keys` keys (rounded up to whole buckets, at least one).
  explicit SightingTable(int64_t max_keys = kWays);
  // Empties the table and gives it room for `max_keys`.
  void Reset(int64_t max_keys);

  // The bytes the table holds once allocated (its fixed size).
  int64_t Bytes() const { return buckets_ * kWays * kEntryBytes; }
  bool allocated() const { return !entries_.empty(); }
  int64_t size() const { return size_; }

  // Counts one sighting of `key` at `step`; returns its count. When the
  // key's bucket was full, *dropped is set to the key it replaced (and
  // `dropped_any` to true), else left alone.
  int64_t See(uint64_t key, int64_t step, uint64_t* dropped, bool* dropped_any);
  // The key's sighting, or null.
  const Sighting* Find(uint64_t key) const;
  // Sets the key's sighting (a restore), dropping as See does.
  void Set(uint64_t key, Sighting seen, uint64_t* dropped, bool* dropped_any);
  void Erase(uint64_t key);
  void Clear();

  // Calls f(key, sighting) for every key, in no particular order.
  template <typename F>
  void ForEach(F f) const {
    for (const Entry& e : entries_) {
      if (e.seen.count > 0) f(e.key, e.seen);
    }
  }
  // Removes the keys `pred(key, sighting)` accepts, calling
  // removed(key) for each.
  template <typename P, typename R>
  void RemoveIf(P pred, R removed) {
    for (Entry& e : entries_) {
      if (e.seen.count > 0 && pred(e.key, e.seen)) {
        removed(e.key);
        e.seen = Sighting{};
        --size_;
      }
    }
  }

 private:
  struct Entry {
    uint64_t key = 0;
    Sighting seen;  // count 0: empty
  };
  // The entry of `key`, or where it goes (its bucket's empty or weakest
  // entry, *full set when that one holds another key).
  Entry* Slot(uint64_t key, bool* found, bool* full);
  size_t Bucket(uint64_t key) const;
  // The entry of `key`, made (with a fresh sighting) if it had none: in an
  // empty place, or in place of its bucket's weakest (*dropped).
  Entry* Claim(uint64_t key, uint64_t* dropped, bool* dropped_any);

  int64_t buckets_;
  std::vector<Entry> entries_;
  int64_t size_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_ROWS_SIGHTING_TABLE_H_
