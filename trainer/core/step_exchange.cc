#include "trainer/core/step_exchange.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

absl::Status Bad(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

}  // namespace

StepExchange::StepExchange(Tables tables, bool sync, ParamClient* params,
                           SparseClient* sparse,
                           CheckpointRequester* checkpoints,
                           UpdateSharing* sharing)
    : tables_(std::move(tables)),
      sync_(sync),
      params_(params),
      sparse_(sparse),
      checkpoints_(checkpoints),
      sharing_(sharing),
      queued_(tables_.sparse_dims.size()),
      sent_early_(tables_.dense_names.size(), false) {}

absl::Status StepExchange::QueueSparse(int table,
                                       absl::Span<const uint64_t> keys,
                                       absl::Span<const float> grads) {
  if (table < 0 || table >= static_cast<int>(queued_.size())) {
    return Bad(absl::StrCat("no sparse table ", table));
  }
  const size_t dim = tables_.sparse_dims[table];
  if (grads.size() != keys.size() * dim) {
    return Bad(absl::StrCat("sparse table ", tables_.sparse_names[table], ": ",
                            grads.size(), " gradient values for ", keys.size(),
                            " keys of dim ", dim));
  }
  QueuedRows& q = queued_[table];
  q.keys.insert(q.keys.end(), keys.begin(), keys.end());
  q.grads.insert(q.grads.end(), grads.begin(), grads.end());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SparseTransfer>> StepExchange::Fetches(
    const std::vector<SparseFetch>& fetch) const {
  std::vector<SparseTransfer> t;
  for (const SparseFetch& f : fetch) {
    if (f.table < 0 || f.table >= static_cast<int>(queued_.size())) {
      return Bad(absl::StrCat("no sparse table ", f.table));
    }
    t.push_back({static_cast<uint32_t>(num_dense() + f.table),
                 tables_.sparse_dims[f.table], f.keys, f.rows, nullptr});
  }
  return t;
}

absl::Status StepExchange::PushDenseEarly(int64_t step, int table,
                                          const float* grad) {
  if (table < 0 || table >= num_dense()) {
    return Bad(absl::StrCat("no dense table ", table));
  }
  const std::string& name = tables_.dense_names[table];
  if (sharing_ != nullptr || !tables_.lars.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("pushing table ", name, " ahead of the step's end: ",
                     sharing_ != nullptr ? "--compression=threshold" : "LARS",
                     " needs every table's gradient at once"));
  }
  if (sent_early_[table]) {
    return Bad(absl::StrCat("table ", name,
                            ": its gradient was pushed already at step ", step,
                            " (a second backward in one step?)"));
  }
  sent_early_[table] = true;
  if (!early_error_.ok()) return absl::OkStatus();  // End reports it
  // The chief asks for the step's checkpoint before any of its blocks can
  // move.
  if (early_.empty()) early_error_ = checkpoints_->AtStep(step);
  if (!early_error_.ok()) return absl::OkStatus();
  std::vector<const float*> grads(num_dense(), nullptr);
  std::vector<bool> only(num_dense(), false);
  grads[table] = grad;
  only[table] = true;
  absl::StatusOr<std::unique_ptr<Transfer>> t =
      params_->StartPush(step, grads, &only);
  if (!t.ok()) {
    early_error_ = t.status();
    return absl::OkStatus();
  }
  early_.push_back(*std::move(t));
  return absl::OkStatus();
}

absl::Status StepExchange::AwaitEarlyPushes(TransferStats* push) {
  absl::Status first;
  for (std::unique_ptr<Transfer>& t : early_) {
    TransferStats s;
    absl::Status st = t->Wait(&s);
    if (first.ok()) first = st;
    push->bytes += s.bytes;
  }
  early_.clear();
  std::fill(sent_early_.begin(), sent_early_.end(), false);
  return first;
}

void StepExchange::Drop() {
  for (QueuedRows& q : queued_) {
    q.keys.clear();
    q.grads.clear();
  }
  TransferStats dropped;
  AwaitEarlyPushes(&dropped).IgnoreError();
  early_error_ = absl::OkStatus();
}

