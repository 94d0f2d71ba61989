#ifndef SHARDPS_PSERVER_BLOCKING_POOL_H_
#define SHARDPS_PSERVER_BLOCKING_POOL_H_

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
// threads; the destructor runs what is queued, then joins. Thread-safe.
class BlockingPool {
 public:
  explicit BlockingPool(int threads);
  ~BlockingPool();
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  void Schedule(std::function<void()> task);

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_BLOCKING_POOL_H_
