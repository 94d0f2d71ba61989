// Trainer's step (Trainer::Step) and the transfers around it: the whole
// model's pull and push, or layer by layer (--layer_pipeline).
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "trainer/trainer.h"

namespace shardps {

bool Trainer::LayerPipeline() const {
  return sync() && options_.overlap && options_.layer_pipeline &&
         sharing_ == nullptr && options_.replicas_to_aggregate == 0 &&
         !input_->has_sparse_table();
}

absl::StatusOr<BatchStats> Trainer::TrainLayered(
    int64_t tag, bool prefetch, TransferStats* pull, absl::Duration* pull_wait,
    std::vector<std::unique_ptr<DenseTransfer>>* pushes) {
  const std::vector<std::vector<int>>& layers = model_->layer_tables();
  if (layer_masks_.empty()) {
    for (const std::vector<int>& tables : layers) {
      layer_masks_.emplace_back(values_.size(), false);
      for (int t : tables) layer_masks_.back()[t] = true;
    }
  }
  auto add = [](const TransferStats& s, TransferStats* to) {
    to->bytes += s.bytes;
    to->server_wait_us = std::max(to->server_wait_us, s.server_wait_us);
  };
  // Which layer owns `tables` (each layer's are consecutive and its own).
  auto layer_of = [&layers](const std::vector<int>& tables) {
    size_t i = 0;
    while (layers[i].empty() || layers[i][0] != tables[0]) ++i;
    return i;
  };
  std::vector<std::unique_ptr<DenseTransfer>> next(layers.size());
  Model::LayerHooks hooks;
  hooks.before_forward = [&](const std::vector<int>& tables) {
    const size_t i = layer_of(tables);
    if (i >= layer_pulls_.size() || layer_pulls_[i] == nullptr) {
      return absl::OkStatus();
    }
    const absl::Time t = absl::Now();
    TransferStats got;
    absl::Status s = layer_pulls_[i]->Wait(&got);
    layer_pulls_[i].reset();
    *pull_wait += absl::Now() - t;
    add(got, pull);
    return s;
  };
  hooks.after_backward = [&](const std::vector<int>& tables) {
    const size_t i = layer_of(tables);
    ASSIGN_OR_RETURN(std::unique_ptr<DenseTransfer> p,
                     params_->StartPush(tag, grads_, &layer_masks_[i]));
    pushes->push_back(std::move(p));
    if (prefetch) {
      // Answered once every trainer's push of this layer is applied: the
      // layers below do not read its values in this step.
      next[i] = params_->StartPull(step_ + 1, step_ + 1, values_, 0, 0,
                                   &layer_masks_[i]);
    }
    return absl::OkStatus();
  };
  absl::StatusOr<BatchStats> bs =
      model_->TrainBatch(input_->x(), input_->labels(), options_.batch_size,
                         input_->input_grad(), &hooks);
  for (auto& p : layer_pulls_) {  // not reached by a failed forward
    if (p != nullptr) p->Wait().IgnoreError();
  }
  layer_pulls_.clear();
  if (prefetch) {
    layer_pulls_ = std::move(next);
    next_pull_step_ = step_ + 1;
  }
  if (!bs.ok()) {
    CancelIfFatal(bs.status());
    TransferStats unused;
    WaitAll(*pushes, &unused).IgnoreError();
    DrainTransfers().IgnoreError();
  }
  return bs;
}

absl::Status Trainer::PushDense(int64_t tag, bool prefetch_next,
                                TransferStats* push) {
  if (sharing_ != nullptr) sharing_->ComputeUpdates(step_, grads_);
  if (push_in_flight_ != nullptr) {
    // Async: at most one push in flight; the previous one ends here.
    RETURN_IF_ERROR(push_in_flight_->Wait(push));
    push_in_flight_.reset();
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<DenseTransfer> pushing,
      params_->StartPush(tag,
                         sharing_ != nullptr ? sharing_->updates() : grads_));
  if (sharing_ != nullptr) sharing_->MaskSent(*params_->threshold_encoder());
  if (prefetch_next) {
    // The pserver answers it once this step is applied: sync, every
    // trainer's push (min_version); async, this trainer's (own_clock).
    next_pull_ = sync() ? params_->StartPull(step_ + 1, step_ + 1, values_)
                        : params_->StartPull(0, step_ + 1, values_, 0,
                                             /*own_clock=*/step_ + 1);
    next_pull_step_ = step_ + 1;
  }
  if (options_.async_prefetch && !sync()) {
    // Async: the next step does not wait for this push; its gradient
    // buffer stays untouched until the push has ended.
    push_in_flight_ = std::move(pushing);
    SwapGradients();
    return absl::OkStatus();
  }
  TransferStats this_push;
  absl::Status s = pushing->Wait(&this_push);
  push->bytes += this_push.bytes;
  return s;
}

absl::Status Trainer::WaitAll(
    std::vector<std::unique_ptr<DenseTransfer>>& transfers,
    TransferStats* stats) {
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

absl::Status Trainer::Step(int pass, int64_t index) {
  const TrainerOptions& o = options_;
  const int64_t min_version = sync() ? step_ : 0;
  const absl::Time t0 = absl::Now();
  input_->LoadTrainBatch(index, o.batch_size);
  const absl::Time t1 = absl::Now();
  TransferStats pull, sparse_pull;
  const bool layered = LayerPipeline();
  if (layered && !layer_pulls_.empty() && next_pull_step_ == step_) {
    // Waited for layer by layer in forward (TrainLayered).
  } else if (next_pull_ != nullptr && next_pull_step_ == step_) {
    absl::Status s = next_pull_->Wait(&pull);
    next_pull_.reset();
    RETURN_IF_ERROR(s);
    if (o.async_prefetch) SwapInPrefetched();
  } else {
    if (next_pull_ != nullptr || !layer_pulls_.empty()) {
      RETURN_IF_ERROR(DrainTransfers());
    }
    RETURN_IF_ERROR(params_->Pull(min_version, step_, values_, &pull));
  }
  RETURN_IF_ERROR(
      input_->PullRows(sparse_.get(), min_version, step_, &sparse_pull));
  pull.bytes += sparse_pull.bytes;
  pull.server_wait_us =
      std::max(pull.server_wait_us, sparse_pull.server_wait_us);
  // The chief asks for checkpoints between its pull and its push of a
  // step: in sync mode no block can move then (every layer's pull ended).
  if (checkpoints_->DueAt(step_)) {
    for (auto& p : layer_pulls_) {
      if (p != nullptr) RETURN_IF_ERROR(p->Wait(&sparse_pull));
      p.reset();
    }
  }
  RETURN_IF_ERROR(checkpoints_->AtStep(step_));
  // With replicas_to_aggregate the step may have gone ahead without this
  // trainer: tag the push with the version it computed on.
  const int64_t tag = sync() && o.replicas_to_aggregate > 0
                          ? std::max(step_, pull.min_version)
                          : step_;
  // The next step's parameters are fetched ahead unless it starts a pass
  // (which begins with an evaluation) or there is none. Async overlap
  // needs a model without a sparse table: its rows are pushed first, and
  // the pserver's clock of this trainer would count the step before the
  // dense push was applied.
  const bool overlap =
      sync() ? o.overlap : o.async_overlap && !input_->has_sparse_table();
  const bool prefetch = (overlap || o.async_prefetch) &&
                        step_ + 1 < total_steps_ &&
                        (step_ + 1) % steps_per_pass_ != 0;
  if (prefetch && o.async_prefetch) {
    // Async: during this step's compute, into buffers of their own.
    next_pull_ = params_->StartPull(0, step_ + 1, prefetched_ptrs_);
    next_pull_step_ = step_ + 1;
  }
  const absl::Time t2 = absl::Now();
  model_->SetDropoutStream(static_cast<uint64_t>(o.trainer_id) + 1, step_);
  absl::Duration pull_wait;  // forward waiting for layers' pulls
  std::vector<std::unique_ptr<DenseTransfer>> layer_pushes;
  absl::StatusOr<BatchStats> trained =
      layered ? TrainLayered(tag, prefetch, &pull, &pull_wait, &layer_pushes)
              : model_->TrainBatch(input_->x(), input_->labels(), o.batch_size,
                                   input_->input_grad());
  RETURN_IF_ERROR(trained.status());
  const BatchStats& bs = *trained;
  const absl::Time t3 = absl::Now();
  // Sparse rows first: a pserver that has a trainer's dense push for a
  // step then also has its sparse push (the async final evaluation relies
  // on it).
  TransferStats push, sparse_push;
  RETURN_IF_ERROR(input_->PushRows(sparse_.get(), tag, sync(), &sparse_push));
  absl::Status pushed = layered ? WaitAll(layer_pushes, &push)
                                : PushDense(tag, prefetch && overlap, &push);
  if (!pushed.ok()) {
    CancelIfFatal(pushed);
    DrainTransfers().IgnoreError();
    return pushed;
  }
  if (!lars_tables_.empty()) {
    pushed = params_->ExchangeTableNorms(tag, lars_tables_);
    if (!pushed.ok()) {
      CancelIfFatal(pushed);
      DrainTransfers().IgnoreError();
      return pushed;
    }
  }
  push.bytes += sparse_push.bytes;
  const absl::Time t4 = absl::Now();
  ++step_;
  pull_bytes_ += pull.bytes;
  push_bytes_ += push.bytes;
  const absl::Duration wait = absl::Microseconds(pull.server_wait_us);
  const absl::Duration pulling = (t2 - t1) + pull_wait;
  StepTimes times;
  times.data = t1 - t0;
  times.pull = std::max(absl::ZeroDuration(), pulling - wait);
  times.wait = std::min(wait, pulling);
  times.compute = (t3 - t2) - pull_wait;
  times.push = t4 - t3;
  train_time_ += t4 - t0;
  progress_->StepDone(step_, pass, times, bs.loss_sum, bs.count, push_bytes_,
                      pull_bytes_, params_->threshold_encoder());
  if (o.observer != nullptr) {
    o.observer->StepDone(StepReport{step_, pass, times, bs.loss_sum, bs.count,
                                    push.bytes, pull.bytes});
  }
  return absl::OkStatus();
}

}  // namespace shardps
