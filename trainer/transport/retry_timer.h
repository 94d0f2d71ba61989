#ifndef SHARDPS_TRAINER_TRANSPORT_RETRY_TIMER_H_
#define SHARDPS_TRAINER_TRANSPORT_RETRY_TIMER_H_

#include <functional>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardps {

// Runs functions at a later time on one background thread (the retries of
// GrpcPsClient). Functions still pending at destruction run then, at once,
// so that no callback is lost. Thread-safe.
class RetryTimer {
 public:
  RetryTimer();
  ~RetryTimer();

  void Schedule(absl::Time when, std::function<void()> fn);

 private:
  void Loop();

  absl::Mutex mu_;
  std::multimap<absl::Time, std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_TRANSPORT_RETRY_TIMER_H_
