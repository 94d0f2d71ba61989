#include "pserver/store/disk/row_store.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/placement/shard_map.h"
#include "glog/logging.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace shardps {
namespace {

constexpr size_t kKeyBytes = 10;  // the bucket (2 bytes), the key (8)

// Big-endian, so that a bucket's keys are one range.
void EncodeKey(uint64_t key, char out[kKeyBytes]) {
  const int bucket = RowStore::BucketOf(key);
  out[0] = static_cast<char>(bucket >> 8);
  out[1] = static_cast<char>(bucket & 0xFF);
  for (int i = 0; i < 8; ++i) {
    out[2 + i] = static_cast<char>((key >> (56 - 8 * i)) & 0xFF);
  }
}

uint64_t DecodeKey(const rocksdb::Slice& s) {
  uint64_t key = 0;
  for (int i = 0; i < 8; ++i) {
    key = (key << 8) | static_cast<uint8_t>(s.data()[2 + i]);
  }
  return key;
}

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what,
                       const std::string& dir) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat("sparse row store ", dir, ": ", what,
                                           " failed: ", s.ToString());
  if (s.IsNoSpace() || s.subcode() == rocksdb::Status::kSpaceLimit) {
    return absl::ResourceExhaustedError(
        absl::StrCat(message, " (the disk of --sparse_store_dir is full)"));
  }
  if (s.IsCorruption()) return absl::DataLossError(message);
  return absl::UnavailableError(message);
}

// RocksDB's options for a store of rows, and its block cache.
rocksdb::Options RocksOptions(const RowStore::Options& options,
                              std::shared_ptr<rocksdb::Cache>* cache_out) {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.error_if_exists = true;
  o.write_buffer_size = static_cast<size_t>(options.write_buffer_bytes);
  o.max_write_buffer_number = 2;
  o.max_background_jobs = 2;
  o.compression = rocksdb::kNoCompression;  // floats hardly compress
  o.avoid_flush_during_shutdown = true;     // the directory goes next
  o.max_open_files = -1;                    // no table cache churn
  // Universal (tiered) compaction, once 32 sorted runs are there: most
  // rows are written once and seldom read (a CTR table's long tail), so
  // fewer rewrites (2.8 times the bytes written instead of leveled
  // compaction's 7.5) are worth a read's look at more runs' filters
  // (docs/sparse_memory.md, "The disk tier"). A compaction may need up to
  // twice the rows' bytes again on disk while it runs.
  o.compaction_style = rocksdb::kCompactionStyleUniversal;
  o.level0_file_num_compaction_trigger = 32;
  o.level0_slowdown_writes_trigger = 52;
  o.level0_stop_writes_trigger = 72;
  // Rows read straight from the files' pages, without a copy.
  o.allow_mmap_reads = true;
  // A filter on the memtables too: most keys asked for are not there.
  o.memtable_whole_key_filtering = true;
  o.memtable_prefix_bloom_size_ratio = 0.05;
  // The info LOG in the directory, kept small.
  o.max_log_file_size = 1 << 20;
  o.keep_log_file_num = 2;
  // Blocks read from a mapped file (uncompressed) are used in place and
  // never put in the block cache, so it stays small (Options). Every
  // file's index and filter blocks are kept by its reader while the file
  // lives (ReaderBytes), pointing into the mapped file: a read needs them
  // all. Left to the cache, they were read back, and their checksums
  // verified, at every read: a fifth of a pserver's cycles.
  rocksdb::LRUCacheOptions co;
  co.capacity =
      static_cast<size_t>(std::max<int64_t>(options.block_cache_bytes, 1));
  auto cache = rocksdb::NewLRUCache(co);
  *cache_out = cache;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache;
  table.cache_index_and_filter_blocks = true;
  table.metadata_cache_options.unpartitioned_pinning =
      rocksdb::PinningTier::kAll;
  // Most keys a pull asks for are new: a filter answers them without a
  // read. (A Ribbon filter: a Bloom filter's 1% false positives in 30%
  // less memory.)
  table.filter_policy.reset(rocksdb::NewRibbonFilterPolicy(10));
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return o;
}

}  // namespace

