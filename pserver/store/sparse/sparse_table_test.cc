#include "pserver/store/sparse/sparse_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "pserver/store/sparse/sparse_shard.h"
#include "pserver/store/sparse/sparse_testing.h"

namespace shardps {
namespace {

using testing::MakeOptimizer;
using testing::ReadAll;
using testing::UniformRows;

SparseTableOptions Options(int dim, float scale = 0.5f, uint64_t seed = 9) {
  return UniformRows(dim, scale, seed);
}

std::vector<float> Row(const SparseTable& t, uint64_t key) {
  std::vector<float> out(t.dim());
  const uint64_t keys[] = {key};
  t.Read(keys, out.data());
  return out;
}

TEST(SparseTableTest, InitialRowsDependOnlyOnSeedAndKey) {
  auto opt = MakeOptimizer(OptimizerConfig::SGD, 1.0f);
  // Different stripe counts stand for different pservers.
  SparseTable a(Options(8), opt.get(), 64), b(Options(8), opt.get(), 3);
  SparseTable other_seed(Options(8, 0.5f, 10), opt.get());
  for (uint64_t key : {0ULL, 1ULL, 123456789ULL, ~0ULL}) {
    const auto ra = Row(a, key);
    EXPECT_EQ(ra, Row(b, key));
    EXPECT_NE(ra, Row(other_seed, key));
    for (float v : ra) {
      EXPECT_GE(v, -0.5f);
      EXPECT_LT(v, 0.5f);
    }
  }
  EXPECT_NE(Row(a, 1), Row(a, 2));
  EXPECT_EQ(a.counters().rows, 0);  // reading creates nothing
}

TEST(SparseTableTest, SgdUpdatesOnlyTouchedRows) {
  auto opt = MakeOptimizer(OptimizerConfig::SGD, 0.1f);
  SparseTable t(Options(2), opt.get());
  const auto before5 = Row(t, 5), before6 = Row(t, 6);
  const uint64_t keys[] = {5};
  const float grads[] = {1.0f, -2.0f};
  const float scale[] = {0.5f};
  t.Apply(0, keys, grads, scale);
  const auto after5 = Row(t, 5);
  EXPECT_FLOAT_EQ(after5[0], before5[0] - 0.05f);
  EXPECT_FLOAT_EQ(after5[1], before5[1] + 0.1f);
  EXPECT_EQ(Row(t, 6), before6);
  EXPECT_EQ(t.counters().rows, 1);
  EXPECT_EQ(t.counters().created, 1);
}

TEST(SparseTableTest, ARowUpdateThatWouldOverflowIsNotApplied) {
  auto opt = MakeOptimizer(OptimizerConfig::ADAGRAD, 0.1f);
  SparseTable t(Options(2), opt.get());
  const uint64_t keys[] = {5, 6};
  const float ok[] = {1.0f, 1.0f, 1.0f, 1.0f}, one[] = {1.0f, 1.0f};
  t.Apply(0, keys, ok, one);
  const auto before5 = Row(t, 5), before6 = Row(t, 6);
  // Row 5's gradient squared overflows Adagrad's accumulator: its whole
  // update is refused, row 6's applies.
  const float huge[] = {1e20f, 1.0f, 1.0f, 1.0f};
  t.Apply(1, keys, huge, one);
  EXPECT_EQ(Row(t, 5), before5);
  EXPECT_NE(Row(t, 6), before6);
  EXPECT_EQ(t.counters().non_finite_updates, 1);
}

TEST(SparseTableTest, AdamIsLazyWithPerRowStepCounts) {
  auto opt = MakeOptimizer(OptimizerConfig::ADAM, 0.01f);
  SparseTable t(Options(1, 0.0f), opt.get());  // scale 0: rows start at 0
  const uint64_t a[] = {1}, b[] = {2};
  const float g[] = {3.0f}, one[] = {1.0f};
  t.Apply(0, a, g, one);
  t.Apply(1, a, g, one);
  t.Apply(2, b, g, one);  // row 2's first update, at global step 2
  // A constant gradient moves a row by lr per update with bias correction,
  // whatever the global step: row 1 twice, row 2 once.
  EXPECT_NEAR(Row(t, 1)[0], -0.02f, 1e-5);
  EXPECT_NEAR(Row(t, 2)[0], -0.01f, 1e-5);
}

TEST(SparseTableTest, FtrlRowsFollowTheClosedForm) {
  OptimizerConfig c;
  c.set_type(OptimizerConfig::FTRL);
  c.set_learning_rate(0.5f);
  c.set_l1(0.1f);
  c.set_l2(0.2f);
  auto opt = std::move(*Optimizer::Create(c, 1));
  SparseTableOptions o;
  o.set_dim(1);
  SparseTable t(o, opt.get());
  const uint64_t k[] = {77};
  const float g[] = {2.0f}, one[] = {1.0f};
  t.Apply(0, k, g, one);
  EXPECT_FLOAT_EQ(Row(t, 77)[0], -1.9f / 6.2f);
}

TEST(SparseTableTest, AdmissionDropsGradientsUntilTheKthSighting) {
  auto opt = MakeOptimizer(OptimizerConfig::SGD, 1.0f);
  SparseTableOptions o = Options(1);
  o.set_admit_after(3);
  SparseTable t(o, opt.get());
  const auto init = Row(t, 42);
  const uint64_t k[] = {42};
  const float g[] = {1.0f}, one[] = {1.0f};
  t.Apply(0, k, g, one);
  t.Apply(1, k, g, one);
  EXPECT_EQ(Row(t, 42), init);
  EXPECT_EQ(t.counters().rows, 0);
  EXPECT_EQ(t.counters().pending_keys, 1);
  EXPECT_EQ(t.counters().dropped_updates, 2);
  t.Apply(2, k, g, one);  // admitted, and this update applies
  EXPECT_FLOAT_EQ(Row(t, 42)[0], init[0] - 1.0f);
  EXPECT_EQ(t.counters().rows, 1);
  EXPECT_EQ(t.counters().pending_keys, 0);
}

TEST(SparseTableTest, EvictionRemovesRowsNotUpdatedForTSteps) {
  auto opt = MakeOptimizer(OptimizerConfig::SGD, 1.0f);
  SparseTableOptions o = Options(1);
  o.set_evict_after_steps(10);
  SparseTable t(o, opt.get());
  const uint64_t old_key[] = {1}, new_key[] = {2};
  const float g[] = {1.0f}, one[] = {1.0f};
  const auto init1 = Row(t, 1);
  t.Apply(0, old_key, g, one);
  t.Apply(8, new_key, g, one);
  EXPECT_EQ(t.Expire(10), 0);  // step 0 is 10 steps back: kept
  EXPECT_EQ(t.Expire(11), 1);
  EXPECT_EQ(Row(t, 1), init1);  // gone: reads as new again
  EXPECT_EQ(t.counters().rows, 1);
  EXPECT_EQ(t.counters().evicted, 1);
  // The freed slot is reused.
  const size_t bytes = t.MemoryBytes();
  t.Apply(12, old_key, g, one);
  EXPECT_EQ(t.MemoryBytes(), bytes);
}

TEST(SparseTableTest, MemoryIsProportionalToRowsNotKeySpace) {
  auto opt = MakeOptimizer(OptimizerConfig::ADAGRAD, 0.1f);
  SparseTable t(Options(16), opt.get());
  std::mt19937_64 rng(5);
  std::vector<float> grads(16, 0.25f);
  const float one[] = {1.0f};
  auto insert = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const uint64_t key[] = {rng() &
                              ((uint64_t{1} << 40) - 1)};  // ids in 2^40
      t.Apply(0, key, grads, one);
    }
  };
  insert(100000);
  const double per_row_100k =
      static_cast<double>(t.MemoryBytes()) / t.counters().rows;
  insert(100000);
  const double per_row_200k =
      static_cast<double>(t.MemoryBytes()) / t.counters().rows;
  // Values and one Adagrad slot: 128 bytes of floats per row; the index and
  // bookkeeping add tens of bytes, not a function of the key space.
  EXPECT_GE(per_row_100k, 128);
  EXPECT_LT(per_row_100k, 128 + 120);
  EXPECT_LT(per_row_200k, 128 + 120);
  EXPECT_EQ(t.counters().rows, 200000);  // no collisions expected in 2^40
}

