#include "trainer/model/sparse_input.h"

#include <algorithm>

namespace shardps {

void SparseInput::SetBatch(const SparseBatch* batch) {
  batch_ = batch;
  index_.clear();
  keys_.clear();
  slot_.resize(batch->ids.size());
  for (size_t i = 0; i < batch->ids.size(); ++i) {
    auto [it, inserted] =
        index_.try_emplace(batch->ids[i], static_cast<uint32_t>(keys_.size()));
    if (inserted) keys_.push_back(batch->ids[i]);
    slot_[i] = it->second;
  }
  rows_.assign(keys_.size() * dim_, 0.0f);
  grads_.assign(keys_.size() * dim_, 0.0f);
}

void SparseInput::Forward(float* h) const {
  const int n = batch_->batch();
  std::fill(h, h + static_cast<size_t>(n) * width_, 0.0f);
  for (int r = 0; r < n; ++r) {
    float* hr = h + static_cast<size_t>(r) * width_;
    for (int64_t j = batch_->offsets[r]; j < batch_->offsets[r + 1]; ++j) {
      const float x = batch_->values[j];
      const float* row = rows_.data() + static_cast<size_t>(slot_[j]) * dim_;
      float* out = hr + Offset(batch_->ids[j]);
      for (int d = 0; d < dim_; ++d) out[d] += x * row[d];
    }
  }
}

void SparseInput::Backward(const float* dh) {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  const int n = batch_->batch();
  for (int r = 0; r < n; ++r) {
    const float* dhr = dh + static_cast<size_t>(r) * width_;
    for (int64_t j = batch_->offsets[r]; j < batch_->offsets[r + 1]; ++j) {
      const float x = batch_->values[j];
      float* g = grads_.data() + static_cast<size_t>(slot_[j]) * dim_;
      const float* in = dhr + Offset(batch_->ids[j]);
      for (int d = 0; d < dim_; ++d) g[d] += x * in[d];
    }
  }
}

}  // namespace shardps
