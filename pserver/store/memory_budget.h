#ifndef SHARDPS_PSERVER_STORE_MEMORY_BUDGET_H_
#define SHARDPS_PSERVER_STORE_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>

namespace shardps {

// The bytes that tables and optimizer state may hold on a pserver
// (--max_memory_mb), and what they hold: dense blocks are reserved when a
// job is built, sparse rows as their chunks are allocated, sync
// accumulators while a step is assembled. Lock-free. Thread-safe.
class MemoryBudget {
 public:
  // `limit_bytes` 0: no limit (used() is still counted).
  explicit MemoryBudget(int64_t limit_bytes) : limit_(limit_bytes) {}

  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Reserves `bytes` unless that would leave less than `keep_free` of the
  // limit; returns whether it did.
  bool TryReserve(int64_t bytes, int64_t keep_free = 0) {
    int64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (limit_ > 0 && used + bytes > limit_ - keep_free) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes,
                                          std::memory_order_relaxed));
    return true;
  }
  // Whether `bytes` more would fit now (reserves nothing).
  bool Fits(int64_t bytes) const {
    return limit_ <= 0 ||
           used_.load(std::memory_order_relaxed) + bytes <= limit_;
  }
  // Counts `bytes` whatever the limit (memory already allocated, or bounded
  // by a check made before).
  void Add(int64_t bytes) { used_.fetch_add(bytes, std::memory_order_relaxed); }
  void Release(int64_t bytes) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
  }

  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_; }
  // What growing stores (sparse rows) leave free for the sums of a sync
  // step being assembled: an eighth of the limit.
  int64_t headroom() const { return limit_ / 8; }

 private:
  const int64_t limit_;
  std::atomic<int64_t> used_{0};
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_MEMORY_BUDGET_H_