class RowStore::Snapshot {
 public:
  Snapshot(rocksdb::DB* db, const rocksdb::Snapshot* snapshot)
      : db_(db), snapshot_(snapshot) {}
  ~Snapshot() { db_->ReleaseSnapshot(snapshot_); }
  const rocksdb::Snapshot* get() const { return snapshot_; }

 private:
  rocksdb::DB* const db_;
  const rocksdb::Snapshot* const snapshot_;
};

int RowStore::BucketOf(uint64_t key) {
  return static_cast<int>((Mix64(key) >> 24) % kBuckets);
}

absl::StatusOr<std::string> RowStore::MakeProcessDir(const std::string& root) {
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat(
        "--sparse_store_dir: cannot make ", root, ": ", ec.message()));
  }
  const std::string self = absl::StrCat("pserver-", getpid());
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    int pid = 0;
    if (name.rfind("pserver-", 0) != 0 ||
        !absl::SimpleAtoi(name.substr(8), &pid) || pid <= 0) {
      continue;
    }
    if (name == self || (kill(pid, 0) != 0 && errno == ESRCH)) {
      std::error_code gone;
      std::filesystem::remove_all(entry.path(), gone);
      if (!gone && name != self) {
        LOG(INFO) << "--sparse_store_dir: removed " << entry.path().string()
                  << ", left by a pserver no longer running";
      }
    }
  }
  const std::string dir = absl::StrCat(root, "/", self);
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat(
        "--sparse_store_dir: cannot make ", dir, ": ", ec.message()));
  }
  return dir;
}

absl::StatusOr<std::unique_ptr<RowStore>> RowStore::Open(
    const Options& options) {
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("sparse row store: cannot make ",
                                               options.dir, ": ", ec.message(),
                                               " (--sparse_store_dir)"));
  }
  std::shared_ptr<rocksdb::Cache> cache;
  const rocksdb::Options o = RocksOptions(options, &cache);
  // Whatever a previous pserver left there is not this table's.
  rocksdb::Status s = rocksdb::DestroyDB(options.dir, o);
  if (!s.ok()) return FromRocks(s, "emptying the directory", options.dir);
  rocksdb::DB* db = nullptr;
  s = rocksdb::DB::Open(o, options.dir, &db);
  if (!s.ok()) return FromRocks(s, "opening", options.dir);
  return std::unique_ptr<RowStore>(new RowStore(
      options.dir, std::unique_ptr<rocksdb::DB>(db), std::move(cache),
      2 * options.write_buffer_bytes + options.block_cache_bytes,
      options.filter_bytes));
}

RowStore::RowStore(std::string dir, std::unique_ptr<rocksdb::DB> db,
                   std::shared_ptr<rocksdb::Cache> cache, int64_t memory_bytes,
                   int64_t filter_bytes)
    : dir_(std::move(dir)),
      cache_(std::move(cache)),
      db_(std::move(db)),
      memory_bytes_(memory_bytes),
      filter_(filter_bytes > 0 ? std::make_unique<KeyFilter>(filter_bytes)
                               : nullptr) {
  if (filter_ != nullptr) memory_bytes_ += filter_->bytes();
}

RowStore::~RowStore() {
  if (VLOG_IS_ON(1)) {  // compactions, stalls, write amplification
    std::string stats;
    db_->GetProperty("rocksdb.stats", &stats);
    LOG(INFO) << "sparse row store " << dir_ << ": RocksDB's figures:\n"
              << stats;
  }
  db_->Close().PermitUncheckedError();
  db_.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::shared_ptr<const RowStore::Snapshot> RowStore::TakeSnapshot() const {
  return std::make_shared<const Snapshot>(db_.get(), db_->GetSnapshot());
}

absl::Status RowStore::MultiGet(absl::Span<const uint64_t> keys,
                                std::vector<std::string>* values,
                                std::vector<bool>* found,
                                const Snapshot* snapshot) const {
  values->resize(keys.size());
  found->assign(keys.size(), false);
  // The keys RocksDB is asked for: at[j] is the place of the j-th.
  std::vector<size_t> at;
  at.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (filter_ == nullptr || filter_->MayContain(keys[i])) at.push_back(i);
  }
  const size_t n = at.size();
  if (n == 0) return absl::OkStatus();
  std::vector<char> encoded(n * kKeyBytes);
  std::vector<rocksdb::Slice> slices(n);
  for (size_t j = 0; j < n; ++j) {
    EncodeKey(keys[at[j]], &encoded[j * kKeyBytes]);
    slices[j] = rocksdb::Slice(&encoded[j * kKeyBytes], kKeyBytes);
  }
  std::vector<rocksdb::PinnableSlice> pinned(n);
  std::vector<rocksdb::Status> statuses(n);
  rocksdb::ReadOptions ro;
  if (snapshot != nullptr) ro.snapshot = snapshot->get();
  db_->MultiGet(ro, db_->DefaultColumnFamily(), n, slices.data(), pinned.data(),
                statuses.data());
  for (size_t j = 0; j < n; ++j) {
    if (statuses[j].IsNotFound()) continue;
    if (!statuses[j].ok()) return FromRocks(statuses[j], "a read", dir_);
    (*values)[at[j]].assign(pinned[j].data(), pinned[j].size());
    (*found)[at[j]] = true;
  }
  return absl::OkStatus();
}