TEST(SparseTableTest, SyncMeanIsPerKeyOverTheTrainersThatPushedIt) {
  auto opt = MakeOptimizer(OptimizerConfig::SGD, 1.0f);
  SparseTable t(Options(1, 0.0f), opt.get());
  // Trainer 0 pushes keys 1 and 2; trainer 1 pushes key 1 only.
  const uint64_t k01[] = {1, 2}, k1[] = {1};
  const float g0[] = {2.0f, 6.0f}, g1[] = {4.0f};
  t.Accumulate(k01, g0);
  t.Accumulate(k1, g1);
  EXPECT_EQ(Row(t, 1)[0], 0.0f);  // nothing applied before the step ends
  EXPECT_EQ(t.ApplyAccumulated(0, 2), 2);
  EXPECT_FLOAT_EQ(Row(t, 1)[0], -3.0f);    // mean of 2 and 4
  EXPECT_FLOAT_EQ(Row(t, 2)[0], -6.0f);    // only trainer 0 pushed it
  EXPECT_EQ(t.ApplyAccumulated(1, 2), 0);  // cleared
}

// gradient_mean STEP_TRAINERS: every key's sum is divided by the trainers
// of the step (here 2), as one trainer with both batches would; what
// `applied` records (for backups) says the same.
TEST(SparseTableTest, SyncMeanOverTheStepsTrainers) {
  auto opt = MakeOptimizer(OptimizerConfig::SGD, 1.0f);
  SparseTableOptions o = Options(1, 0.0f);
  o.set_gradient_mean(SparseTableOptions::STEP_TRAINERS);
  SparseTable t(o, opt.get());
  const uint64_t k01[] = {1, 2}, k1[] = {1};
  const float g0[] = {2.0f, 6.0f}, g1[] = {4.0f};
  t.Accumulate(k01, g0);
  t.Accumulate(k1, g1);
  AppliedUpdate applied;
  EXPECT_EQ(t.ApplyAccumulated(0, 2, &applied), 2);
  EXPECT_FLOAT_EQ(Row(t, 1)[0], -3.0f);  // (2 + 4) / 2
  EXPECT_FLOAT_EQ(Row(t, 2)[0], -3.0f);  // 6 / 2: trainer 1 had none
  ASSERT_EQ(applied.scales.size(), 2u);
  EXPECT_EQ(applied.scales[0], 0.5f);
  EXPECT_EQ(applied.scales[1], 0.5f);
  // Three trainers, one of them with no key at all.
  t.Accumulate(k1, g1);
  EXPECT_EQ(t.ApplyAccumulated(1, 3), 1);
  EXPECT_FLOAT_EQ(Row(t, 1)[0], -3.0f - 4.0f / 3.0f);
}

