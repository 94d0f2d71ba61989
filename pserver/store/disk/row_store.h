#ifndef SHARDPS_PSERVER_STORE_DISK_ROW_STORE_H_
#define SHARDPS_PSERVER_STORE_DISK_ROW_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "pserver/store/disk/key_filter.h"

namespace rocksdb {
class Cache;
class DB;
class Snapshot;
class WriteBatch;
}  // namespace rocksdb

namespace shardps {

// The rows of a sparse table that its memory cache does not hold, in a
// RocksDB database on a local directory (docs/sparse_memory.md, "Disk
// tier"). uint64 key to a row's bytes, opaque here. The database is the
// table's working memory, not its durability: it is made empty when
// opened and removed when closed, written without a write-ahead log, and
// a restarted pserver rebuilds it from a checkpoint (as it does its
// memory). Keys are filed under one of kBuckets buckets by a hash, so that
// a checkpoint reads them a bucket at a time. Thread-safe.
class RowStore {
 public:
  static constexpr int kBuckets = 4096;

  struct Options {
    std::string dir;  // made (or emptied) by Open, removed by the destructor
    // RocksDB's memory: the memtables (two of write_buffer_bytes at most)
    // and a block cache, which reads of the mapped files hardly use
    // (ReaderBytes is the rest).
    int64_t write_buffer_bytes = 4 << 20;
    int64_t block_cache_bytes = 8 << 20;
    // A filter of the keys written (KeyFilter), so that MultiGet answers
    // most keys never written without RocksDB. 0: none.
    int64_t filter_bytes = 0;
  };

  // This process's directory under `root` (--sparse_store_dir):
  // root/pserver-<pid>, made empty. The directories of processes no
  // longer alive there (a pserver killed with -9) are removed first.
  // UNAVAILABLE, naming the directory, when it cannot be made.
  static absl::StatusOr<std::string> MakeProcessDir(const std::string& root);

  // Opens an empty store in options.dir (its parents are created, and a
  // database already there is destroyed): UNAVAILABLE, naming the
  // directory and RocksDB's reason, when it cannot.
  static absl::StatusOr<std::unique_ptr<RowStore>> Open(const Options& options);
  // Closes the database and removes its directory.
  ~RowStore();
  RowStore(const RowStore&) = delete;
  RowStore& operator=(const RowStore&) = delete;

  const std::string& dir() const { return dir_; }
  // The memory RocksDB may hold (what Options allow).
  int64_t MemoryBytes() const { return memory_bytes_; }
  // The memory of RocksDB's readers of the files on disk, which keep their
  // index and filter blocks: it grows with the rows on disk (their blocks'
  // bytes are pages of the mapped files, the kernel's page cache).
  int64_t ReaderBytes() const;
  static int BucketOf(uint64_t key);

  // A point-in-time view: reads through it see the store as it was when
  // it was taken. Released when the last reference goes.
  class Snapshot;
  std::shared_ptr<const Snapshot> TakeSnapshot() const;

  // values[i] = the row of keys[i] and found[i] = true, or found[i] =
  // false when the store has none (without a read when the filter has
  // never seen the key). Through `snapshot` when not null.
  // An error (an I/O failure, a corrupt block) is returned as RocksDB
  // names it.
  absl::Status MultiGet(absl::Span<const uint64_t> keys,
                        std::vector<std::string>* values,
                        std::vector<bool>* found,
                        const Snapshot* snapshot = nullptr) const;

  // Puts and deletes applied together or not at all.
  class Batch {
   public:
    Batch();
    ~Batch();
    void Put(uint64_t key, absl::string_view row);
    void Delete(uint64_t key);
    int count() const { return count_; }

   private:
    friend class RowStore;
    std::unique_ptr<rocksdb::WriteBatch> batch_;
    int count_ = 0;
    std::vector<uint64_t> put_keys_;  // for the filter
  };
  // RESOURCE_EXHAUSTED when the disk is full (RocksDB's message and the
  // directory named), else UNAVAILABLE for other I/O errors; nothing of
  // the batch is applied then.
  absl::Status Write(Batch& batch);

  // Deletes every row.
  absl::Status Clear();
  // RocksDB's estimate of the rows held (deleted rows may count until a
  // compaction).
  int64_t EstimatedRows() const;

  // f(key, row) for every row of `bucket` in `snapshot`, in key order of
  // their encoding. Stops at, and returns, a read error.
  absl::Status ForEachInBucket(
      int bucket, const Snapshot& snapshot,
      const std::function<void(uint64_t key, absl::string_view row)>& f) const;

 private:
  RowStore(std::string dir, std::unique_ptr<rocksdb::DB> db,
           std::shared_ptr<rocksdb::Cache> cache, int64_t memory_bytes,
           int64_t filter_bytes);

  const std::string dir_;
  std::shared_ptr<rocksdb::Cache> cache_;
  std::unique_ptr<rocksdb::DB> db_;
  int64_t memory_bytes_;               // the filter's included
  std::unique_ptr<KeyFilter> filter_;  // null without one
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_DISK_ROW_STORE_H_
