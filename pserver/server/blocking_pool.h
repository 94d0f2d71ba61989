#ifndef SHARDPS_PSERVER_SERVER_BLOCKING_POOL_H_
#define SHARDPS_PSERVER_SERVER_BLOCKING_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace shardps {

// Threads for calls that wait on other pservers (a replicated job's pushes
// wait for their backups; a view change for a majority): run on gRPC's
// callback threads, a ring of pservers each waiting on the next would
// leave none to answer. Runs tasks in order of arrival on `threads`
// threads; the destructor runs what is queued, then joins. What waits in
// the queue is bounded by the bytes of the requests it holds. Thread-safe.
class BlockingPool {
 public:
  BlockingPool(int threads, size_t max_queued_bytes);
  ~BlockingPool();
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  // Queues `task`, which holds `bytes` of requests until it has run; false
  // (nothing queued) when that would pass max_queued_bytes.
  bool TrySchedule(std::function<void()> task, size_t bytes);

 private:
  void Run();

  absl::Mutex mu_;
  const size_t max_queued_bytes_;
  std::deque<std::pair<std::function<void()>, size_t>> queue_
      ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVER_BLOCKING_POOL_H_