TEST(SparseTableTest, ConcurrentUpdatesAreAllApplied) {
  auto opt = MakeOptimizer(OptimizerConfig::SGD, 1.0f);
  SparseTable t(Options(4, 0.0f), opt.get(), 8);
  constexpr int kThreads = 4, kRounds = 500, kKeys = 64;
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&t] {
      std::vector<uint64_t> keys(kKeys);
      for (int k = 0; k < kKeys; ++k) keys[k] = k * 1000003ULL;
      std::vector<float> grads(kKeys * 4, 1.0f);
      const float one[] = {1.0f};
      for (int r = 0; r < kRounds; ++r) t.Apply(r, keys, grads, one);
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(Row(t, k * 1000003ULL),
              std::vector<float>(4, -1.0f * kThreads * kRounds));
  }
}

// The batched paths (keys grouped by stripe, looked up ahead) must give
// what one key at a time gives, with existing, new and not yet admitted
// keys mixed, per-key scales, and more keys per stripe than one lookup
// batch holds.
TEST(SparseTableTest, BatchesEqualOneKeyAtATime) {
  auto opt = MakeOptimizer(OptimizerConfig::ADAGRAD, 0.1f);
  SparseTableOptions o = Options(3);
  o.set_admit_after(2);
  SparseTable batched(o, opt.get(), 4), single(o, opt.get(), 4);
  std::mt19937_64 rng(5);
  for (int step = 0; step < 4; ++step) {
    // 3000 distinct keys from 4000: about 750 per stripe, some seen before.
    std::vector<uint64_t> keys(4000);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 7919 + 1;
    std::shuffle(keys.begin(), keys.end(), rng);
    keys.resize(3000);
    std::vector<float> grads(keys.size() * 3), scales(keys.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      grads[i] = static_cast<float>(rng() % 1000) * 1e-3f - 0.5f;
    }
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = 1.0f / (1 + i % 3);
    batched.Apply(step, keys, grads, scales);
    for (size_t i = 0; i < keys.size(); ++i) {
      single.Apply(step, absl::MakeConstSpan(&keys[i], 1),
                   absl::MakeConstSpan(&grads[i * 3], 3),
                   absl::MakeConstSpan(&scales[i], 1));
    }
    // Sync: two trainers' sums, applied at the step's end.
    batched.Accumulate(keys, grads);
    batched.Accumulate(absl::MakeConstSpan(keys).subspan(0, 1000),
                       absl::MakeConstSpan(grads).subspan(0, 3000));
    for (size_t i = 0; i < keys.size(); ++i) {
      single.Accumulate(absl::MakeConstSpan(&keys[i], 1),
                        absl::MakeConstSpan(&grads[i * 3], 3));
    }
    for (size_t i = 0; i < 1000; ++i) {
      single.Accumulate(absl::MakeConstSpan(&keys[i], 1),
                        absl::MakeConstSpan(&grads[i * 3], 3));
    }
    EXPECT_EQ(batched.ApplyAccumulated(step, 2),
              single.ApplyAccumulated(step, 2));
  }
  std::vector<uint64_t> all(5000);  // 1000 never pushed: initial values
  for (size_t i = 0; i < all.size(); ++i) all[i] = i * 7919 + 1;
  std::vector<float> a(all.size() * 3), b(all.size() * 3);
  batched.Read(all, a.data());
  for (size_t i = 0; i < all.size(); ++i) {
    single.Read(absl::MakeConstSpan(&all[i], 1), &b[i * 3]);
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(batched.counters().rows, single.counters().rows);
  EXPECT_EQ(batched.counters().dropped_updates,
            single.counters().dropped_updates);
  EXPECT_GT(batched.counters().dropped_updates, 0);
}

// --- Serialize and Deserialize (checkpoints) ---

SparseTableOptions SparseOptions(int dim, int64_t admit_after) {
  SparseTableOptions o = Options(dim, 0.5f, 11);
  o.set_admit_after(admit_after);
  return o;
}

void ApplyKeys(SparseTable* t, int64_t step,
               const std::vector<uint64_t>& keys) {
  std::vector<float> g(keys.size() * t->dim());
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = 0.001f * static_cast<float>(i % 97) - 0.03f + 0.01f * step;
  }
  const float one[] = {1.0f};
  t->Apply(step, keys, g, one);
}

