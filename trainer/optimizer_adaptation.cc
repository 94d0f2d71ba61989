#include "trainer/optimizer_adaptation.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

// The data the config's settings are for.
constexpr double kFeatures = 20;
constexpr double kClickRate = 0.15;
constexpr double kDistinctShare = 0.2;
// ADAGRAD's initial accumulator when the config leaves it 0
// (optimizer/optimizer.cc).
constexpr float kDefaultAccumulator = 0.1f;

}  // namespace

absl::StatusOr<DataStatistics> StatisticsOf(const LibsvmSummary& summary) {
  if (summary.records <= 0 || summary.features <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adapt_optimizer_to_data: the training data has ", summary.records,
        " records and ", summary.features, " features; it needs some"));
  }
  if (summary.positives <= 0 || summary.positives >= summary.records) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adapt_optimizer_to_data: ", summary.positives, " of the ",
        summary.records,
        " training records are positive; the rule needs both labels"));
  }
  DataStatistics s;
  const double features = static_cast<double>(summary.features);
  s.features_per_record = features / static_cast<double>(summary.records);
  s.click_rate = static_cast<double>(summary.positives) /
                 static_cast<double>(summary.records);
  s.distinct_share = summary.ids.Estimate() / features;
  return s;
}

absl::StatusOr<std::string> AdaptOptimizersToData(const DataStatistics& stats,
                                                  ModelConfig* config) {
  std::vector<OptimizerConfig*> optimizers = {config->mutable_optimizer()};
  std::vector<std::string> names = {"the model's optimizer"};
  if (config->sparse_input().has_optimizer()) {
    optimizers.push_back(config->mutable_sparse_input()->mutable_optimizer());
    names.push_back("sparse_input's optimizer");
  }
  for (LayerConfig& layer : *config->mutable_layers()) {
    if (layer.has_optimizer()) {
      optimizers.push_back(layer.mutable_optimizer());
      names.push_back(absl::StrCat("layer ", layer.name(), "'s optimizer"));
    }
  }
  for (size_t i = 0; i < optimizers.size(); ++i) {
    if (optimizers[i]->type() != OptimizerConfig::ADAGRAD) {
      return absl::InvalidArgumentError(absl::StrCat(
          "adapt_optimizer_to_data: the rule is for ADAGRAD; ", names[i],
          " is ", OptimizerConfig::Type_Name(optimizers[i]->type()),
          i == 0 ? " (it is the default of every table without its own, "
                   "so it must be ADAGRAD too)"
                 : ""));
    }
  }
  const double lr_scale = std::sqrt(
      kFeatures * kClickRate / (stats.features_per_record * stats.click_rate));
  const double acc_scale =
      (stats.distinct_share / kDistinctShare) * (kClickRate / stats.click_rate);
  const OptimizerConfig before = *optimizers[0];
  for (OptimizerConfig* o : optimizers) {
    const float acc = o->initial_accumulator() == 0 ? kDefaultAccumulator
                                                    : o->initial_accumulator();
    o->set_learning_rate(static_cast<float>(o->learning_rate() * lr_scale));
    o->set_initial_accumulator(static_cast<float>(acc * acc_scale));
  }
  return absl::StrCat(
      "optimizer adapted to the training data (", stats.features_per_record,
      " features a record, click rate ", stats.click_rate, ", ",
      stats.distinct_share, " of features distinct): learning rate ",
      before.learning_rate(), " -> ", optimizers[0]->learning_rate(),
      ", initial accumulator ",
      before.initial_accumulator() == 0 ? kDefaultAccumulator
                                        : before.initial_accumulator(),
      " -> ", optimizers[0]->initial_accumulator());
}

}  // namespace shardps
