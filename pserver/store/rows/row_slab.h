#ifndef SHARDPS_PSERVER_STORE_ROWS_ROW_SLAB_H_
#define SHARDPS_PSERVER_STORE_ROWS_ROW_SLAB_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "pserver/store/rows/row_codec.h"
#include "pserver/store/rows/row_index.h"

namespace shardps {

// The start of a row in its chunk; the row's floats follow, in the slab's
// storage. Packed: 20 bytes, so that a bf16 row of dim 16 with one
// accumulator takes 56.
struct RowHead {
  uint64_t key;
  int64_t last_step;
  uint32_t updates;  // Adam's t - 1, saturated at UINT32_MAX
} __attribute__((packed));

// One stripe's rows: fixed-size rows (a RowHead, then `row_floats` floats
// in a RowCodec's storage, padded to 4 bytes) in chunks of
// `rows_per_chunk`, the RowIndex that finds them by key, and the slots
// freed for reuse. Memory is the caller's to account for: BytesToAdd says
// what the next Add allocates. Not thread-safe (a stripe's lock guards it).
class RowSlab {
 public:
  static constexpr uint32_t kNone = RowIndex::kNone;
  // Keys are looked up this many at a time (FindBatch): their rows,
  // prefetched, stay in the cache until they are used.
  static constexpr size_t kLookupBatch = 256;

  // The bytes of a row of `row_floats` floats in `codec`'s storage.
  static int RowBytes(int row_floats, const RowCodec& codec);

  RowSlab(int row_floats, RowCodec codec, int rows_per_chunk);
  RowSlab(const RowSlab&) = delete;
  RowSlab& operator=(const RowSlab&) = delete;

  RowHead* Head(uint32_t slot) const {
    return reinterpret_cast<RowHead*>(
        chunks_[slot / rows_per_chunk_].get() +
        static_cast<size_t>(slot % rows_per_chunk_) * row_bytes_);
  }
  // The row's floats, in the slab's storage.
  void* Payload(uint32_t slot) const {
    return reinterpret_cast<uint8_t*>(Head(slot)) + sizeof(RowHead);
  }
  // The first `n` floats of the row in `slot`: in place for float32
  // storage, else decoded into `scratch` (n floats).
  const float* Floats(uint32_t slot, int n, float* scratch) const;
  // Sets all the row's floats, rounded to the nearest.
  void SetFloats(uint32_t slot, const float* row) const;

  // The slot of `key`, or kNone.
  uint32_t Find(uint64_t key) const;
  // slots[j] = the slot of keys[j], or kNone (at most kLookupBatch keys).
  // The batch's index entries are prefetched, then its rows' first
  // `prefetch_bytes`, then the keys are checked: a table larger than the
  // cache is bound by memory latency, not by work.
  void FindBatch(absl::Span<const uint64_t> keys, size_t prefetch_bytes,
                 uint32_t* slots) const;

  // The bytes the next Add allocates: a chunk when no slot is free and the
  // last chunk is full, and the index's growth.
  int64_t BytesToAdd() const;
  // A slot for `key`, its head (key, 0, 0), filed in the index; its floats
  // are the caller's to set. REQUIRES: `key` is not in the slab.
  uint32_t Add(uint64_t key);
  // Frees `slot`, the row of `key`, for reuse.
  void Remove(uint64_t key, uint32_t slot);
  // Empties the slab, its memory given back.
  void Clear();

  // f(slot) for every row, in no particular order. f must not Add or
  // Remove.
  template <typename F>
  void ForEach(const F& f) const {
    index_.ForEach(f);
  }

  size_t size() const { return index_.size(); }
  // Slots ever handed out, free or not: a slot below it is a row when
  // Find(Head(slot)->key) == slot.
  uint32_t slots_used() const { return slots_used_; }
  int row_bytes() const { return row_bytes_; }
  const RowCodec& codec() const { return codec_; }
  // Chunks, index and free list.
  size_t Bytes() const;

 private:
  const int row_floats_;
  const RowCodec codec_;
  const int row_bytes_;
  const int rows_per_chunk_;
  RowIndex index_;
  std::vector<std::unique_ptr<uint8_t[]>> chunks_;
  uint32_t slots_used_ = 0;
  std::vector<uint32_t> free_slots_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_ROWS_ROW_SLAB_H_
