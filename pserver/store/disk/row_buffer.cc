#include "pserver/store/disk/row_buffer.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace shardps {

RowBuffer::RowBuffer(int64_t reserve_bytes) {
  if (reserve_bytes > 0) data_.reserve(static_cast<size_t>(reserve_bytes));
}

void RowBuffer::Put(uint64_t key, absl::string_view row) {
  auto [it, added] = at_.try_emplace(key);
  if (added || it->second.size == kDeletedSize) ++rows_;
  it->second = Place{static_cast<int64_t>(data_.size()),
                     static_cast<int32_t>(row.size())};
  data_.append(row.data(), row.size());
}

void RowBuffer::Delete(uint64_t key) {
  auto [it, added] = at_.try_emplace(key);
  if (!added && it->second.size != kDeletedSize) --rows_;
  it->second = Place{0, kDeletedSize};
}

RowBuffer::Found RowBuffer::Find(uint64_t key, std::string* row) const {
  auto it = at_.find(key);
  if (it == at_.end()) return Found::kNotHere;
  if (it->second.size == kDeletedSize) return Found::kDeleted;
  row->assign(data_.data() + it->second.offset,
              static_cast<size_t>(it->second.size));
  return Found::kRow;
}

int64_t RowBuffer::bytes() const { return BytesWith(0, 0); }

int64_t RowBuffer::BytesWith(int64_t more_bytes, int64_t more_keys) const {
  // The hash grows to twice its slots (and one) past 7/8 full; the order,
  // made once sealed, is counted from the start, so that the figure does
  // not change once sealed.
  // A slot of the hash: its pair and a control byte.
  constexpr int64_t kSlotBytes = sizeof(std::pair<const uint64_t, Place>) + 1;
  const int64_t keys = static_cast<int64_t>(at_.size()) + more_keys;
  int64_t slots = static_cast<int64_t>(at_.capacity());
  while (keys > slots - slots / 8) slots = slots * 2 + 1;
  return static_cast<int64_t>(data_.size()) + more_bytes + slots * kSlotBytes +
         keys * static_cast<int64_t>(sizeof(Entry));
}

absl::Span<const RowBuffer::Entry> RowBuffer::Sorted(
    absl::FunctionRef<int(uint64_t)> bucket_of) const {
  absl::call_once(sorted_once_, [&] {
    sorted_.reserve(at_.size());
    for (const auto& [key, place] : at_) {
      sorted_.push_back(Entry{key, bucket_of(key), place.size, place.offset});
    }
    std::sort(sorted_.begin(), sorted_.end(),
              [](const Entry& a, const Entry& b) {
                return std::tie(a.bucket, a.key) < std::tie(b.bucket, b.key);
              });
  });
  return sorted_;
}

absl::Span<const RowBuffer::Entry> RowBuffer::InBucket(int bucket) const {
  const auto lo =
      std::lower_bound(sorted_.begin(), sorted_.end(), bucket,
                       [](const Entry& e, int b) { return e.bucket < b; });
  const auto hi =
      std::upper_bound(lo, sorted_.end(), bucket,
                       [](int b, const Entry& e) { return b < e.bucket; });
  return absl::Span<const Entry>(sorted_.data() + (lo - sorted_.begin()),
                                 static_cast<size_t>(hi - lo));
}

}  // namespace shardps
