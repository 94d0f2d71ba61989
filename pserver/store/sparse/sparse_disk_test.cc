// Sparse tables with a disk tier (SparseTableOptions.disk): the stripes
// cache the rows of a RowStore. A row moves between memory and disk as
// its bytes, so a table with a small cache trains exactly like one with
// unlimited memory; checkpoints, streaming saves and deltas hold the rows
// of both; a full disk refuses new rows with a clear error and keeps what
// it was given.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/testing/small_disk.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "pserver/store/sparse/disk_tier_plan.h"
#include "pserver/store/sparse/sparse_table.h"
#include "pserver/store/sparse/sparse_testing.h"

namespace shardps {
namespace {

using Storage = SparseTableOptions::RowStorage;
constexpr int kDim = 8;

using testing::ReadAll;

std::unique_ptr<Optimizer> MakeAdam() {
  return testing::MakeOptimizer(OptimizerConfig::ADAM, 0.01f);
}

SparseTableOptions Options(Storage storage, bool disk) {
  SparseTableOptions o = testing::UniformRows(kDim, 0.5f, 9, storage);
  if (disk) o.mutable_disk();
  return o;
}

std::unique_ptr<RowStore> OpenStore(const std::string& dir) {
  RowStore::Options o;
  o.dir = dir;
  o.write_buffer_bytes = 1 << 20;
  o.block_cache_bytes = 1 << 20;
  o.filter_bytes = 64 << 10;
  absl::StatusOr<std::unique_ptr<RowStore>> store = RowStore::Open(o);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

// A table whose memory holds about `cached` rows of kDim Adam floats (116
// bytes in float32, with their index), over a store in `dir`.
std::unique_ptr<SparseTable> DiskTable(Storage storage, const Optimizer* opt,
                                       const std::string& dir, int cached,
                                       int stripes = 8) {
  const int64_t share = int64_t{cached} * 136;
  return std::make_unique<SparseTable>(Options(storage, true), opt, stripes,
                                       nullptr, share, nullptr, OpenStore(dir));
}

// Keys 1..n drawn log-uniformly (a heavy head, a long tail), distinct
// within a batch.
std::vector<uint64_t> Batch(std::mt19937_64* rng, int n, int batch) {
  std::uniform_real_distribution<double> u(0, 1);
  std::map<uint64_t, bool> seen;
  std::vector<uint64_t> keys;
  while (static_cast<int>(keys.size()) < batch) {
    const uint64_t k = static_cast<uint64_t>(std::pow(n, u(*rng)));
    if (seen.emplace(k, true).second) keys.push_back(k * 0x9E3779B97F4A7C15ULL);
  }
  return keys;
}

std::vector<float> Grads(const std::vector<uint64_t>& keys, int step) {
  std::vector<float> g(keys.size() * kDim);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = std::sin(0.37f * static_cast<float>(i) + 0.11f * step +
                    static_cast<float>(keys[i / kDim] % 97));
  }
  return g;
}

// Trains `tables` alike: async steps (Apply) then sync ones (Accumulate of
// two trainers, ApplyAccumulated).
void Train(const std::vector<SparseTable*>& tables, int first_step, int steps,
           uint64_t seed, std::vector<uint64_t>* all_keys = nullptr) {
  std::mt19937_64 rng(seed);
  const float one[] = {1.0f};
  for (int step = first_step; step < first_step + steps; ++step) {
    const std::vector<uint64_t> keys = Batch(&rng, 5000, 200);
    const std::vector<float> g = Grads(keys, step);
    if (all_keys != nullptr) {
      all_keys->insert(all_keys->end(), keys.begin(), keys.end());
    }
    std::vector<float> pulled(keys.size() * kDim);
    for (SparseTable* t : tables) {
      t->Read(keys, pulled.data());  // as a trainer pulls before it pushes
      if (step % 2 == 0) {
        t->Apply(step, keys, g, one);
      } else {
        t->Accumulate(keys, g);
        const std::vector<uint64_t> half(keys.begin(),
                                         keys.begin() + keys.size() / 2);
        t->Accumulate(half, std::vector<float>(g.begin(),
                                               g.begin() + half.size() * kDim));
        t->ApplyAccumulated(step, 2);
      }
    }
  }
}

class SparseDiskTest : public ::testing::TestWithParam<Storage> {};

TEST_P(SparseDiskTest, PullsWhileRowsMoveChangeNothing) {
  testing::ScopedTempDir tmp("sparse_disk");
  auto opt = MakeAdam();
  SparseTable memory(Options(GetParam(), false), opt.get(), 8);
  auto disk = DiskTable(GetParam(), opt.get(), tmp.Path("t"), 300);
  std::atomic<bool> done{false};
  // Pulls of new keys, kept rows and rows on disk, while pushes create,
  // spill and read back rows: what a pull reads and keeps for the push must
  // never hide a row from a later push.
  std::thread puller([&] {
    std::mt19937_64 rng(99);
    std::vector<float> out(200 * kDim);
    while (!done.load()) disk->Read(Batch(&rng, 6000, 200), out.data());
  });
  std::vector<uint64_t> keys;
  Train({&memory, disk.get()}, 1, 60, 31, &keys);
  done = true;
  puller.join();
  EXPECT_EQ(ReadAll(*disk, keys), ReadAll(memory, keys));
  EXPECT_EQ(disk->counters().created, memory.counters().created);
  EXPECT_GT(disk->counters().loaded_rows, 100);
}

TEST_P(SparseDiskTest, SmallCacheTrainsExactlyLikeUnlimitedMemory) {
  testing::ScopedTempDir tmp("sparse_disk");
  auto opt = MakeAdam();
  SparseTable memory(Options(GetParam(), false), opt.get(), 8);
  auto disk = DiskTable(GetParam(), opt.get(), tmp.Path("t"), 300);
  std::vector<uint64_t> keys;
  Train({&memory, disk.get()}, 1, 40, 7, &keys);
  EXPECT_EQ(ReadAll(*disk, keys), ReadAll(memory, keys));
  const SparseCounters c = disk->counters();
  EXPECT_TRUE(c.on_disk);
  EXPECT_GT(c.spilled_rows, 1000);
  EXPECT_GT(c.loaded_rows, 100);
  EXPECT_LE(c.rows, c.max_rows);
  EXPECT_EQ(c.refused_rows, 0);
  EXPECT_EQ(c.disk_errors, 0);
  EXPECT_EQ(c.evicted, 0);  // nothing lost
  EXPECT_EQ(c.created, memory.counters().created);
  EXPECT_GT(c.disk_rows, 0);
}

TEST_P(SparseDiskTest, CheckpointsHoldMemoryAndDiskAndMoveBetweenKinds) {
  testing::ScopedTempDir tmp("sparse_disk");
  auto opt = MakeAdam();
  SparseTable memory(Options(GetParam(), false), opt.get(), 8);
  auto disk = DiskTable(GetParam(), opt.get(), tmp.Path("a"), 300);
  std::vector<uint64_t> keys;
  Train({&memory, disk.get()}, 1, 30, 11, &keys);
  std::string from_disk, from_memory;
  EXPECT_TRUE(disk->Serialize(&from_disk).ok());
  EXPECT_TRUE(memory.Serialize(&from_memory).ok());
  // A disk table's blob loads into memory, and a memory table's onto disk.
  SparseTable loaded(Options(GetParam(), false), opt.get(), 4);
  ASSERT_TRUE(loaded.Deserialize(from_disk).ok());
  EXPECT_EQ(ReadAll(loaded, keys), ReadAll(memory, keys));
  EXPECT_EQ(loaded.counters().rows, memory.counters().rows);
  auto restored = DiskTable(GetParam(), opt.get(), tmp.Path("b"), 400, 4);
  ASSERT_TRUE(restored->Deserialize(from_memory).ok());
  EXPECT_EQ(ReadAll(*restored, keys), ReadAll(memory, keys));
  // And they go on training alike.
  Train({&memory, restored.get(), disk.get()}, 31, 10, 12, &keys);
  EXPECT_EQ(ReadAll(*restored, keys), ReadAll(memory, keys));
  EXPECT_EQ(ReadAll(*disk, keys), ReadAll(memory, keys));
  // Resharding: each new shard keeps the keys that are its own.
  auto half = DiskTable(GetParam(), opt.get(), tmp.Path("c"), 300);
  ASSERT_TRUE(
      half->Deserialize(from_disk, [](uint64_t key) { return key % 2 == 0; })
          .ok());
  std::vector<uint64_t> even, odd;
  for (uint64_t k : keys) (k % 2 == 0 ? even : odd).push_back(k);
  SparseTable at30(Options(GetParam(), false), opt.get(), 4);
  ASSERT_TRUE(at30.Deserialize(from_memory).ok());
  SparseTable none(Options(GetParam(), false), opt.get(), 4);
  EXPECT_EQ(ReadAll(*half, even), ReadAll(at30, even));
  EXPECT_EQ(ReadAll(*half, odd), ReadAll(none, odd));
  // A cut blob is refused, and leaves the table empty.
  EXPECT_EQ(
      restored->Deserialize(from_disk.substr(0, from_disk.size() / 2)).code(),
      absl::StatusCode::kDataLoss);
  SparseTable fresh(Options(GetParam(), false), opt.get(), 4);
  EXPECT_EQ(ReadAll(*restored, keys), ReadAll(fresh, keys));
  EXPECT_TRUE(SparseTableBlob::Check(*disk, from_disk).ok());
  EXPECT_EQ(SparseTableBlob::Check(*disk, from_disk.substr(0, 100)).code(),
            absl::StatusCode::kDataLoss);
}

// A SaveSink that keeps each table's blob.
class StringSink : public SaveSink {
 public:
  void Append(uint32_t, absl::string_view record) override {
    absl::MutexLock l(&mu_);
    blob_.append(record.data(), record.size());
  }
  void Fail(uint32_t, const absl::Status& why) override {
    absl::MutexLock l(&mu_);
    failed_ = why;
  }
  std::string blob() {
    absl::MutexLock l(&mu_);
    return blob_;
  }
  absl::Status failed() {
    absl::MutexLock l(&mu_);
    return failed_;
  }

