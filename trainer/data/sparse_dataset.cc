#include "trainer/data/sparse_dataset.h"

#include <numeric>

#include "glog/logging.h"
#include "trainer/data/data_shard.h"

namespace shardps {

SparseDataset::SparseDataset(SparseData data) : data_(std::move(data)) {
  StartPass(0, false, 0);
}

void SparseDataset::StartPass(int pass, bool shuffle, uint64_t seed) {
  order_.resize(data_.num_records);
  std::iota(order_.begin(), order_.end(), 0);
  if (shuffle) ShuffleForPass(&order_, pass, seed);
}

void SparseDataset::GetRange(int64_t first, int n, SparseBatch* batch,
                             int32_t* labels) const {
  CHECK_LE(first + n, data_.num_records);
  batch->offsets.assign(1, 0);
  batch->ids.clear();
  batch->values.clear();
  for (int i = 0; i < n; ++i) {
    const int64_t r = order_[first + i];
    const int64_t begin = data_.offsets[r], end = data_.offsets[r + 1];
    batch->ids.insert(batch->ids.end(), data_.ids.begin() + begin,
                      data_.ids.begin() + end);
    batch->values.insert(batch->values.end(), data_.values.begin() + begin,
                         data_.values.begin() + end);
    batch->offsets.push_back(static_cast<int64_t>(batch->ids.size()));
    labels[i] = data_.labels[r];
  }
}

}  // namespace shardps
