// Sparse tables whose rows are stored in bf16 or fp16 (storage_type): the
// arithmetic stays float32, rounding back is stochastic and reproducible,
// and checkpoints keep float32 so they move between storage types.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "pserver/store/sparse/sparse_table.h"
#include "pserver/store/sparse/sparse_testing.h"

namespace shardps {
namespace {

using Storage = SparseTableOptions::RowStorage;

using testing::MakeOptimizer;
using testing::ReadAll;
using testing::UniformRows;

SparseTableOptions Options(int dim, Storage storage) {
  return UniformRows(dim, 0.5f, 5, storage);
}

std::vector<uint64_t> Keys(int n) {
  std::vector<uint64_t> keys;
  for (int i = 0; i < n; ++i) keys.push_back(i * 0x9e3779b97f4a7c15ULL + 1);
  return keys;
}

// Pulls every row towards 0.25 * (element index + 1) with a squared loss's
// gradient: row - target.
void TrainTowardsTarget(SparseTable* t, const std::vector<uint64_t>& keys,
                        int steps) {
  const int dim = t->dim();
  const float one[] = {1.0f};
  std::vector<float> rows(keys.size() * dim), grads(rows.size());
  for (int step = 1; step <= steps; ++step) {
    t->Read(keys, rows.data());
    for (size_t i = 0; i < rows.size(); ++i) {
      grads[i] = rows[i] - 0.25f * static_cast<float>(i % dim + 1);
    }
    t->Apply(step, keys, grads, one);
  }
}

class SparseStorageTest : public ::testing::TestWithParam<Storage> {};

TEST_P(SparseStorageTest, TrainsLikeFloat32WithinTheStoragesRounding) {
  auto opt = MakeOptimizer(OptimizerConfig::ROWWISE_ADAGRAD, 0.1f);
  SparseTable f32(Options(8, SparseTableOptions::FLOAT32), opt.get());
  SparseTable narrow(Options(8, GetParam()), opt.get());
  EXPECT_EQ(narrow.storage(), GetParam());
  const std::vector<uint64_t> keys = Keys(200);
  TrainTowardsTarget(&f32, keys, 60);
  TrainTowardsTarget(&narrow, keys, 60);
  const std::vector<float> a = ReadAll(f32, keys), b = ReadAll(narrow, keys);
  // Stochastic rounding is unbiased but not exact: each update adds an
  // error of up to a step of the storage (bf16 keeps 8 significant bits, a
  // step of 2^-7 to 2^-6 on these rows; fp16 11 bits, 8 times finer), and
  // row-wise Adagrad's shrinking steps pull those back only slowly.
  const bool bf16 = GetParam() == SparseTableOptions::BF16;
  double worst = 0, bias = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double{a[i]} - b[i]));
    bias += double{b[i]} - a[i];
  }
  bias /= static_cast<double>(a.size());
  EXPECT_LT(worst, bf16 ? 0.08 : 0.01);
  EXPECT_LT(std::abs(bias), bf16 ? 0.002 : 0.00025) << bias;
  EXPECT_GT(worst, 0.0);  // the storage does round
}

TEST_P(SparseStorageTest, UpdatesSmallerThanAStepOfTheStorageAddUp) {
  // Rounding to nearest would lose every one of these updates: 1e-4 is far
  // below half a bf16 step at 1.0 (2^-8). Stochastic rounding keeps their
  // sum in expectation.
  auto opt = MakeOptimizer(OptimizerConfig::SGD, 1e-4f);
  SparseTableOptions o = Options(1, GetParam());
  o.mutable_init()->set_type(RowInitializer::CONSTANT);
  o.mutable_init()->set_scale(1.0f);
  SparseTable t(o, opt.get());
  const std::vector<uint64_t> keys = Keys(500);
  const std::vector<float> ones(keys.size(), 1.0f);
  const float one[] = {1.0f};
  for (int step = 1; step <= 1000; ++step) t.Apply(step, keys, ones, one);
  double mean = 0;
  for (float v : ReadAll(t, keys)) mean += v;
  mean /= static_cast<double>(keys.size());
  EXPECT_NEAR(mean, 0.9, 0.01);
}

