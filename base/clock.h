#ifndef SHARDPS_BASE_CLOCK_H_
#define SHARDPS_BASE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shardps {

// The time seam, beside the file-system one (common/storage/env.h): code that
// times something out, drops a silent trainer or measures a wait asks a Clock,
// so that tests move time by hand instead of sleeping. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // absl::Now(). Never deleted; the same object on every call.
  static const Clock* Real();
};

// A clock that moves only when told. Thread-safe.
class FakeClock : public Clock {
 public:
  // Starts at `start` (default: 2026-01-01 UTC, any fixed time will do).
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1767225600))
      : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock l(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock l(&mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    absl::MutexLock l(&mu_);
    now_ = t;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

inline const Clock* Clock::Real() {
  class RealClock final : public Clock {
   public:
    absl::Time Now() const override { return absl::Now(); }
  };
  static const RealClock* const clock = new RealClock;
  return clock;
}

}  // namespace shardps

#endif  // SHARDPS_BASE_CLOCK_H_
