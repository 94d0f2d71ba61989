#include "trainer/model/sparse_input.h"

#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

// Two records: {7: 1.0, 9: 2.0} and {9: 0.5}; rows of dim 2.
SparseBatch TwoRecords() {
  SparseBatch b;
  b.offsets = {0, 2, 3};
  b.ids = {7, 9, 9};
  b.values = {1.0f, 2.0f, 0.5f};
  return b;
}

TEST(SparseInputTest, DeduplicatesKeysAndPoolsBySum) {
  SparseBatch b = TwoRecords();
  SparseInput in(2);
  in.SetBatch(&b);
  ASSERT_EQ(in.keys(), (std::vector<uint64_t>{7, 9}));
  in.rows() = {1, 2, 10, 20};  // E[7] = (1, 2), E[9] = (10, 20)
  std::vector<float> h(4);
  in.Forward(h.data());
  EXPECT_EQ(h, (std::vector<float>{21, 42, 5, 10}));
}

TEST(SparseInputTest, BackwardSumsContributionsPerKey) {
  SparseBatch b = TwoRecords();
  SparseInput in(2);
  in.SetBatch(&b);
  const std::vector<float> dh = {1, -1, 4, 2};
  in.Backward(dh.data());
  // d/dE[7] = 1.0 * dh_0; d/dE[9] = 2.0 * dh_0 + 0.5 * dh_1.
  EXPECT_EQ(in.grads(), (std::vector<float>{1, -1, 4, -1}));
}

TEST(SparseInputTest, NumericalGradientOfALinearLoss) {
  SparseBatch b = TwoRecords();
  SparseInput in(2);
  in.SetBatch(&b);
  in.rows() = {0.3f, -0.2f, 0.1f, 0.7f};
  const std::vector<float> w = {0.5f, -1.5f, 2.0f, 0.25f};  // L = w . h
  in.Backward(w.data());
  const auto analytic = in.grads();
  for (size_t i = 0; i < in.rows().size(); ++i) {
    auto loss = [&] {
      std::vector<float> h(4);
      in.Forward(h.data());
      double l = 0;
      for (int k = 0; k < 4; ++k) l += w[k] * h[k];
      return l;
    };
    const float saved = in.rows()[i];
    in.rows()[i] = saved + 1e-3f;
    const double up = loss();
    in.rows()[i] = saved - 1e-3f;
    const double down = loss();
    in.rows()[i] = saved;
    EXPECT_NEAR(analytic[i], (up - down) / 2e-3, 1e-3) << i;
  }
}

TEST(SparseInputTest, PerFieldPoolingPutsFieldsSideBySide) {
  // Field = id >> 40: ids 7 and (1 << 40) | 9 are fields 0 and 1.
  SparseBatch b;
  const uint64_t f1 = (uint64_t{1} << 40) | 9;
  b.offsets = {0, 2};
  b.ids = {7, f1};
  b.values = {1.0f, 2.0f};
  SparseInput in(2, /*num_fields=*/2, /*field_shift=*/40);
  EXPECT_EQ(in.width(), 4);
  in.SetBatch(&b);
  in.rows() = {1, 2, 10, 20};
  std::vector<float> h(4);
  in.Forward(h.data());
  EXPECT_EQ(h, (std::vector<float>{1, 2, 20, 40}));
  const std::vector<float> dh = {1, 2, 3, 4};
  in.Backward(dh.data());
  EXPECT_EQ(in.grads(), (std::vector<float>{1, 2, 6, 8}));
}

}  // namespace
}  // namespace shardps
