#ifndef SHARDPS_PSERVER_SERVER_REPLY_GATE_H_
#define SHARDPS_PSERVER_SERVER_REPLY_GATE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace shardps {

// Bounds the bytes of replies a pserver has built and its clients have not
// read yet. A pull's reply stays in the pserver's memory until the client
// reads it (gRPC sends no faster than the client's HTTP/2 window lets it):
// issue 34's audit pulled 4 MiB blocks over a connection whose reader had
// stopped and took a pserver to 2.6 GiB resident. Behind the gate, a pull
// of job j starts only while the replies held are under `max_bytes` and
// job j's under `max_job_bytes`; later ones wait, in order per job, and
// start as replies are read. A client that stops reading then holds at
// most about `max_job_bytes` (plus the replies of the pulls that had
// already started when it was reached), and stalls its own job's pulls
// until it reads or its connection closes; the other jobs keep
// max_bytes - max_job_bytes, and it cannot grow the pserver's memory.
// Nothing waits while the replies held are under the bounds. More than
// `max_waiting` pulls waiting, over all jobs, is refused.
// Plain C++, no gRPC: the gRPC binding holds a reply from Finish() until
// gRPC has released its bytes. Thread-safe.
class ReplyGate {
 public:
  ReplyGate(int64_t max_bytes, int64_t max_job_bytes, size_t max_waiting)
      : max_bytes_(max_bytes),
        max_job_bytes_(max_job_bytes),
        max_waiting_(max_waiting) {}

  ReplyGate(const ReplyGate&) = delete;
  ReplyGate& operator=(const ReplyGate&) = delete;

  // Runs `start` now (on this thread) if the replies held are under the
  // bounds and none of `job` waits before it; else queues it, to run at
  // the Release() that brings them under. False, and `start` dropped, when
  // max_waiting are waiting already.
  bool Admit(const std::string& job, std::function<void()> start)
      ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock l(&mu_);
      Job& j = jobs_[job];
      if (!j.waiting.empty() || !Room(j)) {
        if (waiting_ >= max_waiting_) {
          Forget(job);
          return false;
        }
        j.waiting.push_back(std::move(start));
        ++waiting_;
        return true;
      }
    }
    start();  // the common case: nothing waits, nothing queued
    return true;
  }

  // A reply of `bytes` for `job` is handed to the transport.
  void Hold(const std::string& job, int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    held_ += bytes;
    jobs_[job].held += bytes;
  }

  // The transport is done with a reply of `bytes` held for `job`: the
  // pulls waiting start, on this thread, where there is room now.
  void Release(const std::string& job, int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_) {
    std::deque<std::function<void()>> ready;
    {
      absl::MutexLock l(&mu_);
      held_ -= bytes;
      jobs_[job].held -= bytes;
      Forget(job);
      TakeReady(&ready);
    }
    for (auto& f : ready) f();
  }

  int64_t held() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return held_;
  }
  int64_t held(const std::string& job) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(job);
    return it == jobs_.end() ? 0 : it->second.held;
  }
  size_t waiting() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return waiting_;
  }

 private:
  struct Job {
    int64_t held = 0;
    std::deque<std::function<void()>> waiting;
  };
  bool Room(const Job& j) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return held_ < max_bytes_ && j.held < max_job_bytes_;
  }
  // A job with nothing held and nothing waiting takes no entry.
  void Forget(const std::string& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(job);
    if (it != jobs_.end() && it->second.held == 0 &&
        it->second.waiting.empty()) {
      jobs_.erase(it);
    }
  }
  // Under the bounds every waiting pull of a job starts: one held back
  // while the others wait on it (a sync pull waits for a push that follows
  // another trainer's pull) would stall the job.
  void TakeReady(std::deque<std::function<void()>>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto& [name, j] : jobs_) {
      while (!j.waiting.empty() && Room(j)) {
        ready->push_back(std::move(j.waiting.front()));
        j.waiting.pop_front();
        --waiting_;
      }
    }
  }

  const int64_t max_bytes_;
  const int64_t max_job_bytes_;
  const size_t max_waiting_;
  mutable absl::Mutex mu_;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  size_t waiting_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVER_REPLY_GATE_H_
