#ifndef SHARDPS_PSERVER_SERVICE_REPLY_GATE_H_
#define SHARDPS_PSERVER_SERVICE_REPLY_GATE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace shardps {

// Bounds the bytes of replies a pserver has built and its clients have not
// read yet. A pull's reply stays in the pserver's memory until the client
// reads it (gRPC sends no faster than the client's HTTP/2 window lets it):
// issue 34's audit pulled 4 MiB blocks over a connection whose reader had
// stopped and took a pserver to 2.6 GiB resident. Behind the gate, a pull
// starts only while the replies held are under `max_bytes`; later ones
// wait, in order, and start as replies are read. A client that stops
// reading then holds at most about `max_bytes` (plus the replies of the
// pulls that had already started when it was reached), and stalls other
// pulls until it reads or its connection closes; it cannot grow the
// pserver's memory. Nothing waits while the replies held are under the
// bound. More than `max_waiting` pulls waiting is refused.
// Plain C++, no gRPC: the gRPC binding holds a reply from Finish() until
// gRPC has released its bytes. Thread-safe.
class ReplyGate {
 public:
  ReplyGate(int64_t max_bytes, size_t max_waiting)
      : max_bytes_(max_bytes), max_waiting_(max_waiting) {}

  ReplyGate(const ReplyGate&) = delete;
  ReplyGate& operator=(const ReplyGate&) = delete;

  // Runs `start` now (on this thread) if the replies held are under the
  // bound and none waits before it; else queues it, to run at the Release()
  // that brings the replies held under the bound. False, and `start`
  // dropped, when max_waiting are waiting already.
  bool Admit(std::function<void()> start) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock l(&mu_);
      if (!waiting_.empty() || held_ >= max_bytes_) {
        if (waiting_.size() >= max_waiting_) return false;
        waiting_.push_back(std::move(start));
        return true;
      }
    }
    start();  // the common case: nothing waits, nothing queued
    return true;
  }

  // A reply of `bytes` is handed to the transport.
  void Hold(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    held_ += bytes;
  }

  // The transport is done with a reply of `bytes` held: the pulls waiting
  // start, on this thread, if the replies held are now under the bound.
  void Release(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_) {
    std::deque<std::function<void()>> ready;
    {
      absl::MutexLock l(&mu_);
      held_ -= bytes;
      TakeReady(&ready);
    }
    for (auto& f : ready) f();
  }

  int64_t held() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return held_;
  }
  size_t waiting() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return waiting_.size();
  }

 private:
  // Under the bound every waiting pull starts: one held back while the
  // others wait on it (a sync pull waits for a push that follows another
  // trainer's pull) would stall the job.
  void TakeReady(std::deque<std::function<void()>>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!waiting_.empty() && held_ < max_bytes_) {
      ready->push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
  }

  const int64_t max_bytes_;
  const size_t max_waiting_;
  mutable absl::Mutex mu_;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::function<void()>> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVICE_REPLY_GATE_H_
