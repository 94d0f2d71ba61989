#include "pserver/sparse_table.h"

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

std::unique_ptr<Optimizer> MakeOptimizer(OptimizerConfig::Type type, float lr) {
  OptimizerConfig c;
  c.set_type(type);
  c.set_learning_rate(lr);
  return std::move(*Optimizer::Create(c, 1));
}

SparseTableOptions Options(int dim, float scale = 0.5f, uint64_t seed = 9) {
  SparseTableOptions o;
  o.set_dim(dim);
  o.mutable_init()->set_type(RowInitializer::UNIFORM);
  o.mutable_init()->set_scale(scale);
  o.mutable_init()->set_seed(seed);
  return o;
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
  EXPECT_EQ(t.Evict(10), 0);  // step 0 is 10 steps back: kept
  EXPECT_EQ(t.Evict(11), 1);
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
  EXPECT_EQ(t.ApplyAccumulated(0), 2);
  EXPECT_FLOAT_EQ(Row(t, 1)[0], -3.0f);  // mean of 2 and 4
  EXPECT_FLOAT_EQ(Row(t, 2)[0], -6.0f);  // only trainer 0 pushed it
  EXPECT_EQ(t.ApplyAccumulated(1), 0);   // cleared
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

}  // namespace
}  // namespace shardps
