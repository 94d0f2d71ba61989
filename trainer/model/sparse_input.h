#ifndef SHARDPS_TRAINER_MODEL_SPARSE_INPUT_H_
#define SHARDPS_TRAINER_MODEL_SPARSE_INPUT_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "trainer/data/sparse_batch.h"

namespace shardps {

// The sparse input layer of a model: each record's features look up rows of
// `dim` floats in a sparse table, and the record's input is the
// value-weighted sum of its rows (sum pooling), h_r = sum_j x_j * E[id_j].
// The batch's keys are deduplicated, so a trainer pulls and pushes each
// touched row once per step, and the gradient it pushes for a row is the sum
// over the batch of that row's contributions. Requires external
// synchronization.
class SparseInput {
 public:
  // With num_fields = F > 0, a feature's field is (id >> field_shift) % F,
  // and each record's input is F pooled rows side by side (F * dim floats).
  explicit SparseInput(int dim, int num_fields = 0, int field_shift = 0)
      : dim_(dim),
        num_fields_(num_fields),
        field_shift_(field_shift),
        width_(dim * (num_fields > 0 ? num_fields : 1)) {}

  int dim() const { return dim_; }
  // Floats per record of the pooled input: dim * max(1, num_fields).
  int width() const { return width_; }

  // Sets the batch: collects its distinct keys (in first-seen order).
  void SetBatch(const SparseBatch* batch);
  // The distinct keys of the batch; rows() must be filled for them.
  const std::vector<uint64_t>& keys() const { return keys_; }
  // keys().size() * dim floats: the rows of keys(), to fill from a pull.
  std::vector<float>& rows() { return rows_; }

  // h (batch x width) from the rows.
  void Forward(float* h) const;
  // From dh (batch x width), the gradient of each distinct key's row,
  // keys().size() * dim floats in grads().
  void Backward(const float* dh);
  const std::vector<float>& grads() const { return grads_; }

 private:
  // Where feature occurrence j lands in its record's input.
  int Offset(uint64_t id) const {
    if (num_fields_ <= 0) return 0;
    return static_cast<int>((id >> field_shift_) % num_fields_) * dim_;
  }

  const int dim_;
  const int num_fields_;
  const int field_shift_;
  const int width_;
  const SparseBatch* batch_ = nullptr;
  absl::flat_hash_map<uint64_t, uint32_t> index_;
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> slot_;  // per feature occurrence: its key's index
  std::vector<float> rows_;
  std::vector<float> grads_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_MODEL_SPARSE_INPUT_H_