TEST_P(SparseStorageTest, RoundingIsTheSameOnEveryLayoutAndRun) {
  // Replicas and reruns must hold bit-identical rows: the rounding's random
  // bits come from the key and its update count, not from a thread or a
  // stripe.
  auto opt = MakeOptimizer(OptimizerConfig::ROWWISE_ADAM, 0.05f);
  SparseTable a(Options(4, GetParam()), opt.get(), 64);
  SparseTable b(Options(4, GetParam()), opt.get(), 3);
  const std::vector<uint64_t> keys = Keys(300);
  TrainTowardsTarget(&a, keys, 20);
  TrainTowardsTarget(&b, keys, 20);
  EXPECT_EQ(ReadAll(a, keys), ReadAll(b, keys));
}

TEST_P(SparseStorageTest, CheckpointsRoundTripAndMoveBetweenStorages) {
  auto opt = MakeOptimizer(OptimizerConfig::ROWWISE_ADAGRAD, 0.1f);
  const std::vector<uint64_t> keys = Keys(300);
  SparseTable narrow(Options(6, GetParam()), opt.get());
  TrainTowardsTarget(&narrow, keys, 10);
  std::string blob;
  EXPECT_TRUE(narrow.Serialize(&blob).ok());

  // The same storage: the same rows, and the same rows after a step more
  // (the accumulators and update counts came along).
  SparseTable same(Options(6, GetParam()), opt.get(), 5);
  ASSERT_TRUE(same.Deserialize(blob).ok());
  EXPECT_EQ(ReadAll(same, keys), ReadAll(narrow, keys));
  TrainTowardsTarget(&narrow, keys, 1);
  TrainTowardsTarget(&same, keys, 1);
  EXPECT_EQ(ReadAll(same, keys), ReadAll(narrow, keys));

  // Into float32: every narrow value is a float32 one.
  SparseTable wide(Options(6, SparseTableOptions::FLOAT32), opt.get());
  std::string narrow_blob;  // Serialize appends
  EXPECT_TRUE(narrow.Serialize(&narrow_blob).ok());
  ASSERT_TRUE(wide.Deserialize(narrow_blob).ok());
  EXPECT_EQ(ReadAll(wide, keys), ReadAll(narrow, keys));

  // And a float32 table's checkpoint into this storage: to the nearest.
  TrainTowardsTarget(&wide, keys, 3);
  std::string wide_blob;
  EXPECT_TRUE(wide.Serialize(&wide_blob).ok());
  SparseTable back(Options(6, GetParam()), opt.get());
  ASSERT_TRUE(back.Deserialize(wide_blob).ok());
  const std::vector<float> w = ReadAll(wide, keys), n = ReadAll(back, keys);
  const RowCodec codec(GetParam());
  for (size_t i = 0; i < w.size(); ++i) {
    uint16_t stored;
    codec.EncodeNearest(&w[i], 1, &stored);
    float expected;
    codec.Decode(&stored, 1, &expected);
    ASSERT_EQ(n[i], expected) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(NarrowStorages, SparseStorageTest,
                         ::testing::Values(SparseTableOptions::BF16,
                                           SparseTableOptions::FP16),
                         [](const auto& info) {
                           return std::string(
                               SparseTableOptions::RowStorage_Name(info.param));
                         });

TEST(SparseStorageMemoryTest, Bf16RowwiseAdagradRowsTakeLessThanHalf) {
  // dim 16: row-wise Adagrad in bf16 stores 17 values of 2 bytes after a
  // 20-byte head (56 bytes) where Adagrad in float32 stores 32 of 4 (148).
  auto adagrad = MakeOptimizer(OptimizerConfig::ADAGRAD, 0.1f);
  auto rowwise = MakeOptimizer(OptimizerConfig::ROWWISE_ADAGRAD, 0.1f);
  SparseTable full(Options(16, SparseTableOptions::FLOAT32), adagrad.get());
  SparseTable lean(Options(16, SparseTableOptions::BF16), rowwise.get());
  // 400,000 rows: 6,250 a stripe, so the last chunk's free slots and the
  // index's power of two weigh little.
  const std::vector<uint64_t> keys = Keys(400000);
  const std::vector<float> g(keys.size() * 16, 0.01f);
  const float one[] = {1.0f};
  full.Apply(1, keys, g, one);
  lean.Apply(1, keys, g, one);
  const double full_per_row =
      static_cast<double>(full.MemoryBytes()) / full.counters().rows;
  const double lean_per_row =
      static_cast<double>(lean.MemoryBytes()) / lean.counters().rows;
  EXPECT_LT(lean_per_row, 80.0);
  EXPECT_LT(lean_per_row * 2.2, full_per_row)
      << lean_per_row << " vs " << full_per_row;
}

}  // namespace
}  // namespace shardps
