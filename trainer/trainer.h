#ifndef SHARDPS_TRAINER_TRAINER_H_
#define SHARDPS_TRAINER_TRAINER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/transport/ps_client_interface.h"
#include "proto/model_config.pb.h"
#include "trainer/core/options.h"
#include "trainer/core/training_session.h"
#include "trainer/input_pipeline.h"
#include "trainer/model/model.h"
#include "trainer/step_schedule.h"

namespace shardps {

// What a run achieved.
struct TrainerResult {
  int64_t steps = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  double test_auc = 0;  // binary tasks; NaN otherwise
  int64_t push_bytes = 0;
  int64_t pull_bytes = 0;
  double train_seconds = 0;
  int64_t recoveries = 0;    // rollbacks to a checkpoint
  int64_t steps_redone = 0;  // steps lost to them
  // Pservers whose dense values went through shared memory at the end.
  int shared_memory_servers = 0;
};

// The trainer binary's built-in model, data and evaluator on the core's
// TrainingSession (trainer/core/), which sets up the job and its clients,
// recovers, cancels and reports. Trains the model of options.config on
// this trainer's shard of its data: each step loads a batch, pulls the
// parameters, computes the gradient and pushes it, with the transfers
// overlapped as the StepSchedule chooses; evaluates on the test set after
// each pass; in sync mode recovers when the pservers roll back.
// Thread-compatible.
class Trainer {
 public:
  // `servers` (one per pserver, in --pservers order) must outlive Run().
  Trainer(TrainerOptions options, std::vector<PsClientInterface*> servers);
  ~Trainer();

  absl::Status Run();
  const TrainerResult& result() const { return result_; }

 private:
  // The data, the backend and the model; their tables described to the
  // session.
  absl::Status Setup();
  absl::Status DescribeTables();
  // The chief's initial values; the session started; the schedule.
  absl::Status Start();
  // The passes from the session's step to the last.
  absl::Status TrainPasses();
  // One step of pass `pass`: batch `index` pulled, computed and pushed.
  absl::Status Step(int pass, int64_t index);
  // The step's pulls (dense, then sparse rows), and the chief's checkpoint
  // request; sets plan->tag, the version its push is tagged with.
  absl::Status PullStep(StepPlan* plan, TransferStats* pull);
  // The step's pushes (sparse rows, then dense), and LARS's norms.
  absl::Status PushStep(const StepPlan& plan, TransferStats* push);
  // A step that failed with `why` (at its push, or its LARS norms): the
  // calls in flight cancelled unless the run recovers, the transfers
  // drained; returns `why`.
  absl::Status StepFailed(const absl::Status& why);
  // SYNC: after `why` (ABORTED: the job was rolled back), the transfers
  // drained, goes back to the step the pservers agree on.
  absl::Status Recover(const absl::Status& why);
  // The test set's loss and accuracy with the parameters of step `at`.
  absl::Status Evaluate(int pass, bool final, int64_t at);
  // The session joined a finished job: evaluates its parameters, trains
  // nothing.
  absl::Status EvaluateFinishedJob();
  // After the last step: the session finished, the result, the model
  // saved.
  absl::Status Finish(absl::Time train_start);
  // Leaves the job after SIGTERM or SIGINT; CANCELLED.
  absl::Status Stopped();
  std::unique_ptr<StepSchedule> MakeSchedule();
  bool sync() const { return options_.mode == SYNC; }

  const TrainerOptions options_;
  // options_.config, its optimizers adapted to the data where it asks
  // (InputPipeline::Create).
  ModelConfig config_;
  TrainerResult result_;

  // Set up by Setup().
  std::unique_ptr<InputPipeline> input_;
  std::unique_ptr<Model> model_;
  std::vector<float*> values_;
  std::vector<const float*> grads_;
  int64_t steps_per_pass_ = 0;
  absl::Time load_start_;
  // The job's side of the run (clients, recovery, reports).
  std::unique_ptr<TrainingSession> session_;
  // When the dense values and gradients travel, with the transfers in
  // flight between steps. Declared after the session and the model:
  // destroyed first, its transfers wait for their calls before those go.
  std::unique_ptr<StepSchedule> schedule_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_TRAINER_H_
