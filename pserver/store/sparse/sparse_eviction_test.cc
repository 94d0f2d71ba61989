// SparseTable under its memory share: eviction by policy instead of
// refusal, bounded admission, expiry, and a backup's copy of its primary's
// evictions.
#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "pserver/store/sparse/sparse_table.h"

namespace shardps {
namespace {

std::unique_ptr<Optimizer> Sgd() {
  OptimizerConfig c;
  c.set_type(OptimizerConfig::SGD);
  c.set_learning_rate(0.1f);
  return std::move(*Optimizer::Create(c, 1));
}

SparseTableOptions Options(const std::string& extra = "") {
  SparseTableOptions o;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "dim: 1 init { type: UNIFORM scale: 0.5 seed: 3 } " + extra, &o));
  return o;
}

// One stripe of SGD rows of dim 1: a row is 24 bytes (a 20-byte head and
// its float) and ten rows' index is 16 entries of 8 bytes, so a share of
// 368 bytes holds 10 rows.
constexpr int64_t kTenRows = 10 * 24 + 16 * 8;

void Push(SparseTable& t, int64_t step, std::vector<uint64_t> keys,
          std::vector<uint64_t>* evicted = nullptr) {
  std::vector<float> g(keys.size(), 1.0f);
  const float one[] = {1.0f};
  t.Apply(step, keys, g, one, evicted);
}

std::set<uint64_t> Keys(const SparseTable& t, uint64_t below = 1000) {
  std::set<uint64_t> held;
  for (uint64_t k = 0; k < below; ++k) {
    std::vector<float> row(1), init(1);
    const uint64_t key[] = {k};
    t.Read(key, row.data());
    t.InitialRow(k, init.data());
    if (row != init) held.insert(k);
  }
  return held;
}

TEST(SparseEvictionTest, AFullTableEvictsTheLeastRecentlyUpdatedNotNewRows) {
  auto opt = Sgd();
  SparseTable t(Options(), opt.get(), 1, nullptr, kTenRows);
  EXPECT_EQ(t.counters().max_rows, 10);
  for (uint64_t k = 1; k <= 10; ++k) Push(t, static_cast<int64_t>(k), {k});
  std::vector<uint64_t> evicted;
  Push(t, 11, {11}, &evicted);
  // Down to a sixteenth below the limit (9 rows, at least one less): the
  // two oldest go, and the new row is there.
  EXPECT_EQ(evicted, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Keys(t), (std::set<uint64_t>{3, 4, 5, 6, 7, 8, 9, 10, 11}));
  const SparseCounters c = t.counters();
  EXPECT_EQ(c.rows, 9);
  EXPECT_EQ(c.evicted_full, 2);
  EXPECT_EQ(c.evicted, 2);
  EXPECT_EQ(c.refused_rows, 0);
}

TEST(SparseEvictionTest, LfuEvictsTheFewestUpdatesTiesByKey) {
  auto opt = Sgd();
  SparseTable t(Options("eviction { policy: LFU }"), opt.get(), 1, nullptr,
                kTenRows);
  for (uint64_t k = 1; k <= 10; ++k) Push(t, 1, {k});
  // Keys 1..8 get a second update; 9 and 10 stay at one.
  Push(t, 2, {1, 2, 3, 4, 5, 6, 7, 8});
  std::vector<uint64_t> evicted;
  Push(t, 3, {20}, &evicted);
  EXPECT_EQ(evicted, (std::vector<uint64_t>{9, 10}));
  // With decay, an old busy row goes before a fresh one.
  SparseTable d(Options("eviction { policy: LFU lfu_half_life_steps: 1 }"),
                opt.get(), 1, nullptr, kTenRows);
  for (int i = 0; i < 5; ++i) Push(d, 1, {1});  // 5 updates at step 1
  for (uint64_t k = 2; k <= 10; ++k) Push(d, 20, {k});
  evicted.clear();
  Push(d, 21, {30}, &evicted);
  EXPECT_EQ(evicted.front(), 1u);  // 5 / 2^20 < 1 / 2
}

