#include "trainer/step_schedule.h"

#include <algorithm>
#include <utility>

#include "absl/memory/memory.h"
#include "base/status_macros.h"

namespace shardps {
namespace {

// --overlap (sync) and --async_overlap: the next step's pull starts right
// after this step's push, and is waited for at the next step's start.
class OverlapSchedule : public StepSchedule {
 public:
  explicit OverlapSchedule(StepContext context)
      : StepSchedule(std::move(context)) {}

  absl::Status Pull(const StepPlan& plan, TransferStats* pull) override {
    bool ahead = false;
    return PullAhead(plan, pull, &ahead);
  }

  absl::Status Push(const StepPlan& plan, TransferStats* push) override {
    ComputeUpdates(plan);
    ASSIGN_OR_RETURN(std::unique_ptr<Transfer> pushing, StartPush(plan.tag));
    if (plan.prefetch) {
      // The pserver answers it once this step is applied: sync, every
      // trainer's push (min_version); async, this trainer's (own_clock).
      const int64_t next = plan.step + 1;
      ahead_ = ctx_.options->mode == SYNC
                   ? ctx_.params->StartPull(next, next, *ctx_.values)
                   : ctx_.params->StartPull(0, next, *ctx_.values, 0,
                                            /*own_clock=*/next);
      ahead_step_ = next;
    }
    TransferStats this_push;
    absl::Status s = pushing->Wait(&this_push);
    push->bytes += this_push.bytes;
    return s;
  }

  absl::Status Drain() override {
    if (ahead_ != nullptr) {
      ahead_->Wait().IgnoreError();  // its step is pulled again
      ahead_.reset();
    }
    return absl::OkStatus();
  }

 protected:
  // Pull, telling in *ahead whether the values came from the pull started
  // ahead.
  absl::Status PullAhead(const StepPlan& plan, TransferStats* pull,
                         bool* ahead) {
    if (ahead_ != nullptr && ahead_step_ == plan.step) {
      absl::Status s = ahead_->Wait(pull);
      ahead_.reset();
      *ahead = s.ok();
      return s;
    }
    if (ahead_ != nullptr) RETURN_IF_ERROR(Drain());
    return StepSchedule::Pull(plan, pull);
  }

  // The pull of step ahead_step_, started during the previous step.
  std::unique_ptr<Transfer> ahead_;
  int64_t ahead_step_ = -1;
};

// --async_prefetch: the next step's pull runs during this step's compute,
// into buffers of its own that become the model's at the next step; the
// push stays in flight until the next push, its gradient buffer set aside.
class AsyncPrefetchSchedule : public OverlapSchedule {
 public:
  explicit AsyncPrefetchSchedule(StepContext context)
      : OverlapSchedule(std::move(context)) {
    for (const ParamTable& t : ctx_.model->tables()) {
      prefetched_.emplace_back(t.value.size());
      spare_grads_.emplace_back(t.grad.size());
    }
    for (auto& p : prefetched_) prefetched_ptrs_.push_back(p.data());
  }

  absl::Status Pull(const StepPlan& plan, TransferStats* pull) override {
    bool ahead = false;
    RETURN_IF_ERROR(PullAhead(plan, pull, &ahead));
    if (ahead) SwapInPrefetched();
    return absl::OkStatus();
  }

  absl::StatusOr<BatchStats> Compute(const StepPlan& plan, TransferStats* pull,
                                     absl::Duration* pull_wait) override {
    if (plan.prefetch) {
      ahead_ = ctx_.params->StartPull(0, plan.step + 1, prefetched_ptrs_);
      ahead_step_ = plan.step + 1;
    }
    return StepSchedule::Compute(plan, pull, pull_wait);
  }

  absl::Status Push(const StepPlan& plan, TransferStats* push) override {
    ComputeUpdates(plan);
    if (in_flight_ != nullptr) {
      // At most one push in flight; the previous one ends here.
      RETURN_IF_ERROR(in_flight_->Wait(push));
      in_flight_.reset();
    }
    ASSIGN_OR_RETURN(in_flight_, StartPush(plan.tag));
    // The next step does not wait for this push; its gradient buffer stays
    // untouched until the push has ended.
    SwapGradients();
    return absl::OkStatus();
  }

  absl::Status Drain() override {
    OverlapSchedule::Drain().IgnoreError();
    if (in_flight_ == nullptr) return absl::OkStatus();
    TransferStats push;
    absl::Status s = in_flight_->Wait(&push);
    in_flight_.reset();
    ctx_.count_pushed(push.bytes);
    return s;
  }

