// Helpers of the sparse tables' tests: an optimizer, a table's options
// with uniform initial rows, and the rows of many keys. Header-only;
// tests only.
#ifndef SHARDPS_PSERVER_STORE_SPARSE_SPARSE_TESTING_H_
#define SHARDPS_PSERVER_STORE_SPARSE_SPARSE_TESTING_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "pserver/store/sparse/sparse_table.h"

namespace shardps {
namespace testing {

inline std::unique_ptr<Optimizer> MakeOptimizer(OptimizerConfig::Type type,
                                                float lr) {
  OptimizerConfig c;
  c.set_type(type);
  c.set_learning_rate(lr);
  return std::move(*Optimizer::Create(c, 1));
}

// Rows of `dim` floats drawn from U(-scale, scale) by (seed, key).
inline SparseTableOptions UniformRows(
    int dim, float scale, uint64_t seed,
    SparseTableOptions::RowStorage storage = SparseTableOptions::FLOAT32) {
  SparseTableOptions o;
  o.set_dim(dim);
  o.mutable_init()->set_type(RowInitializer::UNIFORM);
  o.mutable_init()->set_scale(scale);
  o.mutable_init()->set_seed(seed);
  o.set_storage_type(storage);
  return o;
}

// The rows of `keys`, one after another (Read: a pull).
inline std::vector<float> ReadAll(const SparseTable& t,
                                  const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * t.dim());
  t.Read(keys, out.data());
  return out;
}

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_SPARSE_SPARSE_TESTING_H_
