#ifndef SHARDPS_TRAINER_OPTIMIZER_ADAPTATION_H_
#define SHARDPS_TRAINER_OPTIMIZER_ADAPTATION_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/model_config.pb.h"
#include "trainer/data/libsvm_reader.h"

namespace shardps {

// What the adapted optimizer reads of the training data (all its files).
struct DataStatistics {
  double features_per_record = 0;  // F
  double click_rate = 0;           // C: the share of positive records
  double distinct_share = 0;       // U: distinct feature ids / features
};

// InvalidArgument for data the rule cannot read: no records, no features,
// or labels all positive or all negative.
absl::StatusOr<DataStatistics> StatisticsOf(const LibsvmSummary& summary);

// sparse_input { adapt_optimizer_to_data: true }: the config's optimizer
// settings are those for data with F = 20, C = 0.15, U = 0.2 (near the CTR
// generator's defaults), and each ADAGRAD optimizer of `config` (the model's,
// the sparse input's and the layers') is moved to the data's:
//
//   learning_rate       *= sqrt(20 * 0.15 / (F * C))
//   initial_accumulator *= (U / 0.2) * (0.15 / C)
//
// The rule was fitted to the best settings of a single-process Adagrad
// logistic regression on ten generator settings (docs/tuning.md, "CTR
// defaults", round 5). Returns a line for the log saying what it did.
// InvalidArgument, naming it, for an optimizer other than ADAGRAD.
absl::StatusOr<std::string> AdaptOptimizersToData(const DataStatistics& stats,
                                                  ModelConfig* config);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_OPTIMIZER_ADAPTATION_H_