TEST(SparseEvictionTest, TheOrderOfABatchDoesNotChangeWhatIsEvicted) {
  auto opt = Sgd();
  std::vector<uint64_t> keys(300);
  std::iota(keys.begin(), keys.end(), 1);
  auto run = [&](uint32_t seed) {
    SparseTable t(Options("eviction { policy: LFU }"), opt.get(), 4, nullptr,
                  400);  // 25 rows a stripe
    std::mt19937 pick(99), order(seed);
    for (int64_t step = 1; step <= 20; ++step) {
      // The same keys at every run, pushed in another order.
      std::vector<uint64_t> batch(keys.begin(), keys.begin() + 40 + step * 5);
      std::shuffle(batch.begin(), batch.end(), pick);
      batch.resize(60);
      std::shuffle(batch.begin(), batch.end(), order);
      Push(t, step, batch);
    }
    return std::make_pair(Keys(t, 400), t.counters().evicted_full);
  };
  const auto a = run(1), b = run(2);
  EXPECT_GT(a.second, 0);
  EXPECT_EQ(a, b);
}

TEST(SparseEvictionTest, RowsOfTheStepAreKeptAndOnlyThenRowsAreRefused) {
  auto opt = Sgd();
  SparseTable t(Options(), opt.get(), 1, nullptr, kTenRows);
  std::vector<uint64_t> first(10);
  std::iota(first.begin(), first.end(), 1);
  Push(t, 1, first);
  // 10 rows updated at step 2 and two new ones: nothing may go.
  std::vector<uint64_t> second = first;
  second.push_back(50);
  second.push_back(51);
  Push(t, 2, second);
  EXPECT_EQ(t.counters().refused_rows, 2);
  EXPECT_EQ(t.counters().rows, 10);
  EXPECT_EQ(t.counters().evicted_full, 0);
}

TEST(SparseEvictionTest, RefuseWhenFullKeepsTheOldBehaviour) {
  auto opt = Sgd();
  SparseTable t(Options("eviction { refuse_when_full: true }"), opt.get(), 1,
                nullptr, kTenRows);
  for (uint64_t k = 1; k <= 12; ++k) Push(t, static_cast<int64_t>(k), {k});
  EXPECT_EQ(t.counters().rows, 10);
  EXPECT_EQ(t.counters().refused_rows, 2);
  EXPECT_EQ(t.counters().evicted, 0);
}

TEST(SparseEvictionTest, ABudgetWithoutRoomEvictsInTheStripeInstead) {
  auto opt = Sgd();
  // No share, but a budget of 16 KiB: a chunk of 256 rows (6 KiB) and
  // their index (4 KiB) fit under its limit less the headroom (14 KiB), a
  // second chunk does not.
  MemoryBudget budget(16 << 10);
  SparseTable t(Options(), opt.get(), 1, &budget);
  for (uint64_t k = 1; k <= 3000; ++k) Push(t, static_cast<int64_t>(k), {k});
  const SparseCounters c = t.counters();
  EXPECT_EQ(c.refused_rows, 0);
  EXPECT_GT(c.evicted_full, 0);
  EXPECT_EQ(c.rows + c.evicted_full, 3000);
  EXPECT_EQ(Keys(t, 3001).count(3000), 1u);  // the newest is there
}

TEST(SparseEvictionTest, AdmissionCountersStayBoundedUnderUniqueKeys) {
  auto opt = Sgd();
  SparseTable t(Options("admit_after: 2 admission_max_keys: 64"), opt.get(), 1);
  const size_t empty = t.MemoryBytes();
  for (uint64_t k = 1; k <= 100000; ++k) Push(t, 1, {k});
  const size_t full = t.MemoryBytes();
  EXPECT_LE(full - empty, 64 * SightingTable::kEntryBytes + 64);
  EXPECT_LE(t.counters().pending_keys, 64);
  EXPECT_EQ(t.counters().rows, 0);
  EXPECT_EQ(t.counters().dropped_updates, 100000);
  // A key seen twice in a row is admitted.
  Push(t, 2, {500000});
  Push(t, 3, {500000});
  EXPECT_EQ(t.counters().rows, 1);
  for (uint64_t k = 1; k <= 100000; ++k) Push(t, 4, {k + 1000000});
  EXPECT_EQ(t.MemoryBytes(), full + (t.MemoryBytes() - full));
  EXPECT_LE(t.counters().pending_keys, 64);
}