TEST(SparseTableCheckpointTest, RoundTripWithManyKeysAndSightings) {
  auto opt = MakeOptimizer(OptimizerConfig::ADAM, 0.1f);
  const SparseTableOptions options = SparseOptions(3, /*admit_after=*/2);
  SparseTable a(options, opt.get());
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 3000; ++i) keys.push_back(i * 0x9e3779b97f4a7c15ULL);
  const std::vector<uint64_t> first2000(keys.begin(), keys.begin() + 2000);
  const std::vector<uint64_t> first1000(keys.begin(), keys.begin() + 1000);
  ApplyKeys(&a, 0, keys);       // a sighting each
  ApplyKeys(&a, 1, first2000);  // admitted and updated
  ApplyKeys(&a, 2, first1000);  // a second update
  ASSERT_EQ(a.counters().rows, 2000);
  ASSERT_EQ(a.counters().pending_keys, 1000);

  std::string blob;
  EXPECT_TRUE(a.Serialize(&blob).ok());
  SparseTable b(options, opt.get(), /*num_stripes=*/7);  // another layout
  ApplyKeys(&b, 0, {42, 43});                            // replaced
  ApplyKeys(&b, 1, {42, 43});
  ASSERT_TRUE(b.Deserialize(blob).ok());
  EXPECT_EQ(b.counters().rows, 2000);
  EXPECT_EQ(b.counters().pending_keys, 1000);
  EXPECT_EQ(ReadAll(b, keys), ReadAll(a, keys));
  EXPECT_EQ(ReadAll(b, {42, 43}), ReadAll(a, {42, 43}));

  // Adam's moments and step counts, and the sightings, came along: one more
  // step admits the last 1000 keys in both and moves every row alike.
  ApplyKeys(&a, 3, keys);
  ApplyKeys(&b, 3, keys);
  EXPECT_EQ(a.counters().rows, 3000);
  EXPECT_EQ(b.counters().rows, 3000);
  EXPECT_EQ(b.counters().pending_keys, 0);
  EXPECT_EQ(ReadAll(b, keys), ReadAll(a, keys));
  // And a serialization of the restored table restores the same again.
  std::string blob2;
  EXPECT_TRUE(b.Serialize(&blob2).ok());
  SparseTable c(options, opt.get());
  ASSERT_TRUE(c.Deserialize(blob2).ok());
  EXPECT_EQ(ReadAll(c, keys), ReadAll(a, keys));
}

