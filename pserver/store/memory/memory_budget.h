#ifndef SHARDPS_PSERVER_STORE_MEMORY_MEMORY_BUDGET_H_
#define SHARDPS_PSERVER_STORE_MEMORY_MEMORY_BUDGET_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace shardps {

// The bytes that tables and optimizer state may hold on a pserver
// (--max_memory_mb), and what they hold: dense blocks are reserved when a
// job is built, sparse rows as their chunks are allocated, sync
// accumulators while a step is assembled. Lock-free. Thread-safe.
class MemoryBudget {
 public:
  // `limit_bytes` 0: no limit (used() is still counted). With a `parent`
  // (the pserver's, when this is a job's: --max_memory_mb_per_job), every
  // byte counted here is counted there too, and a reservation must fit
  // both.
  explicit MemoryBudget(int64_t limit_bytes, MemoryBudget* parent = nullptr)
      : limit_(limit_bytes), parent_(parent) {}

  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Reserves `bytes` unless that would leave less than `keep_free` of the
  // limit (the parent's own headroom() of its limit, when keep_free > 0);
  // returns whether it did.
  bool TryReserve(int64_t bytes, int64_t keep_free = 0) {
    int64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (limit_ > 0 && used + bytes > limit_ - keep_free) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes,
                                          std::memory_order_relaxed));
    if (parent_ != nullptr &&
        !parent_->TryReserve(bytes, keep_free > 0 ? parent_->headroom() : 0)) {
      used_.fetch_sub(bytes, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  // Whether `bytes` more would fit now (reserves nothing).
  bool Fits(int64_t bytes) const {
    return (limit_ <= 0 ||
            used_.load(std::memory_order_relaxed) + bytes <= limit_) &&
           (parent_ == nullptr || parent_->Fits(bytes));
  }
  // Counts `bytes` whatever the limit (memory already allocated, or bounded
  // by a check made before).
  void Add(int64_t bytes) {
    used_.fetch_add(bytes, std::memory_order_relaxed);
    if (parent_ != nullptr) parent_->Add(bytes);
  }
  void Release(int64_t bytes) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    if (parent_ != nullptr) parent_->Release(bytes);
  }

  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  // The tightest limit in force: this budget's or its parent's (0: none).
  int64_t EffectiveLimit() const {
    const int64_t parent = parent_ != nullptr ? parent_->EffectiveLimit() : 0;
    if (limit_ <= 0) return parent;
    return parent <= 0 ? limit_ : std::min(limit_, parent);
  }
  // This budget's own limit (0: none; the parent's may still bound it).
  int64_t limit() const { return limit_; }
  // What growing stores (sparse rows) leave free for the sums of a sync
  // step being assembled: an eighth of the limit.
  int64_t headroom() const { return limit_ / 8; }
  // The limit `bytes` more would pass, for a refusal's message: the flag
  // that sets it (the job's when it is the tighter, else the pserver's),
  // the limit and what is held against it.
  struct Bound {
    const char* flag;
    int64_t limit;
    int64_t used;
  };
  Bound BoundFor(int64_t bytes) const {
    if (parent_ == nullptr) return {"--max_memory_mb", limit_, used()};
    if (limit_ > 0 && used() + bytes > limit_) {
      return {"--max_memory_mb_per_job", limit_, used()};
    }
    return parent_->BoundFor(bytes);
  }

 private:
  const int64_t limit_;
  MemoryBudget* const parent_;
  std::atomic<int64_t> used_{0};
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_MEMORY_MEMORY_BUDGET_H_
