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

// The weights of the features seen in training, and the bias.
struct LrModel {
  absl::flat_hash_map<uint64_t, Weight> weights;
  Weight bias;
};

// One Adagrad update of `w` with gradient `g`.
void Adagrad(Weight* w, double g) {
  const double lr = FLAGS_learning_rate;
  w->acc += g * g;
  w->w -= lr * g / (std::sqrt(w->acc) + 1e-10);
}

// The model's logit of record `r` of `data` (unseen features weigh 0).
double Logit(const LrModel& model, const shardps::SparseData& data, int64_t r) {
  double z = model.bias.w;
  for (int64_t j = data.offsets[r]; j < data.offsets[r + 1]; ++j) {
    auto it = model.weights.find(data.ids[j]);
    if (it != model.weights.end()) z += it->second.w * data.values[j];
  }
  return z;
}

// One step on the --batch_size records from `start`: the mean log-loss
// gradient of each touched weight (gathered in `grads`) and of the bias,
// each applied by Adagrad.
void TrainBatch(const shardps::SparseData& train, int64_t start,
                absl::flat_hash_map<uint64_t, double>* grads, LrModel* model) {
  grads->clear();
  double gbias = 0;
  for (int64_t r = start; r < start + FLAGS_batch_size; ++r) {
    const double z = Logit(*model, train, r);
    const double d =
        (Sigmoid(z) - train.labels[r]) / FLAGS_batch_size;  // dL/dz
    gbias += d;
    for (int64_t j = train.offsets[r]; j < train.offsets[r + 1]; ++j) {
      (*grads)[train.ids[j]] += d * train.values[j];
    }
  }
  for (const auto& [id, g] : *grads) {
    auto [it, inserted] = model->weights.try_emplace(id);
    if (inserted) it->second.acc = FLAGS_initial_accumulator;
    Adagrad(&it->second, g);
  }
  Adagrad(&model->bias, gbias);
}

// --passes passes over `train` in whole batches, from zero weights.
LrModel Train(const shardps::SparseData& train) {
  LrModel model;
  model.bias.acc = FLAGS_initial_accumulator;
  absl::flat_hash_map<uint64_t, double> grads;
  const int64_t n = train.num_records;
  for (int pass = 0; pass < FLAGS_passes; ++pass) {
    for (int64_t start = 0; start + FLAGS_batch_size <= n;
         start += FLAGS_batch_size) {
      TrainBatch(train, start, &grads, &model);
    }
  }
  return model;
}

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
  const LrModel model = Train(*train);
  std::vector<float> p(test->num_records);
  for (int64_t r = 0; r < test->num_records; ++r) {
    p[r] = static_cast<float>(Sigmoid(Logit(model, *test, r)));
  }
  std::printf(
      "{\"event\":\"lr_baseline\",\"test_auc\":%.17g,\"test_logloss\":%.17g,"
      "\"weights\":%zu}\n",
      shardps::Auc(p, test->labels), shardps::LogLoss(p, test->labels),
      model.weights.size());
  return 0;
}
