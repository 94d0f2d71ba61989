#ifndef SHARDPS_TRAINER_CORE_TRAINING_OBSERVER_H_
#define SHARDPS_TRAINER_CORE_TRAINING_OBSERVER_H_

#include <cstdint>

#include "trainer/core/progress.h"

namespace shardps {

// One training step, as the trainer saw it.
struct StepReport {
  int64_t step = 0;  // counted from 1
  int pass = 0;
  StepTimes times;
  double loss_sum = 0;  // over `samples` examples
  int64_t samples = 0;
  int64_t push_bytes = 0;  // this step's
  int64_t pull_bytes = 0;
};

// One evaluation on the test data (after each pass).
struct EvalReport {
  int pass = 0;
  int64_t step = 0;
  bool final = false;
  double loss = 0;
  double accuracy = 0;
  double auc = 0;          // NaN unless the model is a binary classifier
  int64_t pull_bytes = 0;  // pulled for the evaluation
};

// What a Trainer tells as it trains, for monitoring (trainer/
// trainer_monitoring.h exports it to Prometheus). Called from the training
// thread; an implementation read from other threads synchronizes itself.
class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  // The trainer has joined a ready job and trains from `step` on.
  virtual void Ready(int64_t step) {}
  virtual void StepDone(const StepReport& step) {}
  virtual void Evaluated(const EvalReport& eval) {}
  // A sync job rolled back from step `from` to step `to`.
  virtual void Recovered(int64_t from, int64_t to) {}
  // The chief heard that `n` more checkpoints were not written (a failed
  // write, or a request refused for a full disk).
  virtual void CheckpointsFailed(int64_t n) {}
  // The trainer has left the job: its steps are done, it failed, or it was
  // stopped.
  virtual void Stopped() {}
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CORE_TRAINING_OBSERVER_H_
