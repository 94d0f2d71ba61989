#include "pserver/store/disk/row_store.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/placement/shard_map.h"
#include "glog/logging.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"

namespace shardps {
namespace {

constexpr size_t kKeyBytes = 10;  // the bucket (2 bytes), the key (8)
// Sorted runs not yet compacted at which writes wait (RocksDB's own limit
// for its memtables' flushes; ingested files are held to it by the store).
constexpr int kStopFiles = 72;
constexpr char kIngestPrefix[] = "ingest-";

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
  // Rows come as ingested files (RowBuffer); the memtables hold only a
  // Clear's deletion.
  o.write_buffer_size = static_cast<size_t>(RowStore::kMemtableBytes / 2);
  o.max_write_buffer_number = 2;
  o.max_background_jobs = 2;
  o.compression = rocksdb::kNoCompression;  // floats hardly compress
  o.avoid_flush_during_shutdown = true;     // the directory goes next
  o.max_open_files = -1;                    // no table cache churn
  // Universal (tiered) compaction, once 16 sorted runs are there: most
  // rows are written once and seldom read (a CTR table's long tail), so
  // fewer rewrites (2.8 times the bytes written instead of leveled
  // compaction's 7.5) are worth a read's look at more runs' filters
  // (docs/sparse_memory.md, "The disk tier": 16 runs did better than 8,
  // 32 or 64 once rows came as ingested files). A compaction may need up
  // to twice the rows' bytes again on disk while it runs.
  o.compaction_style = rocksdb::kCompactionStyleUniversal;
  o.level0_file_num_compaction_trigger = 16;
  o.level0_slowdown_writes_trigger = 52;
  o.level0_stop_writes_trigger = kStopFiles;
  // Rows read straight from the files' pages, without a copy.
  o.allow_mmap_reads = true;
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
  Snapshot(rocksdb::DB* db, const rocksdb::Snapshot* snapshot,
           std::vector<Sealed> buffers)
      : db_(db), snapshot_(snapshot), buffers_(std::move(buffers)) {}
  ~Snapshot() { db_->ReleaseSnapshot(snapshot_); }
  const rocksdb::Snapshot* get() const { return snapshot_; }
  // The buffers not yet in RocksDB when it was taken, oldest first.
  absl::Span<const Sealed> buffers() const { return buffers_; }

 private:
  rocksdb::DB* const db_;
  const rocksdb::Snapshot* const snapshot_;
  const std::vector<Sealed> buffers_;
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
  auto o = std::make_unique<rocksdb::Options>(RocksOptions(options, &cache));
  // Whatever a previous pserver left there is not this table's.
  rocksdb::Status s = rocksdb::DestroyDB(options.dir, *o);
  if (!s.ok()) return FromRocks(s, "emptying the directory", options.dir);
  for (const auto& entry :
       std::filesystem::directory_iterator(options.dir, ec)) {
    if (entry.path().filename().string().rfind(kIngestPrefix, 0) == 0) {
      std::filesystem::remove(entry.path(), ec);
    }
  }
  rocksdb::DB* db = nullptr;
  s = rocksdb::DB::Open(*o, options.dir, &db);
  if (!s.ok()) return FromRocks(s, "opening", options.dir);
  return std::unique_ptr<RowStore>(
      new RowStore(options, std::move(o), std::unique_ptr<rocksdb::DB>(db),
                   std::move(cache)));
}

int64_t RowStore::MemoryOf(const Options& options) {
  return 2 * options.write_buffer_bytes + options.block_cache_bytes +
         kMemtableBytes +
         (options.filter_bytes > 0 ? KeyFilter::BytesFor(options.filter_bytes)
                                   : 0);
}

RowStore::RowStore(const Options& options,
                   std::unique_ptr<rocksdb::Options> rocks,
                   std::unique_ptr<rocksdb::DB> db,
                   std::shared_ptr<rocksdb::Cache> cache)
    : dir_(options.dir),
      buffer_bytes_(std::max<int64_t>(options.write_buffer_bytes, 64 << 10)),
      rocks_(std::move(rocks)),
      cache_(std::move(cache)),
      db_(std::move(db)),
      memory_bytes_(MemoryOf(options)),
      filter_(options.filter_bytes > 0
                  ? std::make_unique<KeyFilter>(options.filter_bytes)
                  : nullptr),
      filling_(std::make_unique<RowBuffer>(buffer_bytes_)) {
  ingester_ = std::thread([this] { IngestLoop(); });
}

RowStore::~RowStore() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    stopping_ = true;
    cv_.SignalAll();
  }
  ingester_.join();     // the rows still in buffers go with the directory
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