TEST(SparseEvictionTest, ABackupThatDropsThePrimarysEvictionsMatchesIt) {
  auto opt = Sgd();
  const SparseTableOptions o = Options("eviction { policy: LFU }");
  // 100 rows and their index of 256 entries: never full in a step of 40
  // keys, so the primary evicts and never refuses.
  SparseTable primary(o, opt.get(), 4, nullptr, 100 * 24 + 256 * 8);
  // The backup's own share is smaller (50 rows): it must not evict on its
  // own.
  SparseTable backup(o, opt.get(), 4, nullptr, 50 * 24 + 128 * 8);
  std::mt19937 rng(7);
  for (int64_t step = 1; step <= 30; ++step) {
    std::vector<uint64_t> keys;
    for (int i = 0; i < 40; ++i) keys.push_back(rng() % 500);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::vector<float> g(keys.size(), 0.5f);
    const float one[] = {1.0f};
    std::vector<uint64_t> evicted;
    primary.Apply(step, keys, g, one, &evicted);
    backup.DropRows(evicted, /*full=*/true);
    backup.Apply(step, keys, g, one, nullptr, /*evict_when_full=*/false);
  }
  EXPECT_GT(primary.counters().evicted_full, 0);
  std::string a, b;
  EXPECT_TRUE(primary.Serialize(&a).ok());
  EXPECT_TRUE(backup.Serialize(&b).ok());
  EXPECT_EQ(Keys(primary, 500), Keys(backup, 500));
  EXPECT_EQ(a.size(), b.size());
  EXPECT_EQ(backup.counters().evicted_full, primary.counters().evicted_full);
}

TEST(SparseEvictionTest, WallClockTtlAndNormExpire) {
  auto opt = Sgd();
  FakeClock clock;
  SparseTable t(Options("eviction { ttl_seconds: 60 }"), opt.get(), 1, nullptr,
                0, &clock);
  Push(t, 1, {1});
  clock.Advance(absl::Seconds(50));
  Push(t, 2, {2});
  clock.Advance(absl::Seconds(20));  // key 1: 70 s, key 2: 20 s
  std::vector<uint64_t> expired;
  EXPECT_EQ(t.Expire(3, &expired), 1);
  EXPECT_EQ(expired, std::vector<uint64_t>{1});
  EXPECT_EQ(t.counters().expired, 1);

  // Norm: rows whose |value| is below 10 go (all of them, from U(-0.5,
  // 0.5) and one SGD step of 0.1).
  SparseTable n(Options("eviction { min_l2_norm: 10 }"), opt.get(), 1);
  Push(n, 1, {1, 2, 3});
  EXPECT_EQ(n.Expire(2), 3);
  EXPECT_EQ(n.counters().rows, 0);
}

TEST(SparseEvictionTest, RowwiseStateIsOneFloatARowAndSurvivesACheckpoint) {
  OptimizerConfig oc;
  oc.set_type(OptimizerConfig::ROWWISE_ADAGRAD);
  oc.set_learning_rate(0.1f);
  auto rowwise = std::move(*Optimizer::Create(oc, 1));
  oc.set_type(OptimizerConfig::ADAGRAD);
  auto plain = std::move(*Optimizer::Create(oc, 1));
  SparseTableOptions o = Options();
  o.set_dim(16);
  SparseTable lean(o, rowwise.get(), 4), full(o, plain.get(), 4);
  std::vector<uint64_t> keys(4096);
  std::iota(keys.begin(), keys.end(), 1);
  std::vector<float> g(keys.size() * 16, 0.25f);
  const float one[] = {1.0f};
  lean.Apply(1, keys, g, one);
  full.Apply(1, keys, g, one);
  // 16 values and 1 accumulator against 16 and 16, in the checkpoint too.
  std::string lean_blob, full_blob;
  EXPECT_TRUE(lean.Serialize(&lean_blob).ok());
  EXPECT_TRUE(full.Serialize(&full_blob).ok());
  EXPECT_EQ(full_blob.size() - lean_blob.size(), keys.size() * 15 * 4);
  EXPECT_LT(lean.MemoryBytes(), full.MemoryBytes());
  SparseTable back(o, rowwise.get(), 4);
  ASSERT_TRUE(back.Deserialize(lean_blob).ok());
  std::string again;
  EXPECT_TRUE(back.Serialize(&again).ok());
  EXPECT_EQ(again.size(), lean_blob.size());
  // An Adagrad checkpoint does not load into a row-wise table.
  EXPECT_EQ(back.Deserialize(full_blob).code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace shardps
