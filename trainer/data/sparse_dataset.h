#ifndef SHARDPS_TRAINER_DATA_SPARSE_DATASET_H_
#define SHARDPS_TRAINER_DATA_SPARSE_DATASET_H_

#include <cstdint>
#include <vector>

#include "trainer/data/libsvm_reader.h"
#include "trainer/data/sparse_batch.h"

namespace shardps {

// A trainer's sparse records (already sharded) and their batching order.
// Requires external synchronization.
class SparseDataset {
 public:
  explicit SparseDataset(SparseData data);

  int64_t num_records() const { return data_.num_records; }

  // Natural order, or a permutation depending only on (seed, pass).
  void StartPass(int pass, bool shuffle, uint64_t seed);

  // Copies the records at positions [first, first + n) of this pass's order
  // into `batch` (CSR) and `labels` (n entries).
  // REQUIRES: first + n <= num_records().
  void GetRange(int64_t first, int n, SparseBatch* batch,
                int32_t* labels) const;

 private:
  const SparseData data_;
  std::vector<int64_t> order_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_DATA_SPARSE_DATASET_H_
