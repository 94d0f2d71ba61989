#ifndef SHARDPS_TRAINER_DATA_SPARSE_BATCH_H_
#define SHARDPS_TRAINER_DATA_SPARSE_BATCH_H_

#include <cstdint>
#include <vector>

namespace shardps {

// A batch of sparse records in CSR form: record r has the features
// ids[offsets[r] .. offsets[r+1]) with their values.
struct SparseBatch {
  std::vector<int64_t> offsets;  // batch + 1 entries, offsets[0] == 0
  std::vector<uint64_t> ids;
  std::vector<float> values;
  int batch() const { return static_cast<int>(offsets.size()) - 1; }
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_DATA_SPARSE_BATCH_H_
