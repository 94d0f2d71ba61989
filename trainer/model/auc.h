#ifndef SHARDPS_TRAINER_MODEL_AUC_H_
#define SHARDPS_TRAINER_MODEL_AUC_H_

#include <cstdint>

#include "absl/types/span.h"

// Metrics of a binary classifier (CTR models). Thread-safe: the functions
// keep no state.

namespace shardps {

// ROC AUC of `scores` against `labels` (nonzero = positive): the probability
// that a random positive scores above a random negative, a tie counting one
// half (the Mann-Whitney U statistic from average ranks). O(n log n). Scores
// need only be monotone in the prediction (logits or probabilities). A NaN
// score ranks below every other score and ties with other NaNs. Returns NaN
// when there is no positive or no negative (AUC is undefined then).
// REQUIRES: scores.size() == labels.size().
double Auc(absl::Span<const float> scores, absl::Span<const int32_t> labels);

// Mean binary cross-entropy -[y log p + (1 - y) log(1 - p)] of click
// probabilities `probs` against `labels` (nonzero = 1), each p clipped to
// [1e-7, 1 - 1e-7] so a confident mistake costs at most -log(1e-7) ~ 16.1.
// Returns NaN for empty input or when a probability is NaN.
// REQUIRES: probs.size() == labels.size().
double LogLoss(absl::Span<const float> probs, absl::Span<const int32_t> labels);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_MODEL_AUC_H_
