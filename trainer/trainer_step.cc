// Trainer's step (Trainer::Step): load, pull, compute, push, report. When
// the dense values and gradients travel is the StepSchedule's; what is
// counted and reported, the TrainingSession's.
#include <algorithm>

#include "base/status_macros.h"
#include "trainer/trainer.h"

namespace shardps {
namespace {

// Where a step's time went, from the times its phases began and ended:
// t[0] load, t[1] pull, t[2] compute, t[3] push, t[4] done; `pull_wait`:
// compute waiting for layers' pulls.
StepTimes TimesOf(const absl::Time (&t)[5], absl::Duration pull_wait,
                  const TransferStats& pull, const TransferStats& push) {
  const absl::Duration wait = absl::Microseconds(pull.server_wait_us);
  const absl::Duration pulling = (t[2] - t[1]) + pull_wait;
  StepTimes times;
  times.data = t[1] - t[0];
  times.pull = std::max(absl::ZeroDuration(), pulling - wait);
  times.wait = std::min(wait, pulling);
  // Making the update and encoding it is computation (threshold
  // compression), sending it is the push.
  const absl::Duration prepare =
      std::min(absl::Microseconds(push.prepare_us), t[4] - t[3]);
  times.compute = (t[3] - t[2]) - pull_wait + prepare;
  times.push = (t[4] - t[3]) - prepare;
  return times;
}

}  // namespace

absl::Status Trainer::Step(int pass, int64_t index) {
  const int64_t step = session_->step();
  StepPlan plan;
  plan.step = step;
  plan.min_version = sync() ? step : 0;
  // The next step's parameters may be fetched ahead unless it starts a
  // pass (which begins with an evaluation) or there is none.
  plan.prefetch =
      step + 1 < session_->total_steps() && (step + 1) % steps_per_pass_ != 0;
  absl::Time t[5];
  t[0] = absl::Now();
  input_->LoadTrainBatch(index, options_.batch_size);
  t[1] = absl::Now();
  TransferStats pull;
  RETURN_IF_ERROR(PullStep(&plan, &pull));
  t[2] = absl::Now();
  model_->SetDropoutStream(static_cast<uint64_t>(options_.trainer_id) + 1,
                           step);
  absl::Duration pull_wait;  // compute waiting for layers' pulls
  ASSIGN_OR_RETURN(const BatchStats bs,
                   schedule_->Compute(plan, &pull, &pull_wait));
  t[3] = absl::Now();
  TransferStats push;
  RETURN_IF_ERROR(PushStep(plan, &push));
  t[4] = absl::Now();
  session_->StepDone(pass, TimesOf(t, pull_wait, pull, push), bs.loss_sum,
                     bs.count, push.bytes, pull.bytes, t[4] - t[0]);
  return absl::OkStatus();
}

absl::Status Trainer::PullStep(StepPlan* plan, TransferStats* pull) {
  const int64_t step = plan->step;
  TransferStats sparse_pull;
  RETURN_IF_ERROR(schedule_->Pull(*plan, pull));
  RETURN_IF_ERROR(input_->PullRows(session_->sparse(), plan->min_version, step,
                                   &sparse_pull));
  pull->bytes += sparse_pull.bytes;
  pull->server_wait_us =
      std::max(pull->server_wait_us, sparse_pull.server_wait_us);
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
  plan->tag = sync() && options_.replicas_to_aggregate > 0
                  ? std::max(step, pull->min_version)
                  : step;
  return absl::OkStatus();
}

absl::Status Trainer::PushStep(const StepPlan& plan, TransferStats* push) {
  // Sparse rows first: a pserver that has a trainer's dense push for a
  // step then also has its sparse push (the async final evaluation relies
  // on it).
  TransferStats sparse_push;
  RETURN_IF_ERROR(
      input_->PushRows(session_->sparse(), plan.tag, sync(), &sparse_push));
  absl::Status pushed = schedule_->Push(plan, push);
  if (!pushed.ok()) return StepFailed(pushed);
  const std::vector<bool>& lars = session_->lars_tables();
  if (!lars.empty()) {
    pushed = session_->params()->ExchangeTableNorms(plan.tag, lars);
    if (!pushed.ok()) return StepFailed(pushed);
  }
  push->bytes += sparse_push.bytes;
  return absl::OkStatus();
}

absl::Status Trainer::StepFailed(const absl::Status& why) {
  session_->CancelIfFatal(why);
  schedule_->Drain().IgnoreError();
  return why;
}

}  // namespace shardps
