// A plain single-process logistic regression with Adagrad on libsvm data:
// the reference that configs/ctr_lr.pbtxt on a cluster is compared with.
// It shares no code with the pserver's optimizers: mini-batches of
// --batch_size records, the mean gradient per touched weight, Adagrad with
// --learning_rate and --initial_accumulator, weights and bias from 0.
//
//   lr_baseline --train=PATH --test=PATH [--batch_size=512] [--passes=1]
//
// Prints one JSON line: test AUC and log loss.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gflags/gflags.h"
#include "trainer/data/libsvm_reader.h"
#include "trainer/model/auc.h"

DEFINE_string(train, "", "libsvm training file");
DEFINE_string(test, "", "libsvm test file");
DEFINE_int32(batch_size, 512, "records per step (the cluster's N * b)");
DEFINE_int32(passes, 1, "passes over the training data");
DEFINE_double(learning_rate, 0.5, "Adagrad learning rate");
DEFINE_double(initial_accumulator, 0.01, "Adagrad initial accumulator");

namespace {

struct Weight {
  double w = 0;
  double acc = 0;
};

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  auto train = shardps::ReadLibsvm(FLAGS_train);
  auto test = shardps::ReadLibsvm(FLAGS_test);
  if (!train.ok() || !test.ok()) {
    std::cerr << "lr_baseline: "
              << (train.ok() ? test.status() : train.status()).message()
              << "\n";
    return 2;
  }
  absl::flat_hash_map<uint64_t, Weight> weights;
  Weight bias;
  bias.acc = FLAGS_initial_accumulator;
  const double lr = FLAGS_learning_rate;
  auto adagrad = [&](Weight* w, double g) {
    w->acc += g * g;
    w->w -= lr * g / (std::sqrt(w->acc) + 1e-10);
  };
  absl::flat_hash_map<uint64_t, double> grads;
  const int64_t n = train->num_records;
  for (int pass = 0; pass < FLAGS_passes; ++pass) {
    for (int64_t start = 0; start + FLAGS_batch_size <= n;
         start += FLAGS_batch_size) {
      grads.clear();
      double gbias = 0;
      for (int64_t r = start; r < start + FLAGS_batch_size; ++r) {
        double z = bias.w;
        for (int64_t j = train->offsets[r]; j < train->offsets[r + 1]; ++j) {
          auto it = weights.find(train->ids[j]);
          if (it != weights.end()) z += it->second.w * train->values[j];
        }
        const double d =
            (Sigmoid(z) - train->labels[r]) / FLAGS_batch_size;  // dL/dz
        gbias += d;
        for (int64_t j = train->offsets[r]; j < train->offsets[r + 1]; ++j) {
          grads[train->ids[j]] += d * train->values[j];
        }
      }
      for (const auto& [id, g] : grads) {
        auto [it, inserted] = weights.try_emplace(id);
        if (inserted) it->second.acc = FLAGS_initial_accumulator;
        adagrad(&it->second, g);
      }
      adagrad(&bias, gbias);
    }
  }
  std::vector<float> p(test->num_records);
  for (int64_t r = 0; r < test->num_records; ++r) {
    double z = bias.w;
    for (int64_t j = test->offsets[r]; j < test->offsets[r + 1]; ++j) {
      auto it = weights.find(test->ids[j]);
      if (it != weights.end()) z += it->second.w * test->values[j];
    }
    p[r] = static_cast<float>(Sigmoid(z));
  }
  std::printf(
      "{\"event\":\"lr_baseline\",\"test_auc\":%.17g,\"test_logloss\":%.17g,"
      "\"weights\":%zu}\n",
      shardps::Auc(p, test->labels), shardps::LogLoss(p, test->labels),
      weights.size());
  return 0;
}
