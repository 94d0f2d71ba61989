#ifndef SHARDPS_TRAINER_MONITORING_TRAINER_MONITORING_H_
#define SHARDPS_TRAINER_MONITORING_TRAINER_MONITORING_H_

#include <memory>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "trainer/core/training_observer.h"

namespace shardps {

// A trainer's Prometheus metrics (docs/monitoring.md lists them): steps,
// samples, the step time split into data, compute, pull, push and wait,
// the training loss, bytes pushed and pulled, recoveries, and the last
// evaluation. Every series carries the job_id and trainer_id labels.
// Thread-safe: the training thread reports, the HTTP server reads.
class TrainerMetrics : public TrainingObserver {
 public:
  TrainerMetrics(const std::string& job_id, int trainer_id);

  // What the /metrics server serves.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void Ready(int64_t step) override;
  void StepDone(const StepReport& step) override;
  void Evaluated(const EvalReport& eval) override;
  void Recovered(int64_t from, int64_t to) override;
  void CheckpointsFailed(int64_t n) override;
  void Stopped() override;

 private:
  TrainerMetrics(std::shared_ptr<prometheus::Registry> registry,
                 const prometheus::Labels& labels);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge& ready_;
  prometheus::Gauge& step_;
  prometheus::Gauge& pass_;
  prometheus::Counter& steps_;
  prometheus::Counter& samples_;
  prometheus::Counter& pushed_bytes_;
  prometheus::Counter& pulled_bytes_;
  prometheus::Histogram& step_seconds_;
  prometheus::Counter& data_seconds_;
  prometheus::Counter& compute_seconds_;
  prometheus::Counter& pull_seconds_;
  prometheus::Counter& push_seconds_;
  prometheus::Counter& wait_seconds_;
  prometheus::Gauge& train_loss_;
  prometheus::Counter& recoveries_;
  prometheus::Counter& steps_redone_;
  prometheus::Counter& checkpoint_failures_;
  prometheus::Gauge& test_loss_;
  prometheus::Gauge& test_accuracy_;
  prometheus::Gauge& test_auc_;
  prometheus::Gauge& eval_step_;
  prometheus::Gauge& eval_time_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_MONITORING_TRAINER_MONITORING_H_
