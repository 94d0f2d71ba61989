#ifndef SHARDPS_PSERVER_SERVICE_REQUEST_DEDUP_H_
#define SHARDPS_PSERVER_SERVICE_REQUEST_DEDUP_H_

#include <cstdint>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace shardps {

// Remembers the outcome of the most recent requests by request_id, so that a
// retried push is applied once and answered as the first one was (after
// TensorFlow's RecentRequestIds; we answer a finished duplicate with its
// first status rather than ABORTED, because a client that retries after a
// lost reply must not see an error). Bounded: the oldest ids are forgotten.
// Thread-safe.
class RequestDedup {
 public:
  explicit RequestDedup(size_t capacity = 1 << 16) : capacity_(capacity) {}

  enum class Outcome {
    kNew,       // first time: process it, then call Finish
    kDone,      // seen and finished: answer with *first_status
    kInFlight,  // seen, still being processed: answer UNAVAILABLE to retry
  };
  Outcome Begin(uint64_t request_id, absl::Status* first_status);
  // REQUIRES: Begin(request_id) returned kNew.
  void Finish(uint64_t request_id, const absl::Status& status);

  size_t size() const;

 private:
  struct Entry {
    bool done = false;
    absl::Status status;
  };
  const size_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> order_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVICE_REQUEST_DEDUP_H_
