#ifndef SHARDPS_PSERVER_STORE_DISK_KEY_FILTER_H_
#define SHARDPS_PSERVER_STORE_DISK_KEY_FILTER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

#include "common/placement/shard_map.h"

namespace shardps {

// A Bloom filter of the keys ever written to a RowStore, of a fixed size:
// a key it has not seen is answered "not there" without asking RocksDB,
// which would look at every sorted run's filter. Blocked: a key's kBits
// bits are in one 64-byte line, one cache miss. False positives grow with
// the keys added (about 1% at 10 bits a key, 12% at 5); there are no false
// negatives. Thread-safe: bits are set and read with atomics (a reader
// that must see an Add orders itself after it otherwise, e.g. through a
// mutex the writer held).
class KeyFilter {
 public:
  static constexpr int kBits = 6;
  static constexpr int64_t kLineBytes = 64;

  // `bytes` rounded down to whole lines, at least one.
  explicit KeyFilter(int64_t bytes)
      : lines_(static_cast<uint64_t>(std::max<int64_t>(1, bytes / kLineBytes))),
        words_(new std::atomic<uint64_t>[lines_ * kWordsPerLine]) {
    Clear();
  }

  int64_t bytes() const { return static_cast<int64_t>(lines_) * kLineBytes; }
  // bytes() of a filter made with `bytes`.
  static int64_t BytesFor(int64_t bytes) {
    return std::max<int64_t>(1, bytes / kLineBytes) * kLineBytes;
  }

  void Add(uint64_t key) {
    const uint64_t h = Mix64(key ^ kSalt);
    std::atomic<uint64_t>* line = Line(h);
    const uint64_t bits = Mix64(h);
    for (int i = 0; i < kBits; ++i) {
      const uint32_t bit = (bits >> (9 * i)) & 511;
      line[bit >> 6].fetch_or(uint64_t{1} << (bit & 63),
                              std::memory_order_relaxed);
    }
  }

  bool MayContain(uint64_t key) const {
    const uint64_t h = Mix64(key ^ kSalt);
    const std::atomic<uint64_t>* line = Line(h);
    const uint64_t bits = Mix64(h);
    for (int i = 0; i < kBits; ++i) {
      const uint32_t bit = (bits >> (9 * i)) & 511;
      if ((line[bit >> 6].load(std::memory_order_relaxed) &
           (uint64_t{1} << (bit & 63))) == 0) {
        return false;
      }
    }
    return true;
  }

  void Clear() {
    for (uint64_t i = 0; i < lines_ * kWordsPerLine; ++i) {
      words_[i].store(0, std::memory_order_relaxed);
    }
  }

 private:
  static constexpr uint64_t kWordsPerLine = kLineBytes / 8;
  // Not the hash that files keys under RowStore's buckets.
  static constexpr uint64_t kSalt = 0x5bd1e9955bd1e995ULL;

  // The line of hash h: its top 32 bits scaled to the lines (the bits in
  // the line come from a second mix of h).
  std::atomic<uint64_t>* Line(uint64_t h) const {
    return &words_[((h >> 32) * lines_ >> 32) * kWordsPerLine];
  }

  const uint64_t lines_;
  std::unique_ptr<std::atomic<uint64_t>[]> words_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_DISK_KEY_FILTER_H_
