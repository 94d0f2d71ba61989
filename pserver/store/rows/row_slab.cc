#include "pserver/store/rows/row_slab.h"

namespace shardps {

int RowSlab::RowBytes(int row_floats, const RowCodec& codec) {
  const int bytes =
      static_cast<int>(sizeof(RowHead)) + row_floats * codec.bytes_per_float();
  return (bytes + 3) / 4 * 4;  // float32 floats stay aligned
}

RowSlab::RowSlab(int row_floats, RowCodec codec, int rows_per_chunk)
    : row_floats_(row_floats),
      codec_(codec),
      row_bytes_(RowBytes(row_floats, codec)),
      rows_per_chunk_(rows_per_chunk) {}

const float* RowSlab::Floats(uint32_t slot, int n, float* scratch) const {
  if (codec_.is_float32()) return static_cast<const float*>(Payload(slot));
  codec_.Decode(Payload(slot), n, scratch);
  return scratch;
}

void RowSlab::SetFloats(uint32_t slot, const float* row) const {
  codec_.EncodeNearest(row, row_floats_, Payload(slot));
}

uint32_t RowSlab::Find(uint64_t key) const {
  return index_.Find(key, RowIndex::Hash(key),
                     [this](uint32_t slot) { return Head(slot)->key; });
}

void RowSlab::FindBatch(absl::Span<const uint64_t> keys, size_t prefetch_bytes,
                        uint32_t* slots) const {
  const size_t n = keys.size();
  uint32_t hashes[kLookupBatch];
  for (size_t j = 0; j < n; ++j) {
    hashes[j] = RowIndex::Hash(keys[j]);
    index_.Prefetch(hashes[j]);
  }
  for (size_t j = 0; j < n; ++j) {
    slots[j] = index_.First(hashes[j]);
    if (slots[j] == kNone) continue;
    const char* row = reinterpret_cast<const char*>(Head(slots[j]));
    for (size_t b = 0; b < prefetch_bytes; b += 64) {
      __builtin_prefetch(row + b);
    }
  }
  for (size_t j = 0; j < n; ++j) {
    if (slots[j] != kNone && Head(slots[j])->key != keys[j]) {
      slots[j] = Find(keys[j]);  // another key of the same hash
    }
  }
}

int64_t RowSlab::BytesToAdd() const {
  int64_t bytes = static_cast<int64_t>(index_.GrowthBytes());
  if (free_slots_.empty() && slots_used_ % rows_per_chunk_ == 0) {
    bytes += int64_t{rows_per_chunk_} * row_bytes_;
  }
  return bytes;
}

uint32_t RowSlab::Add(uint64_t key) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = slots_used_++;
    if (slot % rows_per_chunk_ == 0) {
      chunks_.emplace_back(
          new uint8_t[static_cast<size_t>(rows_per_chunk_) * row_bytes_]);
    }
  }
  RowHead* h = Head(slot);
  h->key = key;
  h->last_step = 0;
  h->updates = 0;
  index_.Insert(RowIndex::Hash(key), slot);
  return slot;
}

void RowSlab::Remove(uint64_t key, uint32_t slot) {
  if (index_.Erase(RowIndex::Hash(key), slot)) free_slots_.push_back(slot);
}

void RowSlab::Clear() {
  index_.Clear();
  chunks_.clear();
  slots_used_ = 0;
  free_slots_.clear();
  free_slots_.shrink_to_fit();
}

size_t RowSlab::Bytes() const {
  return index_.Bytes() +
         chunks_.size() * static_cast<size_t>(rows_per_chunk_) * row_bytes_ +
         free_slots_.capacity() * sizeof(uint32_t);
}

}  // namespace shardps
