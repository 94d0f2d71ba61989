// Trainer's step (Trainer::Step): load, pull, compute, push, report. When
// the dense values and gradients travel is the StepSchedule's; what is
// counted and reported, the TrainingSession's.
#include <algorithm>

#include "base/status_macros.h"
#include "trainer/trainer.h"

namespace shardps {

absl::Status Trainer::Step(int pass, int64_t index) {
  const TrainerOptions& o = options_;
  const int64_t step = session_->step();
  StepPlan plan;
  plan.step = step;
  plan.min_version = sync() ? step : 0;
  // The next step's parameters may be fetched ahead unless it starts a
  // pass (which begins with an evaluation) or there is none.
  plan.prefetch =
      step + 1 < session_->total_steps() && (step + 1) % steps_per_pass_ != 0;
  const absl::Time t0 = absl::Now();
  input_->LoadTrainBatch(index, o.batch_size);

  const absl::Time t1 = absl::Now();
  TransferStats pull, sparse_pull;
  RETURN_IF_ERROR(schedule_->Pull(plan, &pull));
  RETURN_IF_ERROR(input_->PullRows(session_->sparse(), plan.min_version, step,
                                   &sparse_pull));
  pull.bytes += sparse_pull.bytes;
  pull.server_wait_us =
      std::max(pull.server_wait_us, sparse_pull.server_wait_us);
  // The chief asks for checkpoints between its pull and its push of a
  // step: in sync mode no block can move then (every layer's pull ended).
  CheckpointRequester* checkpoints = session_->checkpoints();
  if (checkpoints->DueAt(step)) {
    TransferStats settled;
    RETURN_IF_ERROR(schedule_->SettlePulls(&settled));
  }
  RETURN_IF_ERROR(checkpoints->AtStep(step));
  // With replicas_to_aggregate the step may have gone ahead without this
  // trainer: tag the push with the version it computed on.
  plan.tag = sync() && o.replicas_to_aggregate > 0
                 ? std::max(step, pull.min_version)
                 : step;

  const absl::Time t2 = absl::Now();
  model_->SetDropoutStream(static_cast<uint64_t>(o.trainer_id) + 1, step);
  absl::Duration pull_wait;  // compute waiting for layers' pulls
  ASSIGN_OR_RETURN(const BatchStats bs,
                   schedule_->Compute(plan, &pull, &pull_wait));

  const absl::Time t3 = absl::Now();
  // Sparse rows first: a pserver that has a trainer's dense push for a
  // step then also has its sparse push (the async final evaluation relies
  // on it).
  TransferStats push, sparse_push;
  RETURN_IF_ERROR(
      input_->PushRows(session_->sparse(), plan.tag, sync(), &sparse_push));
  absl::Status pushed = schedule_->Push(plan, &push);
  if (!pushed.ok()) return StepFailed(pushed);
  const std::vector<bool>& lars = session_->lars_tables();
  if (!lars.empty()) {
    pushed = session_->params()->ExchangeTableNorms(plan.tag, lars);
    if (!pushed.ok()) return StepFailed(pushed);
  }
  push.bytes += sparse_push.bytes;

  const absl::Time t4 = absl::Now();
  const absl::Duration wait = absl::Microseconds(pull.server_wait_us);
  const absl::Duration pulling = (t2 - t1) + pull_wait;
  StepTimes times;
  times.data = t1 - t0;
  times.pull = std::max(absl::ZeroDuration(), pulling - wait);
  times.wait = std::min(wait, pulling);
  // Making the update and encoding it is computation (threshold
  // compression), sending it is the push.
  const absl::Duration prepare =
      std::min(absl::Microseconds(push.prepare_us), t4 - t3);
  times.compute = (t3 - t2) - pull_wait + prepare;
  times.push = (t4 - t3) - prepare;
  session_->StepDone(pass, times, bs.loss_sum, bs.count, push.bytes, pull.bytes,
                     t4 - t0);
  return absl::OkStatus();
}

absl::Status Trainer::StepFailed(const absl::Status& why) {
  session_->CancelIfFatal(why);
  schedule_->Drain().IgnoreError();
  return why;
}

}  // namespace shardps
