#include "trainer/client/transfer.h"

#include "absl/synchronization/blocking_counter.h"

namespace shardps {

void FirstError::Add(const absl::Status& s) {
  if (s.ok()) return;
  absl::MutexLock l(&mu_);
  if (status_.ok()) status_ = s;
}

absl::Status FirstError::Get() const {
  absl::MutexLock l(&mu_);
  return status_;
}

absl::Status OnEveryServer(
    size_t n, const std::function<void(size_t s, StatusCallback done)>& call) {
  FirstError err;
  absl::BlockingCounter pending(static_cast<int>(n));
  for (size_t s = 0; s < n; ++s) {
    call(s, [&](absl::Status st) {
      err.Add(st);
      pending.DecrementCount();
    });
  }
  pending.Wait();
  return err.Get();
}

absl::Status SendPushes(const std::vector<std::unique_ptr<PendingPush>>& calls,
                        TransferStats* stats) {
  absl::Status st = OnEveryServer(calls.size(), [&](size_t i, auto done) {
    calls[i]->server->PushAsync(calls[i]->req, &calls[i]->resp,
                                std::move(done));
  });
  if (stats != nullptr) {
    *stats = TransferStats{};
    for (const auto& p : calls) {
      stats->bytes += static_cast<int64_t>(p->req.ByteSizeLong());
    }
    stats->rpcs = static_cast<int64_t>(calls.size());
  }
  return st;
}

Transfer::Transfer(int calls) : state_(std::make_shared<State>()) {
  absl::MutexLock l(&state_->mu);
  state_->pending = calls;
}

absl::Status Transfer::Wait(TransferStats* stats) {
  if (run_queued_) {
    while (!Done() && run_queued_()) {
    }
  }
  AwaitCalls();
  if (stats != nullptr) *stats = stats_ ? stats_() : TransferStats{};
  return state_->error.Get();
}

void Transfer::AwaitCalls() {
  State& st = *state_;
  absl::MutexLock l(&st.mu);
  st.mu.Await(absl::Condition(
      +[](State* s)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->pending == 0; },
      &st));
}

bool Transfer::Done() const {
  absl::MutexLock l(&state_->mu);
  return state_->pending == 0;
}

StatusCallback Transfer::OneDone() {
  return [state = state_](absl::Status s) {
    state->error.Add(s);
    absl::MutexLock l(&state->mu);
    --state->pending;
  };
}

}  // namespace shardps
