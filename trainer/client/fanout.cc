#include "trainer/client/fanout.h"

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

}  // namespace shardps