 private:
  absl::Mutex mu_;
  std::string blob_ ABSL_GUARDED_BY(mu_);
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
};

TEST_P(SparseDiskTest, StreamingSavesAndDeltasArePointInTime) {
  testing::ScopedTempDir tmp("sparse_disk");
  auto opt = MakeAdam();
  SparseTable memory(Options(GetParam(), false), opt.get(), 8);
  auto disk = DiskTable(GetParam(), opt.get(), tmp.Path("a"), 300);
  disk->TrackChanges(true);
  std::vector<uint64_t> keys;
  Train({&memory, disk.get()}, 1, 20, 21, &keys);
  // A whole save marked at step 20, written while training goes on.
  StringSink whole;
  std::string at20;
  EXPECT_TRUE(memory.Serialize(&at20).ok());
  const std::string header = disk->SaveHeader();
  disk->MarkForSave(&whole, 0);
  Train({&memory, disk.get()}, 21, 10, 22, &keys);
  disk->SaveRemaining();
  ASSERT_TRUE(whole.failed().ok());
  SparseTable check(Options(GetParam(), false), opt.get(), 8);
  ASSERT_TRUE(check.Deserialize(header + whole.blob()).ok());
  SparseTable want(Options(GetParam(), false), opt.get(), 8);
  ASSERT_TRUE(want.Deserialize(at20).ok());
  EXPECT_EQ(ReadAll(check, keys), ReadAll(want, keys));
  // A delta marked at step 30 on that save gives the table at step 30.
  std::string at30;
  EXPECT_TRUE(memory.Serialize(&at30).ok());
  StringSink delta;
  const std::string delta_header = SparseDeltas::Header(*disk);
  disk->MarkForSave(&delta, 0, /*delta=*/true);
  Train({&memory, disk.get()}, 31, 5, 23, &keys);
  disk->SaveRemaining();
  ASSERT_TRUE(delta.failed().ok());
  const std::string delta_blob = delta_header + delta.blob();
  ASSERT_TRUE(SparseDeltas::Verify(check, delta_blob).ok());
  ASSERT_TRUE(SparseDeltas::Apply(&check, delta_blob).ok());
  ASSERT_TRUE(want.Deserialize(at30).ok());
  EXPECT_EQ(ReadAll(check, keys), ReadAll(want, keys));
  // Onto a disk table too.
  auto chain = DiskTable(GetParam(), opt.get(), tmp.Path("b"), 100);
  ASSERT_TRUE(chain->Deserialize(header + whole.blob()).ok());
  ASSERT_TRUE(SparseDeltas::Apply(chain.get(), delta_blob).ok());
  EXPECT_EQ(ReadAll(*chain, keys), ReadAll(want, keys));
}

// What a pull found on disk is kept for the push; a delta applied in
// between (rows restored, rows removed) voids it, so the pushes after
// train what the delta left, exactly as a memory table does.
TEST_P(SparseDiskTest, ADeltaAfterAPullVoidsWhatThePullFound) {
  testing::ScopedTempDir tmp("sparse_disk");
  auto opt = MakeAdam();
  // The source evicts (its delta then removes keys).
  SparseTableOptions small = Options(GetParam(), false);
  small.mutable_eviction()->set_policy(EvictionOptions::LFU);
  SparseTable source(small, opt.get(), 8, nullptr, int64_t{400} * 136);
  source.TrackChanges(true);
  std::vector<uint64_t> keys;
  Train({&source}, 1, 10, 41, &keys);
  const std::string header = source.SaveHeader();
  StringSink whole;
  source.MarkForSave(&whole, 0);
  source.SaveRemaining();
  Train({&source}, 11, 10, 42, &keys);
  const std::string delta_header = SparseDeltas::Header(source);
  StringSink delta;
  source.MarkForSave(&delta, 0, /*delta=*/true);
  source.SaveRemaining();
  ASSERT_TRUE(whole.failed().ok() && delta.failed().ok());
  const std::string delta_blob = delta_header + delta.blob();
  ASSERT_GT(source.counters().evicted, 0);  // so the delta removes rows
  SparseTable memory(Options(GetParam(), false), opt.get(), 8);
  auto disk = DiskTable(GetParam(), opt.get(), tmp.Path("d"), 400);
  for (SparseTable* t : {&memory, disk.get()}) {
    ASSERT_TRUE(t->Deserialize(header + whole.blob()).ok());
  }
  ReadAll(*disk, keys);  // pulls: rows on disk found, and keys nowhere
  for (SparseTable* t : {&memory, disk.get()}) {
    ASSERT_TRUE(SparseDeltas::Apply(t, delta_blob).ok());
  }
  EXPECT_EQ(ReadAll(*disk, keys), ReadAll(memory, keys));
  Train({&memory, disk.get()}, 21, 6, 43, &keys);
  EXPECT_EQ(ReadAll(*disk, keys), ReadAll(memory, keys));
  EXPECT_GT(disk->counters().loaded_rows, 0);
}

// A row damaged on disk (cut short, or another key's) reads as the initial
// row and counts as a disk error; the push after the pull reads it again
// and drops its update, counted too, rather than laying a fresh row over
// what the disk holds.
TEST_P(SparseDiskTest, ADamagedRowOnDiskIsNeverReplacedByAFreshOne) {
  testing::ScopedTempDir tmp("sparse_disk");
  auto opt = MakeAdam();
  std::unique_ptr<RowStore> store = OpenStore(tmp.Path("d"));
  ASSERT_NE(store, nullptr);
  RowStore* raw = store.get();
  SparseTable disk(Options(GetParam(), true), opt.get(), 8, nullptr,
                   int64_t{300} * 136, nullptr, std::move(store));
  SparseTable memory(Options(GetParam(), false), opt.get(), 8);
  // Rows pushed out to disk; one of them lends its bytes to key 12.
  std::vector<uint64_t> trained;
  const float one[] = {1.0f};
  for (int step = 1; step <= 20; ++step) {
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 100; ++k) keys.push_back(step * 1000 + k);
    disk.Apply(step, keys, Grads(keys, step), one);
    trained.insert(trained.end(), keys.begin(), keys.end());
  }
  std::vector<std::string> rows;
  std::vector<bool> found;
  ASSERT_TRUE(raw->MultiGet(trained, &rows, &found).ok());
  const auto on_disk = std::find(found.begin(), found.end(), true);
  ASSERT_NE(on_disk, found.end());
  const std::vector<uint64_t> damaged = {11, 12};
  RowStore::Batch batch;
  batch.Put(11, "short");
  batch.Put(12, rows[on_disk - found.begin()]);  // whole, but another key's
  ASSERT_TRUE(raw->Write(batch).ok());
  const SparseCounters before = disk.counters();
  std::vector<float> pulled(damaged.size() * kDim);
  disk.Read(damaged, pulled.data());
  EXPECT_EQ(pulled, ReadAll(memory, damaged));
  EXPECT_EQ(disk.counters().disk_errors, before.disk_errors + 2);
  disk.Apply(21, damaged, Grads(damaged, 21), one);
  const SparseCounters after = disk.counters();
  EXPECT_EQ(after.created, before.created);
  EXPECT_EQ(after.disk_errors, before.disk_errors + 4);
  EXPECT_EQ(ReadAll(disk, damaged), ReadAll(memory, damaged));
  // A checkpoint of it fails as it is taken, not when it is loaded.
  std::string blob;
  EXPECT_EQ(disk.Serialize(&blob).code(), absl::StatusCode::kDataLoss);
}

INSTANTIATE_TEST_SUITE_P(Storages, SparseDiskTest,
                         ::testing::Values(SparseTableOptions::FLOAT32,
                                           SparseTableOptions::BF16));

TEST(SparseDiskFullTest, RefusesNewRowsAndKeepsEveryAcceptedUpdate) {
  testing::ScopedTempDir tmp("sparse_disk");
  testing::SmallDisk small(tmp.Path("disk"), 2 << 20);
  ASSERT_TRUE(small.mounted());
  auto opt = MakeAdam();
  auto disk = DiskTable(SparseTableOptions::FLOAT32, opt.get(),
                        tmp.Path("disk/t"), 2000);
  SparseTable memory(Options(SparseTableOptions::FLOAT32, false), opt.get(), 8);
  const float one[] = {1.0f};
  // Early rows, trained on both, then pushed out to disk by new ones.
  std::vector<uint64_t> early;
  for (uint64_t k = 1; k <= 1000; ++k) early.push_back(k);
  disk->Apply(1, early, Grads(early, 1), one);
  memory.Apply(1, early, Grads(early, 1), one);
  // New rows until the disk is full: each batch of 2,000 spills about as
  // many rows of 116 bytes.
  int64_t step = 2;
  for (; step < 400 && disk->counters().disk_errors == 0; ++step) {
    std::vector<uint64_t> fresh;
    for (uint64_t k = 0; k < 2000; ++k) fresh.push_back(step * 100000 + k);
    disk->Apply(step, fresh, Grads(fresh, step), one);
  }
  const SparseCounters c = disk->counters();
  ASSERT_GT(c.disk_errors, 0) << "the disk never filled";
  EXPECT_GT(c.refused_rows, 0);
  EXPECT_LE(c.rows, c.max_rows);
  // The early rows (on disk, or in memory) read as they were trained.
  EXPECT_EQ(ReadAll(*disk, early), ReadAll(memory, early));
  // Updates go on for rows in memory; new rows wait for room.
  const int64_t refused = c.refused_rows;
  std::vector<uint64_t> more;
  for (uint64_t k = 0; k < 500; ++k) more.push_back(999000000 + k);
  disk->Apply(step, more, Grads(more, step), one);
  EXPECT_GT(disk->counters().refused_rows, refused);
  // A checkpoint of what it holds still loads.
  std::string blob;
  ASSERT_TRUE(disk->Serialize(&blob).ok());
  SparseTable copy(Options(SparseTableOptions::FLOAT32, false), opt.get(), 8);
  ASSERT_TRUE(copy.Deserialize(blob).ok());
  EXPECT_EQ(ReadAll(copy, early), ReadAll(memory, early));
}

TEST(DiskTierPlanTest, SplitsTheCacheAndNamesBadOptions) {
  TableSpec spec;
  spec.set_name("e");
  spec.set_kind(TableSpec::SPARSE);
  spec.mutable_sparse()->set_dim(16);
  spec.mutable_sparse()->mutable_disk()->set_cache_mb(64);
  absl::StatusOr<DiskTierPlan> plan = PlanDiskTier(spec, 0, "/x");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->cache_bytes, 64 << 20);
  EXPECT_EQ(plan->store.write_buffer_bytes, 4 << 20);
  EXPECT_EQ(plan->store.block_cache_bytes, 1 << 20);
  EXPECT_EQ(plan->store.filter_bytes, 4 << 20);
  // RocksDB's memtables, which take only a Clear, are 128 KiB.
  EXPECT_EQ(plan->row_share, (51 << 20) - RowStore::kMemtableBytes);
  // The share of --max_memory_mb caps cache_mb.
  plan = PlanDiskTier(spec, 32 << 20, "/x");
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->cache_bytes, 32 << 20);
  // Without either: 256 MiB, of which the buffers, RocksDB and the filter
  // take 13/64 (and the memtables' 128 KiB).
  spec.mutable_sparse()->mutable_disk()->set_cache_mb(0);
  plan = PlanDiskTier(spec, 0, "/x");
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->cache_bytes, 256 << 20);
  EXPECT_EQ(plan->row_share, (204 << 20) - RowStore::kMemtableBytes);
  // Too small a cache says how much to give.
  spec.mutable_sparse()->mutable_disk()->set_cache_mb(2);
  plan = PlanDiskTier(spec, 0, "/x");
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("at least 4 MiB"), std::string::npos)
      << plan.status();
  spec.mutable_sparse()->mutable_disk()->set_cache_mb(4);
  EXPECT_TRUE(PlanDiskTier(spec, 0, "/x").ok());

  EXPECT_TRUE(ValidateDiskTier(spec).ok());
  TableSpec ttl = spec;
  ttl.mutable_sparse()->mutable_eviction()->set_policy(EvictionOptions::TTL);
  EXPECT_NE(ValidateDiskTier(ttl).message().find("LFU or LRU, not TTL"),
            std::string::npos)
      << ValidateDiskTier(ttl);
  TableSpec steps = spec;
  steps.mutable_sparse()->set_evict_after_steps(10);
  EXPECT_EQ(ValidateDiskTier(steps).code(), absl::StatusCode::kInvalidArgument);
  TableSpec refuse = spec;
  refuse.mutable_sparse()->mutable_eviction()->set_refuse_when_full(true);
  EXPECT_NE(ValidateDiskTier(refuse).message().find("refuse_when_full"),
            std::string::npos);
  TableSpec huge = spec;
  huge.mutable_sparse()->mutable_disk()->set_cache_mb(-1);
  EXPECT_NE(ValidateDiskTier(huge).message().find("disk.cache_mb -1"),
            std::string::npos);
}

}  // namespace
}  // namespace shardps