TEST(SparseTableCheckpointTest, OtherDimOrStateWidthIsDataLossAndEmpty) {
  auto adam = MakeOptimizer(OptimizerConfig::ADAM, 0.1f);
  auto sgd = MakeOptimizer(OptimizerConfig::SGD, 0.1f);
  SparseTable a(SparseOptions(3, 1), adam.get());
  ApplyKeys(&a, 0, {1, 2, 3});
  std::string blob;
  EXPECT_TRUE(a.Serialize(&blob).ok());

  SparseTable other_dim(SparseOptions(4, 2), adam.get());
  ApplyKeys(&other_dim, 0, {5, 6});  // sightings
  ApplyKeys(&other_dim, 1, {5});     // a row
  ASSERT_EQ(other_dim.counters().rows, 1);
  absl::Status st = other_dim.Deserialize(blob);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_EQ(other_dim.counters().rows, 0);
  EXPECT_EQ(other_dim.counters().pending_keys, 0);

  SparseTable other_state(SparseOptions(3, 1), sgd.get());
  ApplyKeys(&other_state, 0, {1});
  st = other_state.Deserialize(blob);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_EQ(other_state.counters().rows, 0);
}

// A key twice in one blob (a crafted checkpoint: the same group twice) is
// DATA_LOSS, at once: the table is left empty, its locks free, and it
// takes a good blob next.
TEST(SparseTableCheckpointTest, AKeyTwiceIsDataLoss) {
  auto opt = MakeOptimizer(OptimizerConfig::MOMENTUM, 0.1f);
  const SparseTableOptions options = SparseOptions(2, /*admit_after=*/2);
  SparseTable a(options, opt.get());
  ApplyKeys(&a, 0, {1});
  ApplyKeys(&a, 1, {1});
  ASSERT_EQ(a.counters().rows, 1);
  std::string blob;
  EXPECT_TRUE(a.Serialize(&blob).ok());
  // The header: magic, dim and state width (4 bytes each), group count.
  constexpr size_t kGroupsAt = 12, kHeader = 20;
  uint64_t groups = 0;
  std::memcpy(&groups, blob.data() + kGroupsAt, sizeof(groups));
  std::string twice = blob + blob.substr(kHeader);
  groups *= 2;
  std::memcpy(twice.data() + kGroupsAt, &groups, sizeof(groups));

  SparseTable t(options, opt.get());
  absl::Status st = t.Deserialize(twice);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("a key appears twice"), std::string::npos) << st;
  EXPECT_EQ(t.counters().rows, 0);
  ASSERT_TRUE(t.Deserialize(blob).ok());
  EXPECT_EQ(ReadAll(t, {1}), ReadAll(a, {1}));
}