absl::Status StepExchange::PushQueuedSparse(int64_t step,
                                            TransferStats* stats) {
  if (queued_.empty()) return absl::OkStatus();
  std::vector<SparseTransfer> t;
  for (size_t i = 0; i < queued_.size(); ++i) {
    const QueuedRows& q = queued_[i];
    t.push_back({static_cast<uint32_t>(num_dense() + i), tables_.sparse_dims[i],
                 q.keys, nullptr, q.grads.data()});
  }
  absl::Status s = sparse_->Push(step, sync_, t, stats);
  for (QueuedRows& q : queued_) {
    q.keys.clear();
    q.grads.clear();
  }
  return s;
}

absl::Status StepExchange::PushDense(int64_t step,
                                     const std::vector<const float*>& grads,
                                     const std::vector<float*>* next_values,
                                     TransferStats* push, TransferStats* pull) {
  std::vector<const float*> sent = grads;
  if (sharing_ != nullptr) {
    sharing_->ComputeUpdates(step, grads);
    sent = sharing_->updates();
  }
  // The tables PushDenseEarly has not sent.
  std::vector<bool> rest(num_dense(), true);
  for (int t = 0; t < num_dense(); ++t) rest[t] = !sent_early_[t];
  absl::StatusOr<std::unique_ptr<Transfer>> pushing =
      params_->StartPush(step, sent, early_.empty() ? nullptr : &rest);
  if (sharing_ != nullptr && pushing.ok()) {
    sharing_->MaskSent(*params_->threshold_encoder());
  }
  // SYNC: the next values are asked for with the push, and answered once
  // every trainer's push of this step is applied.
  std::unique_ptr<Transfer> pulling;
  if (pushing.ok() && next_values != nullptr && sync_ && tables_.lars.empty()) {
    pulling = params_->StartPull(step + 1, step + 1, *next_values);
  }
  absl::Status st = pushing.ok() ? (*pushing)->Wait(push) : pushing.status();
  absl::Status e = AwaitEarlyPushes(push);
  if (st.ok()) st = e;
  if (st.ok() && !tables_.lars.empty()) {
    st = params_->ExchangeTableNorms(step, tables_.lars);
  }
  if (pulling != nullptr) {
    absl::Status p = pulling->Wait(pull);
    if (st.ok()) st = p;
  } else if (st.ok() && next_values != nullptr) {
    st = params_->Pull(sync_ ? step + 1 : 0, step + 1, *next_values, pull);
  }
  return st;
}

absl::Status StepExchange::End(int64_t step,
                               const std::vector<const float*>& grads,
                               const std::vector<float*>* next_values,
                               const std::vector<SparseTransfer>& next_rows,
                               TransferStats* push, TransferStats* pull) {
  // Asked already at the first early push, if any (then a no-op).
  absl::Status st =
      early_error_.ok() ? checkpoints_->AtStep(step) : early_error_;
  // SYNC: the next rows are asked for first; the pservers answer once every
  // trainer's push of this step is applied. ASYNC: once this trainer's
  // sparse push is.
  std::unique_ptr<Transfer> fetching;
  if (st.ok() && sync_ && !next_rows.empty()) {
    fetching = sparse_->StartPull(step + 1, step + 1, next_rows);
  }
  if (st.ok()) st = PushQueuedSparse(step, push);
  if (st.ok() && !sync_ && !next_rows.empty()) {
    fetching = sparse_->StartPull(0, step + 1, next_rows);
  }
  if (st.ok()) {
    TransferStats sparse_push = *push;
    st = PushDense(step, grads, next_values, push, pull);
    push->bytes += sparse_push.bytes;
  }
  if (fetching != nullptr) {
    TransferStats rows;
    absl::Status f = fetching->Wait(&rows);
    if (st.ok()) st = f;
    pull->bytes += rows.bytes;
    pull->server_wait_us = std::max(pull->server_wait_us, rows.server_wait_us);
  }
  if (!st.ok()) Drop();
  early_error_ = absl::OkStatus();
  return st;
}

}  // namespace shardps