 private:
  // The prefetched parameters become the model's.
  void SwapInPrefetched() {
    std::vector<ParamTable>& tables = ctx_.model->tables();
    for (size_t t = 0; t < tables.size(); ++t) {
      std::swap(tables[t].value, prefetched_[t]);
      (*ctx_.values)[t] = tables[t].value.data();
      prefetched_ptrs_[t] = prefetched_[t].data();
    }
  }
  // The gradient buffer just sent is set aside while its push is in flight.
  void SwapGradients() {
    std::vector<ParamTable>& tables = ctx_.model->tables();
    for (size_t t = 0; t < tables.size(); ++t) {
      std::swap(tables[t].grad, spare_grads_[t]);
      (*ctx_.grads)[t] = tables[t].grad.data();
    }
  }

  std::unique_ptr<Transfer> in_flight_;
  std::vector<std::vector<float>> prefetched_;
  std::vector<float*> prefetched_ptrs_;
  std::vector<std::vector<float>> spare_grads_;
};

// --layer_pipeline (sync): forward waits for each layer's pull before the
// layer, and each layer's push (and, ahead, its pull of the next step)
// starts as its backward ends.
class LayerPipelineSchedule : public StepSchedule {
 public:
  explicit LayerPipelineSchedule(StepContext context)
      : StepSchedule(std::move(context)) {
    for (const std::vector<int>& tables : ctx_.model->layer_tables()) {
      layer_masks_.emplace_back(ctx_.values->size(), false);
      for (int t : tables) layer_masks_.back()[t] = true;
    }
  }

  absl::Status Pull(const StepPlan& plan, TransferStats* pull) override {
    if (!layer_pulls_.empty() && ahead_step_ == plan.step) {
      return absl::OkStatus();  // waited for layer by layer in forward
    }
    if (!layer_pulls_.empty()) RETURN_IF_ERROR(Drain());
    return StepSchedule::Pull(plan, pull);
  }

