#include "compression/threshold_push_encoder.h"

#include <algorithm>

#include "base/status_macros.h"

namespace shardps {

ThresholdPushEncoder::ThresholdPushEncoder(const Options& options,
                                           std::vector<int64_t> table_sizes)
    : options_(options) {
  for (int64_t n : table_sizes) sent_masks_.emplace_back(n, 0);
}

absl::StatusOr<std::unique_ptr<GradientCompressor>>
ThresholdPushEncoder::NewCompressor(uint32_t table, size_t n) const {
  const double threshold = table < options_.table_thresholds.size()
                               ? options_.table_thresholds[table]
                               : options_.threshold;
  std::unique_ptr<ThresholdAlgorithm> algorithm;
  if (options_.adaptive) {
    AdaptiveThreshold::Options o;
    o.initial_threshold = threshold;
    o.min_sparsity_target = options_.min_sparsity;
    o.max_sparsity_target = options_.max_sparsity;
    ASSIGN_OR_RETURN(algorithm, AdaptiveThreshold::Create(o));
  } else {
    ASSIGN_OR_RETURN(algorithm, FixedThreshold::Create(threshold));
  }
  GradientCompressor::Options o;
  o.clip = options_.clip;
  o.shake_frequency = options_.shake_frequency;
  o.use_residual = options_.use_residual;
  return GradientCompressor::Create(n, std::move(algorithm), o);
}

absl::Status ThresholdPushEncoder::Encode(uint32_t table, uint32_t block,
                                          int64_t offset,
                                          absl::Span<const float> grad,
                                          std::string* out) {
  auto& compressor = compressors_[{table, block}];
  if (compressor == nullptr) {
    ASSIGN_OR_RETURN(compressor, NewCompressor(table, grad.size()));
  }
  stats_.threshold_sum += compressor->threshold();
  ++stats_.threshold_count;
  message_.clear();
  ASSIGN_OR_RETURN(EncodeInfo info, compressor->Step(grad, &message_));
  out->clear();
  stats_.elements += static_cast<int64_t>(grad.size());
  std::vector<uint8_t>& mask = sent_masks_[table];
  std::fill(mask.begin() + offset, mask.begin() + offset + grad.size(), 0);
  switch (info.kind) {
    case EncodeInfo::Kind::kEmpty:
      ++stats_.empty_messages;  // empty bytes: a zero gradient
      return absl::OkStatus();
    case EncodeInfo::Kind::kNonFinite:
      // Nothing sent and the residual kept: the block pushes a zero
      // gradient this step (a sync step still needs every block).
      ++stats_.nonfinite_messages;
      return absl::OkStatus();
    case EncodeInfo::Kind::kThreshold:
      ++stats_.threshold_messages;
      break;
    case EncodeInfo::Kind::kBitmap:
      ++stats_.bitmap_messages;
      break;
  }
  stats_.selected += info.selected;
  AppendMessageBytes(message_, out);
  // Mark what this message changes (for momentum masking).
  decoded_.assign(grad.size(), 0.0f);
  RETURN_IF_ERROR(DecodeAdd(message_, absl::MakeSpan(decoded_)));
  for (size_t i = 0; i < decoded_.size(); ++i) {
    mask[offset + i] = decoded_[i] != 0.0f;
  }
  return absl::OkStatus();
}

ThresholdPushEncoder::Stats ThresholdPushEncoder::TakeStats() {
  Stats out = stats_;
  stats_ = Stats{};
  return out;
}

void ThresholdPushEncoder::Reset() {
  compressors_.clear();
  for (auto& m : sent_masks_) std::fill(m.begin(), m.end(), 0);
}

}  // namespace shardps
