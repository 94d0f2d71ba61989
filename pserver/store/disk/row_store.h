#ifndef SHARDPS_PSERVER_STORE_DISK_ROW_STORE_H_
#define SHARDPS_PSERVER_STORE_DISK_ROW_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "pserver/store/disk/key_filter.h"
#include "pserver/store/disk/row_buffer.h"

namespace rocksdb {
class Cache;
class DB;
class Snapshot;
struct Options;
}  // namespace rocksdb

namespace shardps {

// The rows of a sparse table that its memory cache does not hold, in a
// RocksDB database on a local directory (docs/sparse_memory.md, "Disk
// tier"). uint64 key to a row's bytes, opaque here. The database is the
// table's working memory, not its durability: it is made empty when
// opened and removed when closed, written without a write-ahead log, and
// a restarted pserver rebuilds it from a checkpoint (as it does its
// memory). Keys are filed under one of kBuckets buckets by a hash, so that
// a checkpoint reads them a bucket at a time.
//
// Writes go to a buffer in memory (RowBuffer), not to RocksDB's memtable;
// a full buffer is sealed, and a thread of the store writes it as a sorted
// file and ingests it (IngestExternalFile), while reads still find its
// rows. Thread-safe.
class RowStore {
 public:
  static constexpr int kBuckets = 4096;

  struct Options {
    std::string dir;  // made (or emptied) by Open, removed by the destructor
    // The rows written and not yet in a file: two buffers of this many
    // bytes at most (one filling, one being written). Then RocksDB's
    // block cache, which reads of the mapped files hardly use (ReaderBytes
    // is the rest), and its memtables (kMemtableBytes).
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

  // RocksDB's memtables, which only Clear's deletion of every row uses.
  static constexpr int64_t kMemtableBytes = 2 * (64 << 10);
  // What a store of `options` may hold in memory, the filter included;
  // while a checkpoint streams, its snapshot may keep two buffers more.
  static int64_t MemoryOf(const Options& options);

  const std::string& dir() const { return dir_; }
  int64_t MemoryBytes() const { return memory_bytes_; }
  // The memory of RocksDB's readers of the files on disk, which keep their
  // index and filter blocks: it grows with the rows on disk (their blocks'
  // bytes are pages of the mapped files, the kernel's page cache).
  int64_t ReaderBytes() const;
  static int BucketOf(uint64_t key);

  // A point-in-time view: reads through it see the store as it was when
  // it was taken (the buffers' rows then included: the snapshot keeps
  // them). Released when the last reference goes. No I/O.
  class Snapshot;
  std::shared_ptr<const Snapshot> TakeSnapshot();

  // values[i] = the row of keys[i] and found[i] = true, or found[i] =
  // false when the store has none (without a read when the filter has
  // never seen the key). Through `snapshot` when not null; else each key
  // as it was at the call or written since (never older).
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
    struct Op {
      uint64_t key;
      int64_t offset;
      int32_t size;  // RowBuffer::kDeletedSize: a deletion
    };
    std::vector<Op> ops_;
    std::string rows_;
    int count_ = 0;
  };
  // Applies the batch to the buffer, readable at once. When both buffers
  // are full, waits for the one being written; if that write failed,
  // returns its error: RESOURCE_EXHAUSTED when the disk is full (RocksDB's
  // message and the directory named), else UNAVAILABLE, and nothing of
  // the batch is applied (the rows already taken stay readable, and the
  // store retries the file every second).
  absl::Status Write(const Batch& batch);

  // Writes the buffers' rows to files and waits for it: the error of a
  // file that cannot be written (as Write), which the store retries.
  absl::Status Flush();
  // Deletes every row.
  absl::Status Clear();
  // RocksDB's estimate of the rows held (deleted rows may count until a
  // compaction), and the buffers' rows.
  int64_t EstimatedRows() const;
  // The memory of the write buffers (the filling one and those sealed and
  // not yet in RocksDB): at most two buffers' bytes and a batch.
  int64_t BufferedBytes() const;
  // Files of buffered rows written and ingested so far.
  int64_t FilesIngested() const { return files_ingested_.load(); }

  // f(key, row) for every row of `bucket` in `snapshot`, in key order of
  // their encoding. Stops at, and returns, a read error.
  absl::Status ForEachInBucket(
      int bucket, const Snapshot& snapshot,
      const std::function<void(uint64_t key, absl::string_view row)>& f) const;

 private:
  using Sealed = std::shared_ptr<const RowBuffer>;

  RowStore(const Options& options, std::unique_ptr<rocksdb::Options> rocks,
           std::unique_ptr<rocksdb::DB> db,
           std::shared_ptr<rocksdb::Cache> cache);

  // Makes the filling buffer the newest sealed one.
  void SealLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The thread that writes sealed buffers, oldest first.
  void IngestLoop();
  // Writes `buffer` as a sorted file and ingests it.
  absl::Status Ingest(const RowBuffer& buffer, int64_t number);
  // Waits (a while at most) for compactions when the files not yet
  // compacted reach RocksDB's limit for writes.
  void WaitForCompactions() const;
  // Looks `key` up in the buffers (the filling one, then the sealed ones
  // newest first): true with *found set when one holds it.
  static bool FindInBuffers(const RowBuffer* filling,
                            absl::Span<const Sealed> sealed, uint64_t key,
                            std::string* value, bool* found);

  const std::string dir_;
  const int64_t buffer_bytes_;
  std::unique_ptr<rocksdb::Options> rocks_;  // also the ingested files'
  std::shared_ptr<rocksdb::Cache> cache_;
  std::unique_ptr<rocksdb::DB> db_;
  int64_t memory_bytes_;               // the filter's included
  std::unique_ptr<KeyFilter> filter_;  // null without one

  mutable absl::Mutex mu_;
  // Signalled when a buffer is sealed, ingested or fails, and at stop.
  absl::CondVar cv_;
  std::unique_ptr<RowBuffer> filling_ ABSL_GUARDED_BY(mu_);
  std::vector<Sealed> sealed_ ABSL_GUARDED_BY(mu_);  // oldest first
  int64_t sealed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sealed_rows_ ABSL_GUARDED_BY(mu_) = 0;
  bool ingesting_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status ingest_error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> files_ingested_{0};
  std::thread ingester_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_DISK_ROW_STORE_H_