RowStore::Batch::Batch() : batch_(std::make_unique<rocksdb::WriteBatch>()) {}
RowStore::Batch::~Batch() = default;

void RowStore::Batch::Put(uint64_t key, absl::string_view row) {
  char k[kKeyBytes];
  EncodeKey(key, k);
  batch_
      ->Put(rocksdb::Slice(k, kKeyBytes),
            rocksdb::Slice(row.data(), row.size()))
      .PermitUncheckedError();
  ++count_;
  put_keys_.push_back(key);
}

void RowStore::Batch::Delete(uint64_t key) {
  char k[kKeyBytes];
  EncodeKey(key, k);
  batch_->Delete(rocksdb::Slice(k, kKeyBytes)).PermitUncheckedError();
  ++count_;
}

absl::Status RowStore::Write(Batch& batch) {
  if (batch.count_ == 0) return absl::OkStatus();
  // In the filter before they can be read (also when the write fails:
  // a false positive costs a read, a false negative a row).
  if (filter_ != nullptr) {
    for (uint64_t key : batch.put_keys_) filter_->Add(key);
  }
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;  // rebuilt from a checkpoint after a crash
  return FromRocks(db_->Write(wo, batch.batch_.get()), "a write", dir_);
}

absl::Status RowStore::Clear() {
  // The filter keeps its keys: a write racing a reset could lose its own.
  // Every key: its first byte is that of a bucket below kBuckets.
  const char hi[1] = {static_cast<char>((kBuckets >> 8) + 1)};
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  return FromRocks(db_->DeleteRange(wo, db_->DefaultColumnFamily(),
                                    rocksdb::Slice(), rocksdb::Slice(hi, 1)),
                   "emptying", dir_);
}

int64_t RowStore::ReaderBytes() const {
  uint64_t n = 0;
  if (!db_->GetIntProperty("rocksdb.estimate-table-readers-mem", &n)) return 0;
  return static_cast<int64_t>(n);
}

int64_t RowStore::EstimatedRows() const {
  uint64_t n = 0;
  if (!db_->GetIntProperty("rocksdb.estimate-num-keys", &n)) return 0;
  return static_cast<int64_t>(n);
}

absl::Status RowStore::ForEachInBucket(
    int bucket, const Snapshot& snapshot,
    const std::function<void(uint64_t key, absl::string_view row)>& f) const {
  const char lo[2] = {static_cast<char>(bucket >> 8),
                      static_cast<char>(bucket & 0xFF)};
  const int next = bucket + 1;
  const char hi[2] = {static_cast<char>(next >> 8),
                      static_cast<char>(next & 0xFF)};
  rocksdb::Slice upper(hi, 2);
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot.get();
  ro.fill_cache = false;  // a checkpoint's scan would push out the hot rows
  if (next < kBuckets) ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  for (it->Seek(rocksdb::Slice(lo, 2)); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != kKeyBytes) {
      return absl::DataLossError(absl::StrCat(
          "sparse row store ", dir_, ": a key of ", k.size(), " bytes"));
    }
    f(DecodeKey(k), absl::string_view(it->value().data(), it->value().size()));
  }
  return FromRocks(it->status(), "a scan", dir_);
}

}  // namespace shardps
