#include "trainer/transport/retry_timer.h"

#include <vector>

namespace shardps {

RetryTimer::RetryTimer() : thread_([this] { Loop(); }) {}

RetryTimer::~RetryTimer() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void RetryTimer::Schedule(absl::Time when, std::function<void()> fn) {
  absl::MutexLock l(&mu_);
  queue_.emplace(when, std::move(fn));
}

void RetryTimer::Loop() {
  while (true) {
    std::vector<std::function<void()>> due;
    {
      absl::MutexLock l(&mu_);
      auto wake = [this] {
        mu_.AssertHeld();
        return stop_ ||
               (!queue_.empty() && queue_.begin()->first <= absl::Now());
      };
      const absl::Time deadline =
          queue_.empty() ? absl::Now() + absl::Milliseconds(100)
                         : std::min(queue_.begin()->first,
                                    absl::Now() + absl::Milliseconds(100));
      mu_.AwaitWithDeadline(absl::Condition(&wake), deadline);
      const absl::Time now = absl::Now();
      while (!queue_.empty() && (stop_ || queue_.begin()->first <= now)) {
        due.push_back(std::move(queue_.begin()->second));
        queue_.erase(queue_.begin());
      }
      if (stop_ && due.empty()) return;
    }
    for (auto& fn : due) fn();
  }
}

}  // namespace shardps
