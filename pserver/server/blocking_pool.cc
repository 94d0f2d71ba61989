#include "pserver/server/blocking_pool.h"

#include <utility>

namespace shardps {

BlockingPool::BlockingPool(int threads, size_t max_queued_bytes)
    : max_queued_bytes_(max_queued_bytes) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

BlockingPool::~BlockingPool() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool BlockingPool::TrySchedule(std::function<void()> task, size_t bytes) {
  absl::MutexLock l(&mu_);
  if (queued_bytes_ + bytes > max_queued_bytes_ && !queue_.empty()) {
    return false;
  }
  queued_bytes_ += bytes;
  queue_.emplace_back(std::move(task), bytes);
  return true;
}

void BlockingPool::Run() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;
      task = std::move(queue_.front().first);
      queued_bytes_ -= queue_.front().second;
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace shardps