  absl::Status SettlePulls(TransferStats* pull) override {
    for (auto& p : layer_pulls_) {
      if (p != nullptr) RETURN_IF_ERROR(p->Wait(pull));
      p.reset();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<BatchStats> Compute(const StepPlan& plan, TransferStats* pull,
                                     absl::Duration* pull_wait) override;

  absl::Status Push(const StepPlan&, TransferStats* push) override {
    return WaitAll(pushes_, push);
  }

  absl::Status Drain() override {
    for (auto& p : layer_pulls_) {
      if (p != nullptr) p->Wait().IgnoreError();
    }
    layer_pulls_.clear();
    return absl::OkStatus();
  }

 private:
  // Which layer owns `tables` (each layer's are consecutive and its own).
  size_t LayerOf(const std::vector<int>& tables) const {
    const std::vector<std::vector<int>>& layers = ctx_.model->layer_tables();
    size_t i = 0;
    while (layers[i].empty() || layers[i][0] != tables[0]) ++i;
    return i;
  }

  // Each layer's dense tables, as ParamClient's `only` masks.
  std::vector<std::vector<bool>> layer_masks_;
  // The pulls of step ahead_step_ by layer (null: none, or waited for),
  // each started as that layer's gradient was pushed.
  std::vector<std::unique_ptr<Transfer>> layer_pulls_;
  int64_t ahead_step_ = -1;
  // The step's pushes, started layer by layer during backward.
  std::vector<std::unique_ptr<Transfer>> pushes_;
};

absl::StatusOr<BatchStats> LayerPipelineSchedule::Compute(
    const StepPlan& plan, TransferStats* pull, absl::Duration* pull_wait) {
  const size_t num_layers = ctx_.model->layer_tables().size();
  std::vector<std::unique_ptr<Transfer>> next(num_layers);
  Model::LayerHooks hooks;
  hooks.before_forward = [&](const std::vector<int>& tables) {
    const size_t i = LayerOf(tables);
    if (i >= layer_pulls_.size() || layer_pulls_[i] == nullptr) {
      return absl::OkStatus();
    }
    const absl::Time t = absl::Now();
    TransferStats got;
    absl::Status s = layer_pulls_[i]->Wait(&got);
    layer_pulls_[i].reset();
    *pull_wait += absl::Now() - t;
    pull->bytes += got.bytes;
    pull->server_wait_us = std::max(pull->server_wait_us, got.server_wait_us);
    return s;
  };
  hooks.after_backward = [&](const std::vector<int>& tables) {
    const size_t i = LayerOf(tables);
    ASSIGN_OR_RETURN(std::unique_ptr<Transfer> p,
                     StartPush(plan.tag, &layer_masks_[i]));
    pushes_.push_back(std::move(p));
    if (plan.prefetch) {
      // Answered once every trainer's push of this layer is applied: the
      // layers below do not read its values in this step.
      const int64_t n = plan.step + 1;
      next[i] =
          ctx_.params->StartPull(n, n, *ctx_.values, 0, 0, &layer_masks_[i]);
    }
    return absl::OkStatus();
  };
  const TrainerOptions& o = *ctx_.options;
  absl::StatusOr<BatchStats> bs =
      ctx_.model->TrainBatch(ctx_.input->x(), ctx_.input->labels(),
                             o.batch_size, ctx_.input->input_grad(), &hooks);
  for (auto& p : layer_pulls_) {  // not reached by a failed forward
    if (p != nullptr) p->Wait().IgnoreError();
  }
  layer_pulls_.clear();
  if (plan.prefetch) {
    layer_pulls_ = std::move(next);
    ahead_step_ = plan.step + 1;
  }
  if (!bs.ok()) {
    ctx_.cancel_if_fatal(bs.status());
    TransferStats unused;
    WaitAll(pushes_, &unused).IgnoreError();
    Drain().IgnoreError();
  }
  return bs;
}

}  // namespace

std::unique_ptr<StepSchedule> StepSchedule::Create(StepContext context) {
  const TrainerOptions& o = *context.options;
  const bool sync = o.mode == SYNC;
  if (sync && o.overlap && o.layer_pipeline && context.sharing == nullptr &&
      o.replicas_to_aggregate == 0 && !context.input->has_sparse_table()) {
    return std::make_unique<LayerPipelineSchedule>(std::move(context));
  }
  if (!sync && o.async_prefetch) {
    return std::make_unique<AsyncPrefetchSchedule>(std::move(context));
  }
  // Async overlap needs a model without a sparse table: its rows are
  // pushed first, and the pserver's clock of this trainer would count the
  // step before the dense push was applied.
  if (sync ? o.overlap
           : o.async_overlap && !context.input->has_sparse_table()) {
    return std::make_unique<OverlapSchedule>(std::move(context));
  }
  return absl::WrapUnique(new StepSchedule(std::move(context)));
}

absl::Status StepSchedule::Pull(const StepPlan& plan, TransferStats* pull) {
  return ctx_.params->Pull(plan.min_version, plan.step, *ctx_.values, pull);
}

absl::StatusOr<BatchStats> StepSchedule::Compute(const StepPlan&,
                                                 TransferStats*,
                                                 absl::Duration*) {
  return ctx_.model->TrainBatch(ctx_.input->x(), ctx_.input->labels(),
                                ctx_.options->batch_size,
                                ctx_.input->input_grad());
}

absl::Status StepSchedule::Push(const StepPlan& plan, TransferStats* push) {
  const absl::Time start = absl::Now();
  ComputeUpdates(plan);
  ASSIGN_OR_RETURN(std::unique_ptr<Transfer> pushing, StartPush(plan.tag));
  push->prepare_us += absl::ToInt64Microseconds(absl::Now() - start);
  TransferStats this_push;
  absl::Status s = pushing->Wait(&this_push);
  push->bytes += this_push.bytes;
  return s;
}

void StepSchedule::ComputeUpdates(const StepPlan& plan) {
  if (ctx_.sharing != nullptr) {
    ctx_.sharing->ComputeUpdates(plan.step, *ctx_.grads);
  }
}

absl::StatusOr<std::unique_ptr<Transfer>> StepSchedule::StartPush(
    int64_t tag, const std::vector<bool>* only) {
  UpdateSharing* sharing = ctx_.sharing;
  ASSIGN_OR_RETURN(
      std::unique_ptr<Transfer> pushing,
      ctx_.params->StartPush(
          tag, sharing != nullptr ? sharing->updates() : *ctx_.grads, only));
  if (sharing != nullptr) sharing->MaskSent(*ctx_.params->threshold_encoder());
  return pushing;
}

absl::Status StepSchedule::WaitAll(
    std::vector<std::unique_ptr<Transfer>>& transfers, TransferStats* stats) {
  absl::Status s;
  for (auto& t : transfers) {
    TransferStats one;
    s.Update(t->Wait(&one));
    stats->bytes += one.bytes;
    stats->server_wait_us = std::max(stats->server_wait_us, one.server_wait_us);
  }
  transfers.clear();
  return s;
}

}  // namespace shardps