TEST(SparseTableCheckpointTest, EveryTruncationIsDataLoss) {
  auto opt = MakeOptimizer(OptimizerConfig::MOMENTUM, 0.1f);
  const SparseTableOptions options = SparseOptions(2, /*admit_after=*/2);
  SparseTable a(options, opt.get());
  ApplyKeys(&a, 0, {1, 2, 3, 4, 5});
  ApplyKeys(&a, 1, {1, 2, 3});  // 3 rows, 2 sightings
  ASSERT_EQ(a.counters().rows, 3);
  ASSERT_EQ(a.counters().pending_keys, 2);
  std::string blob;
  EXPECT_TRUE(a.Serialize(&blob).ok());
  int accepted = 0;
  for (size_t len = 0; len < blob.size(); ++len) {
    SparseTable t(options, opt.get());
    ApplyKeys(&t, 0, {9, 10});
    ApplyKeys(&t, 1, {9});
    absl::Status st = t.Deserialize(absl::string_view(blob).substr(0, len));
    if (st.code() != absl::StatusCode::kDataLoss) {
      ++accepted;
      ADD_FAILURE() << "prefix of " << len << " of " << blob.size()
                    << " bytes: " << st;
      if (accepted > 3) break;
      continue;
    }
    EXPECT_EQ(t.counters().rows, 0) << len;
    EXPECT_EQ(t.counters().pending_keys, 0) << len;
  }
  // Garbage after a whole blob is refused too.
  SparseTable t(options, opt.get());
  EXPECT_EQ(t.Deserialize(blob + "garbage!").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(t.counters().rows, 0);
  SparseTable whole(options, opt.get());
  ASSERT_TRUE(whole.Deserialize(blob).ok());
  EXPECT_EQ(whole.counters().rows, 3);
  EXPECT_EQ(whole.counters().pending_keys, 2);
  EXPECT_EQ(ReadAll(whole, {1, 2, 3, 4, 5}), ReadAll(a, {1, 2, 3, 4, 5}));
}

// Two trainers' sync steps, then async pushes, on a primary sparse table
// with admission and eviction; every applied update goes to a backup table,
// which must then hold the same rows to the last bit, and have admitted,
// dropped and evicted the same keys.
// The parameter: the rows' storage_type (bf16 rounds stochastically, from
// bits a backup draws alike).
class SparseShardReplicationTest
    : public ::testing::TestWithParam<SparseTableOptions::RowStorage> {
 protected:
  // Sparse table "e" of rows of 4, admitted at a key's second sighting and
  // evicted after 6 steps without an update.
  static TableSpec Spec() {
    TableSpec spec;
    spec.set_name("e");
    spec.set_kind(TableSpec::SPARSE);
    *spec.mutable_sparse() = Options(4);
    spec.mutable_sparse()->set_storage_type(GetParam());
    spec.mutable_sparse()->set_admit_after(2);
    spec.mutable_sparse()->set_evict_after_steps(6);
    return spec;
  }

  // Distinct keys of a skewed vocabulary of 60, with gradients.
  void Draw(std::vector<uint64_t>* keys, std::vector<float>* grads) {
    keys->clear();
    for (int i = 0; i < 12; ++i) {
      const uint64_t k = std::min<uint64_t>(rng_() % 60, rng_() % 60);
      if (std::find(keys->begin(), keys->end(), k) == keys->end()) {
        keys->push_back(k);
      }
    }
    grads->resize(keys->size() * 4);
    for (float& g : *grads) g = noise_(rng_);
  }

  // Makes the primary replicated and runs 25 sync steps of two trainers,
  // then 20 async pushes, keeping each update it applies in sent_.
  void RunPrimary() ABSL_EXCLUSIVE_LOCKS_REQUIRED(primary_.mu) {
    primary_.set_replicated();
    std::vector<uint64_t> k0, k1;
    std::vector<float> g0, g1;
    for (int step = 0; step < 25; ++step) {
      Draw(&k0, &g0);
      Draw(&k1, &g1);
      primary_.Accumulate(PushPayload{g0, k0, 1}, true);
      primary_.Accumulate(PushPayload{g1, k1, 1}, false);
      primary_.barrier.Receive(0, 1);
      primary_.barrier.Receive(1, 1);
      PushPayload last{g1, k1, 1};
      // A replicated shard returns each update (value() throws if not).
      sent_.push_back(primary_.ApplyStep(&last, &ready_).value());
    }
    for (int push = 0; push < 20; ++push) {
      Draw(&k0, &g0);
      PushPayload p{g0, k0, 1};
      p.job_step = 25 + push / 2;
      sent_.push_back(primary_.ApplyNow(25 + push, p).value());
    }
  }

  // Applies every update of sent_ to the backup, in order.
  void ReplicateAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(backup_.mu) {
    ASSERT_EQ(sent_.size(), 45u);
    for (const AppliedUpdate& u : sent_) {
      absl::Status s = backup_.ApplyReplicated(u, &ready_);
      ASSERT_TRUE(s.ok()) << s;
    }
  }

  Membership m_{2, true};
  std::unique_ptr<Optimizer> adagrad_ =
      MakeOptimizer(OptimizerConfig::ADAGRAD, 0.1f);
  const TableSpec spec_ = Spec();
  SparseShard primary_{3, spec_, adagrad_.get(), &m_, 0};
  SparseShard backup_{3, spec_, adagrad_.get(), &m_, 0};
  std::vector<AppliedUpdate> sent_;
  std::vector<WaiterPtr> ready_;
  std::mt19937 rng_{3};
  std::normal_distribution<float> noise_;
};

TEST_P(SparseShardReplicationTest, ABackupApplyingTheUpdatesHoldsTheSameRows) {
  absl::MutexLock lp(&primary_.mu);
  absl::MutexLock lb(&backup_.mu);
  RunPrimary();
  ASSERT_NO_FATAL_FAILURE(ReplicateAll());
  EXPECT_EQ(backup_.barrier.version(), primary_.barrier.version());
  const SparseCounters a = primary_.rows().counters();
  const SparseCounters b = backup_.rows().counters();
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.created, b.created);
  EXPECT_EQ(a.evicted, b.evicted);
  EXPECT_EQ(a.dropped_updates, b.dropped_updates);
  EXPECT_EQ(a.pending_keys, b.pending_keys);
  EXPECT_GT(a.evicted, 0) << "nothing evicted: the test covers less";
  EXPECT_GT(a.dropped_updates, 0) << "nothing dropped: the test covers less";
  for (uint64_t k = 0; k < 60; ++k) {
    const std::vector<float> x = Row(primary_.rows(), k);
    const std::vector<float> y = Row(backup_.rows(), k);
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0)
        << "key " << k;
  }
}

// Out of order, or shaped wrong: refused, nothing applied.
TEST_P(SparseShardReplicationTest,
       ABackupRefusesAnUpdateOutOfOrderOrMisshapen) {
  absl::MutexLock lp(&primary_.mu);
  absl::MutexLock lb(&backup_.mu);
  RunPrimary();
  ASSERT_NO_FATAL_FAILURE(ReplicateAll());
  EXPECT_TRUE(
      absl::IsFailedPrecondition(backup_.ApplyReplicated(sent_[0], &ready_)));
  AppliedUpdate bad = sent_[0];
  bad.version = backup_.barrier.version();
  bad.grad.pop_back();
  EXPECT_TRUE(absl::IsInvalidArgument(backup_.ApplyReplicated(bad, &ready_)));
  EXPECT_EQ(backup_.barrier.version(), primary_.barrier.version());
}

INSTANTIATE_TEST_SUITE_P(Storages, SparseShardReplicationTest,
                         ::testing::Values(SparseTableOptions::FLOAT32,
                                           SparseTableOptions::BF16),
                         [](const auto& info) {
                           return std::string(
                               SparseTableOptions::RowStorage_Name(info.param));
                         });

}  // namespace
}  // namespace shardps