std::shared_ptr<const RowStore::Snapshot> RowStore::TakeSnapshot() {
  absl::MutexLock l(&mu_);
  SealLocked();
  // Under mu_: a buffer leaves sealed_ only once it is in RocksDB, so each
  // row written is in the buffers kept or under the snapshot (or both).
  return std::make_shared<const Snapshot>(db_.get(), db_->GetSnapshot(),
                                          sealed_);
}

bool RowStore::FindInBuffers(const RowBuffer* filling,
                             absl::Span<const Sealed> sealed, uint64_t key,
                             std::string* value, bool* found) {
  RowBuffer::Found f = RowBuffer::Found::kNotHere;
  if (filling != nullptr) f = filling->Find(key, value);
  for (auto it = sealed.rbegin();
       f == RowBuffer::Found::kNotHere && it != sealed.rend(); ++it) {
    f = (*it)->Find(key, value);
  }
  if (f == RowBuffer::Found::kNotHere) return false;
  *found = f == RowBuffer::Found::kRow;
  return true;
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
  auto look = [&](const RowBuffer* filling, absl::Span<const Sealed> sealed) {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (filter_ != nullptr && !filter_->MayContain(keys[i])) continue;
      bool here = false;
      if (FindInBuffers(filling, sealed, keys[i], &(*values)[i], &here)) {
        (*found)[i] = here;
      } else {
        at.push_back(i);
      }
    }
  };
  if (snapshot != nullptr) {
    look(nullptr, snapshot->buffers());
  } else {
    // A key in no buffer now is in RocksDB as it is now, or newer when a
    // buffer is ingested before the read below: never older.
    absl::MutexLock l(&mu_);
    look(filling_.get(), sealed_);
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

RowStore::Batch::Batch() = default;
RowStore::Batch::~Batch() = default;

void RowStore::Batch::Put(uint64_t key, absl::string_view row) {
  ops_.push_back(Op{key, static_cast<int64_t>(rows_.size()),
                    static_cast<int32_t>(row.size())});
  rows_.append(row.data(), row.size());
  ++count_;
}

void RowStore::Batch::Delete(uint64_t key) {
  ops_.push_back(Op{key, 0, RowBuffer::kDeletedSize});
  ++count_;
}

absl::Status RowStore::Write(const Batch& batch) {
  if (batch.count_ == 0) return absl::OkStatus();
  const int64_t rows = static_cast<int64_t>(batch.rows_.size());
  absl::MutexLock l(&mu_);
  while (true) {
    const int64_t after = filling_->BytesWith(rows, batch.count_);
    const bool fits = filling_->empty() || after <= buffer_bytes_;
    // Two buffers' bytes in all (a snapshot seals a buffer early).
    const bool room =
        sealed_.empty() || sealed_bytes_ + after <= 2 * buffer_bytes_;
    if (fits && room) break;
    if (!fits && sealed_.empty()) {
      SealLocked();  // once the one before is in RocksDB
      continue;
    }
    if (!ingest_error_.ok()) return ingest_error_;
    cv_.Wait(&mu_);
  }
  for (const Batch::Op& op : batch.ops_) {
    if (op.size == RowBuffer::kDeletedSize) {
      filling_->Delete(op.key);
      continue;
    }
    // In the filter before it can be read.
    if (filter_ != nullptr) filter_->Add(op.key);
    filling_->Put(op.key, absl::string_view(batch.rows_.data() + op.offset,
                                            static_cast<size_t>(op.size)));
  }
  return absl::OkStatus();
}

void RowStore::SealLocked() {
  if (filling_->empty()) return;
  sealed_bytes_ += filling_->bytes();
  sealed_rows_ += filling_->rows();
  sealed_.push_back(std::move(filling_));
  filling_ = std::make_unique<RowBuffer>(buffer_bytes_);
  cv_.SignalAll();
}

void RowStore::IngestLoop() {
  int64_t number = 0;
  mu_.Lock();
  while (!stop_) {
    if (sealed_.empty()) {
      cv_.Wait(&mu_);
      continue;
    }
    const Sealed next = sealed_.front();
    ingesting_ = true;
    mu_.Unlock();
    WaitForCompactions();
    const absl::Status st = Ingest(*next, ++number);
    mu_.Lock();
    ingesting_ = false;
    cv_.SignalAll();
    if (!st.ok()) {
      LOG_IF(ERROR, ingest_error_.ok())
          << st
          << "; its rows stay in memory, and writes wait, until it "
             "succeeds (tried again every second)";
      ingest_error_ = st;
      cv_.WaitWithTimeout(&mu_, absl::Seconds(1));
      // A compaction that found the disk full stops RocksDB's writes until
      // told to go on (no-op otherwise).
      mu_.Unlock();
      db_->Resume().PermitUncheckedError();
      mu_.Lock();
      continue;
    }
    ingest_error_ = absl::OkStatus();
    ++files_ingested_;
    // Clear may have dropped it meanwhile.
    if (!sealed_.empty() && sealed_.front() == next) {
      sealed_.erase(sealed_.begin());
      sealed_bytes_ -= next->bytes();
      sealed_rows_ -= next->rows();
    }
  }
  mu_.Unlock();
}

absl::Status RowStore::Ingest(const RowBuffer& buffer, int64_t number) {
  const std::string path =
      absl::StrCat(dir_, "/", kIngestPrefix, number, ".sst");
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(*rocks_), *rocks_,
                                /*column_family=*/nullptr,
                                /*invalidate_page_cache=*/false);
  rocksdb::Status s = writer.Open(path);
  char k[kKeyBytes];
  for (const RowBuffer::Entry& e : buffer.Sorted(&RowStore::BucketOf)) {
    if (!s.ok()) break;
    EncodeKey(e.key, k);
    const rocksdb::Slice key(k, kKeyBytes);
    if (e.size == RowBuffer::kDeletedSize) {
      s = writer.Delete(key);
    } else {
      const absl::string_view row = buffer.RowOf(e);
      s = writer.Put(key, rocksdb::Slice(row.data(), row.size()));
    }
  }
  if (s.ok()) s = writer.Finish();
  if (s.ok()) {
    rocksdb::IngestExternalFileOptions io;
    io.move_files = true;           // linked, not copied
    io.write_global_seqno = false;  // kept in the MANIFEST, not the file
    s = db_->IngestExternalFile({path}, io);
  }
  if (!s.ok()) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  return FromRocks(s, "writing a file of rows", dir_);
}

