#include "pserver/blocking_pool.h"

#include <utility>

namespace shardps {

BlockingPool::BlockingPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

BlockingPool::~BlockingPool() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void BlockingPool::Schedule(std::function<void()> task) {
  absl::MutexLock l(&mu_);
  queue_.push_back(std::move(task));
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
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace shardps
