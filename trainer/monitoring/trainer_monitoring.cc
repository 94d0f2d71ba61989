#include "trainer/monitoring/trainer_monitoring.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace shardps {
namespace {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Labels;
using prometheus::Registry;

double Secs(absl::Duration d) { return absl::ToDoubleSeconds(d); }

Gauge& NewGauge(Registry* r, const Labels& labels, const char* name,
                const char* help) {
  return prometheus::BuildGauge()
      .Name(name)
      .Help(help)
      .Labels(labels)
      .Register(*r)
      .Add({});
}

Counter& NewCounter(Registry* r, const Labels& labels, const char* name,
                    const char* help) {
  return prometheus::BuildCounter()
      .Name(name)
      .Help(help)
      .Labels(labels)
      .Register(*r)
      .Add({});
}

// Step-time buckets: 1 ms to 60 s.
const prometheus::Histogram::BucketBoundaries& StepBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
      0.5,   1,      2.5,   5,    10,    30,   60};
  return *buckets;
}

}  // namespace

TrainerMetrics::TrainerMetrics(const std::string& job_id, int trainer_id)
    : TrainerMetrics(std::make_shared<Registry>(),
                     Labels{{"job_id", job_id},
                            {"trainer_id", absl::StrCat(trainer_id)}}) {}

TrainerMetrics::TrainerMetrics(std::shared_ptr<Registry> r, const Labels& l)
    : registry_(std::move(r)),
      ready_(NewGauge(registry_.get(), l, "shardps_trainer_ready",
                      "1 while the trainer trains: joined a ready job, "
                      "steps not done")),
      step_(NewGauge(registry_.get(), l, "shardps_trainer_step", "Steps done")),
      pass_(NewGauge(registry_.get(), l, "shardps_trainer_pass",
                     "The pass being trained, from 0")),
      steps_(NewCounter(registry_.get(), l, "shardps_trainer_steps_total",
                        "Steps trained by this process (redone steps "
                        "counted again)")),
      samples_(NewCounter(registry_.get(), l, "shardps_trainer_samples_total",
                          "Training examples processed")),
      pushed_bytes_(NewCounter(registry_.get(), l,
                               "shardps_trainer_pushed_bytes_total",
                               "Serialized bytes of gradient pushes")),
      pulled_bytes_(NewCounter(registry_.get(), l,
                               "shardps_trainer_pulled_bytes_total",
                               "Serialized bytes of parameter pulls, "
                               "evaluations' included")),
      step_seconds_(prometheus::BuildHistogram()
                        .Name("shardps_trainer_step_duration_seconds")
                        .Help("Time of one training step, all phases")
                        .Labels(l)
                        .Register(*registry_)
                        .Add({}, StepBuckets())),
      data_seconds_(NewCounter(registry_.get(), l,
                               "shardps_trainer_data_seconds_total",
                               "Step time spent loading batches")),
      compute_seconds_(NewCounter(registry_.get(), l,
                                  "shardps_trainer_compute_seconds_total",
                                  "Step time spent in forward and backward")),
      pull_seconds_(NewCounter(registry_.get(), l,
                               "shardps_trainer_pull_seconds_total",
                               "Step time spent pulling parameters, net of "
                               "the wait in the pservers")),
      push_seconds_(NewCounter(registry_.get(), l,
                               "shardps_trainer_push_seconds_total",
                               "Step time spent pushing gradients")),
      wait_seconds_(NewCounter(registry_.get(), l,
                               "shardps_trainer_wait_seconds_total",
                               "Step time spent waiting in the pservers for "
                               "other trainers")),
      train_loss_(NewGauge(registry_.get(), l, "shardps_trainer_train_loss",
                           "Mean training loss of the last step")),
      recoveries_(NewCounter(registry_.get(), l,
                             "shardps_trainer_recoveries_total",
                             "Rollbacks to a checkpoint this trainer took "
                             "part in")),
      steps_redone_(NewCounter(registry_.get(), l,
                               "shardps_trainer_steps_redone_total",
                               "Steps lost to rollbacks, trained again")),
      checkpoint_failures_(NewCounter(
          registry_.get(), l, "shardps_trainer_checkpoint_failures_total",
          "Checkpoints the pservers said were not written (a failed write, "
          "or a request refused for a full disk); the chief's only")),
      test_loss_(NewGauge(registry_.get(), l, "shardps_trainer_test_loss",
                          "Test loss of the last evaluation")),
      test_accuracy_(NewGauge(registry_.get(), l,
                              "shardps_trainer_test_accuracy",
                              "Test accuracy of the last evaluation (0..1)")),
      test_auc_(NewGauge(registry_.get(), l, "shardps_trainer_test_auc",
                         "Test AUC of the last evaluation (binary "
                         "classifiers; NaN otherwise)")),
      eval_step_(NewGauge(registry_.get(), l, "shardps_trainer_eval_step",
                          "Step of the last evaluation")),
      eval_time_(NewGauge(registry_.get(), l,
                          "shardps_trainer_eval_timestamp_seconds",
                          "When the last evaluation ended (Unix time)")) {
  test_auc_.Set(std::nan(""));
}

void TrainerMetrics::Ready(int64_t step) {
  step_.Set(static_cast<double>(step));
  ready_.Set(1);
}

void TrainerMetrics::StepDone(const StepReport& s) {
  step_.Set(static_cast<double>(s.step));
  pass_.Set(s.pass);
  steps_.Increment();
  samples_.Increment(static_cast<double>(s.samples));
  pushed_bytes_.Increment(static_cast<double>(s.push_bytes));
  pulled_bytes_.Increment(static_cast<double>(s.pull_bytes));
  const StepTimes& t = s.times;
  step_seconds_.Observe(Secs(t.data + t.pull + t.wait + t.compute + t.push));
  data_seconds_.Increment(Secs(t.data));
  compute_seconds_.Increment(Secs(t.compute));
  pull_seconds_.Increment(Secs(t.pull));
  push_seconds_.Increment(Secs(t.push));
  wait_seconds_.Increment(Secs(t.wait));
  if (s.samples > 0) train_loss_.Set(s.loss_sum / s.samples);
}

void TrainerMetrics::Evaluated(const EvalReport& e) {
  pulled_bytes_.Increment(static_cast<double>(e.pull_bytes));
  test_loss_.Set(e.loss);
  test_accuracy_.Set(e.accuracy);
  test_auc_.Set(e.auc);
  eval_step_.Set(static_cast<double>(e.step));
  eval_time_.Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
}

void TrainerMetrics::Recovered(int64_t from, int64_t to) {
  recoveries_.Increment();
  if (from > to) steps_redone_.Increment(static_cast<double>(from - to));
  step_.Set(static_cast<double>(to));
}

void TrainerMetrics::CheckpointsFailed(int64_t n) {
  checkpoint_failures_.Increment(static_cast<double>(n));
}

void TrainerMetrics::Stopped() { ready_.Set(0); }

}  // namespace shardps
