#ifndef SHARDPS_PSERVER_STORE_DISK_ROW_BUFFER_H_
#define SHARDPS_PSERVER_STORE_DISK_ROW_BUFFER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace shardps {

// Rows written to a RowStore and not in RocksDB yet: the newest version of
// each key (its row's bytes, or that it was deleted), in memory, until the
// store writes them as one sorted file and ingests it (RowStore's
// "write buffer"). A hash of keys, not RocksDB's memtable: a skip list of
// random keys cost a pserver a fifth of its cycles in comparisons
// (docs/sparse_memory.md, "The disk tier").
//
// Not thread-safe while written; once the store seals it (no more Put or
// Delete), any number of threads may read it, and `sorted` orders it once.
class RowBuffer {
 public:
  // Room for `reserve_bytes` of rows made at once (pages are touched as
  // they are written).
  explicit RowBuffer(int64_t reserve_bytes = 0);
  RowBuffer(const RowBuffer&) = delete;
  RowBuffer& operator=(const RowBuffer&) = delete;

  void Put(uint64_t key, absl::string_view row);
  void Delete(uint64_t key);

  enum class Found { kNotHere, kRow, kDeleted };
  // kRow with the row's bytes in *row, kDeleted, or kNotHere.
  Found Find(uint64_t key, std::string* row) const;

  bool empty() const { return at_.empty(); }
  // Keys with a row (not deleted).
  int64_t rows() const { return rows_; }
  // The memory written: rows' bytes (an overwritten row's too), the
  // hash, and the order (made once sealed, counted before).
  int64_t bytes() const;
  // bytes() once `more_bytes` of rows of `more_keys` keys not here are
  // added (the hash grown as it would be).
  int64_t BytesWith(int64_t more_bytes, int64_t more_keys) const;

  struct Entry {
    uint64_t key;
    int32_t bucket;
    int32_t size;  // kDeletedSize: deleted
    int64_t offset;
  };
  static constexpr int32_t kDeletedSize = -1;
  // Every key once, by (bucket_of(key), key): the order of the store's
  // keys. Made at the first call (thread-safe); bucket_of must be the same
  // function at every call. The buffer must not change after it.
  absl::Span<const Entry> Sorted(
      absl::FunctionRef<int(uint64_t)> bucket_of) const;
  // The part of Sorted() in `bucket` (Sorted must have been called).
  absl::Span<const Entry> InBucket(int bucket) const;
  absl::string_view RowOf(const Entry& e) const {
    return absl::string_view(data_.data() + e.offset,
                             static_cast<size_t>(e.size));
  }

 private:
  struct Place {
    int64_t offset;
    int32_t size;  // kDeletedSize: deleted
  };
  absl::flat_hash_map<uint64_t, Place> at_;
  std::string data_;
  int64_t rows_ = 0;
  mutable absl::once_flag sorted_once_;
  mutable std::vector<Entry> sorted_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_DISK_ROW_BUFFER_H_
