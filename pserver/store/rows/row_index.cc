#include "pserver/store/rows/row_index.h"

#include <utility>

namespace shardps {

uint32_t RowIndex::First(uint32_t hash) const {
  if (capacity_ == 0) return kNone;
  for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
    const Entry& e = entries_[i];
    if (e.slot == kNone || e.hash == hash) return e.slot;
  }
}

void RowIndex::Insert(uint32_t hash, uint32_t slot) {
  if ((size_ + 1) * 4 > capacity_ * 3) Grow();
  size_t i = hash & mask_;
  while (entries_[i].slot != kNone) i = (i + 1) & mask_;
  entries_[i] = Entry{hash, slot};
  ++size_;
}

bool RowIndex::Erase(uint32_t hash, uint32_t slot) {
  if (capacity_ == 0) return false;
  size_t i = hash & mask_;
  for (;; i = (i + 1) & mask_) {
    if (entries_[i].slot == kNone) return false;
    if (entries_[i].slot == slot && entries_[i].hash == hash) break;
  }
  // Backward shift: each later entry of the run that may sit at the hole
  // (its home is not between the hole and it) moves there.
  for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
    const Entry& e = entries_[j];
    if (e.slot == kNone) break;
    const size_t home = e.hash & mask_;
    if (((j - home) & mask_) >= ((j - i) & mask_)) {
      entries_[i] = e;
      i = j;
    }
  }
  entries_[i].slot = kNone;
  --size_;
  return true;
}

void RowIndex::Grow() {
  const size_t capacity = capacity_ == 0 ? kMinCapacity : capacity_ * 2;
  std::unique_ptr<Entry[]> old = std::move(entries_);
  const size_t old_capacity = capacity_;
  entries_.reset(new Entry[capacity]);
  for (size_t i = 0; i < capacity; ++i) entries_[i] = Entry{0, kNone};
  capacity_ = capacity;
  mask_ = capacity - 1;
  size_ = 0;
  for (size_t i = 0; i < old_capacity; ++i) {
    if (old[i].slot != kNone) Insert(old[i].hash, old[i].slot);
  }
}

size_t RowIndex::BytesFor(size_t n) {
  if (n == 0) return 0;
  size_t capacity = kMinCapacity;
  while (n * 4 > capacity * 3) capacity *= 2;
  return capacity * sizeof(Entry);
}

void RowIndex::Clear() {
  entries_.reset();
  capacity_ = mask_ = size_ = 0;
}

}  // namespace shardps
