#ifndef SHARDPS_COMPRESSION_THRESHOLD_PUSH_ENCODER_H_
#define SHARDPS_COMPRESSION_THRESHOLD_PUSH_ENCODER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "compression/threshold_control.h"

namespace shardps {

// Threshold encoding of a trainer's dense pushes (docs/compression.md): one
// GradientCompressor, with its residual and threshold algorithm, per block,
// created on the block's first push; the statistics of the messages; and,
// after each push, which values its messages changed (for momentum
// masking). Requires external synchronization.
class ThresholdPushEncoder {
 public:
  struct Options {
    bool adaptive = true;     // DL4J's adaptive algorithm, else fixed
    double threshold = 1e-3;  // fixed value, or the adaptive start
    // Per table, instead of `threshold` where non-empty (one per table).
    std::vector<double> table_thresholds;
    bool clip = false;            // residual clipping (5, 5)
    int64_t shake_frequency = 0;  // shake-up bitmap every N steps; 0: off
    bool use_residual = true;     // false: drop what is not sent
    // Adaptive: the band of sent fraction the threshold keeps to.
    double min_sparsity = 1e-4;
    double max_sparsity = 1e-2;
  };
  // Of the pushes since the last TakeStats: messages per format, elements
  // sent and in all, the mean threshold used, non-finite steps skipped.
  struct Stats {
    int64_t threshold_messages = 0;
    int64_t bitmap_messages = 0;
    int64_t empty_messages = 0;
    int64_t nonfinite_messages = 0;
    int64_t selected = 0;
    int64_t elements = 0;
    double threshold_sum = 0;
    int64_t threshold_count = 0;
  };

  // `table_sizes[t]`: the values of dense table t (for the sent masks).
  ThresholdPushEncoder(const Options& options,
                       std::vector<int64_t> table_sizes);

  // Encodes this step's update `grad` of block `block` of table `table`,
  // covering values [offset, offset + grad.size()), into `out`: a threshold
  // or bitmap message, or empty bytes for a zero gradient (nothing reached
  // the threshold, or a non-finite update kept in the residual).
  absl::Status Encode(uint32_t table, uint32_t block, int64_t offset,
                      absl::Span<const float> grad, std::string* out);
  Stats TakeStats();
  // After a push: which values of table `t` its messages changed (1).
  const std::vector<uint8_t>& sent_mask(size_t t) const {
    return sent_masks_[t];
  }
  // Forgets the residuals (after a rollback).
  void Reset();

 private:
  absl::StatusOr<std::unique_ptr<GradientCompressor>> NewCompressor(
      uint32_t table, size_t n) const;

  const Options options_;
  std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<GradientCompressor>>
      compressors_;
  Stats stats_;
  std::vector<std::vector<uint8_t>> sent_masks_;  // per table
  std::vector<int32_t> message_;                  // scratch
  std::vector<float> decoded_;                    // scratch
};

}  // namespace shardps

#endif  // SHARDPS_COMPRESSION_THRESHOLD_PUSH_ENCODER_H_