void RowStore::WaitForCompactions() const {
  // 10 s at most: a slow compaction makes reads slower, not rows lost.
  for (int i = 0; i < 1000 && !stopping_.load(); ++i) {
    uint64_t files = 0;
    if (!db_->GetIntProperty("rocksdb.num-files-at-level0", &files) ||
        files < static_cast<uint64_t>(kStopFiles)) {
      return;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::Status RowStore::Flush() {
  absl::MutexLock l(&mu_);
  SealLocked();
  while (!sealed_.empty()) {
    if (!ingest_error_.ok()) return ingest_error_;
    cv_.Wait(&mu_);
  }
  return absl::OkStatus();
}

absl::Status RowStore::Clear() {
  // The filter keeps its keys: a write racing a reset could lose its own.
  absl::MutexLock l(&mu_);
  // A file being ingested lands first, and goes with the rest.
  while (ingesting_) cv_.Wait(&mu_);
  filling_ = std::make_unique<RowBuffer>(buffer_bytes_);
  sealed_.clear();
  sealed_bytes_ = 0;
  sealed_rows_ = 0;
  ingest_error_ = absl::OkStatus();
  cv_.SignalAll();
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

int64_t RowStore::BufferedBytes() const {
  absl::MutexLock l(&mu_);
  return sealed_bytes_ + filling_->bytes();
}

int64_t RowStore::EstimatedRows() const {
  uint64_t n = 0;
  if (!db_->GetIntProperty("rocksdb.estimate-num-keys", &n)) n = 0;
  absl::MutexLock l(&mu_);
  return static_cast<int64_t>(n) + filling_->rows() + sealed_rows_;
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
  // The bucket's rows in the snapshot's buffers, the newest of each key
  // (buffers oldest first), go before RocksDB's of the same key.
  std::map<uint64_t, std::pair<const RowBuffer*, const RowBuffer::Entry*>>
      buffered;
  for (const Sealed& b : snapshot.buffers()) {
    b->Sorted(&RowStore::BucketOf);
    for (const RowBuffer::Entry& e : b->InBucket(bucket)) {
      buffered[e.key] = {b.get(), &e};
    }
  }
  auto pending = buffered.begin();
  auto emit_next = [&]() {
    const auto& [buffer, e] = pending->second;
    if (e->size != RowBuffer::kDeletedSize) f(e->key, buffer->RowOf(*e));
    ++pending;
  };
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  for (it->Seek(rocksdb::Slice(lo, 2)); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != kKeyBytes) {
      return absl::DataLossError(absl::StrCat(
          "sparse row store ", dir_, ": a key of ", k.size(), " bytes"));
    }
    const uint64_t key = DecodeKey(k);
    while (pending != buffered.end() && pending->first < key) emit_next();
    if (pending != buffered.end() && pending->first == key) {
      emit_next();  // this key's newer version
      continue;
    }
    f(key, absl::string_view(it->value().data(), it->value().size()));
  }
  if (absl::Status st = FromRocks(it->status(), "a scan", dir_); !st.ok()) {
    return st;
  }
  while (pending != buffered.end()) emit_next();
  return absl::OkStatus();
}

}  // namespace shardps
