#ifndef SHARDPS_PSERVER_STORE_STEP_MEMBERSHIP_H_
#define SHARDPS_PSERVER_STORE_STEP_MEMBERSHIP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// A request's generation that is not checked (tests, in-process callers).
inline constexpr uint64_t kAnyGeneration = ~uint64_t{0};

// The trainers of a job as one pserver sees them (docs/fault_tolerance.md):
// registration and incarnations, heartbeats, drops after --trainer_timeout,
// Leave, and the timeline (generation) the pserver is on.
//
// Every trainer is expected from step 0 (or the restored step) until it
// leaves or is dropped. A Register by a trainer known under another
// incarnation, or by one that was dropped or left, is a rejoin: the sync
// barrier then waits for it from `next_step` (the step after the newest one
// the pserver holds) until ConfirmJoin moves that to the job-wide start
// step.
//
// Thread-safe. Queries on the push and pull paths (Required, Live,
// CheckIncarnation, CheckGeneration) read atomics; transitions take mu_.
// Transitions that change whom a sync step waits for (a rejoin, ConfirmJoin,
// Leave, DropSilent, Restore) must run while no push is half-way through:
// ParameterStore calls them under its gate held exclusively.
class Membership {
 public:
  Membership(int num_trainers, bool sync);

  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  int num_trainers() const { return num_trainers_; }

  // --- Lock-free queries.

  // Whether the sync step that brings a unit to `version` + 1 waits for
  // trainer k.
  bool Required(int k, int64_t version) const {
    return version >= required_from_[k].load(std::memory_order_acquire);
  }
  // Not dropped and not gone.
  bool Live(int k) const {
    return required_from_[k].load(std::memory_order_acquire) != INT64_MAX;
  }
  std::vector<int> LiveTrainers() const;
  // INVALID_ARGUMENT unless 0 <= k < the job's trainer count.
  absl::Status CheckTrainerId(int k) const;
  // FAILED_PRECONDITION when `incarnation` is not 0 and trainer k is now
  // known under another one: a process replaced by a restarted one must not
  // push or pull for it. OK for an id out of range (checked elsewhere).
  absl::Status CheckIncarnation(int k, uint64_t incarnation) const;
  // SYNC: ABORTED, naming `what` ("push", "pull", "checkpoint"), when
  // `generation` is neither kAnyGeneration nor the pserver's.
  absl::Status CheckGeneration(absl::string_view what,
                               uint64_t generation) const;
  uint64_t generation() const { return generation_.load(); }
  // A rejoining replica takes its primary's timeline.
  void AdoptGeneration(uint64_t generation) { generation_.store(generation); }
  int64_t base_step() const { return base_step_.load(); }

  // --- Transitions.

  // Marks trainer k heard from at `now` (any pull or push); the trainer id
  // is checked, and a dropped trainer is told so (FAILED_PRECONDITION).
  absl::Status Touch(int k, absl::Time now);

  struct Registration {
    // SYNC: the first step whose barrier waits for the trainer; ASYNC: the
    // step it resumes at (its clock).
    int64_t join_step = 0;
    bool rejoined = false;  // the barrier's waiting set changed
  };
  // Registers trainer k (checked in range). `next_step`: SYNC, the step
  // after the newest one any unit holds (a rejoin's join step);
  // `async_clock`: ASYNC, the steps trainer k has pushed.
  Registration Register(int k, uint64_t incarnation, absl::Time now,
                        int64_t next_step, int64_t async_clock);
  // Moves a rejoined trainer's first step to `start_step` (the largest
  // join_step over all pservers); *changed tells whether it moved.
  absl::Status ConfirmJoin(int k, uint64_t incarnation, int64_t start_step,
                           bool* changed);
  // Keeps trainer k alive; a stale incarnation or a dropped trainer is told
  // so with FAILED_PRECONDITION.
  absl::Status Heartbeat(int k, uint64_t incarnation, absl::Time now);
  // Takes trainer k out of the barrier; *changed is false when it had left
  // already.
  absl::Status Leave(int k, uint64_t incarnation, bool* changed);
  // Trainer k, which has left as `incarnation`, has evaluated the final
  // parameters and calls nothing more (LeaveRequest.finished): listed by
  // FinishedTrainers until it registers again. FAILED_PRECONDITION unless
  // it has left so. Changes no barrier.
  absl::Status MarkFinished(int k, uint64_t incarnation);
  std::vector<int> FinishedTrainers() const;
  // Whether an active trainer has been silent for `timeout` as of `now`.
  bool HasSilent(absl::Time now, absl::Duration timeout) const;
  // Drops every active trainer silent for `timeout` as of `now`, logging
  // each; returns how many.
  int DropSilent(absl::Time now, absl::Duration timeout);
  // Drops active trainer k, which heartbeats but has not sent its part of
  // step `step` for `waited` while the others wait; returns whether it was
  // active.
  bool DropStalling(int k, int64_t step, absl::Duration waited);

  // Checkpoints: the trainers that left or were dropped.
  void AddTo(CheckpointInfo* info) const;
  // Loads the timeline of a checkpoint of step `step` as `generation`.
  // `restarted`: a pserver starting from its checkpoint, which takes every
  // trainer as alive at `now` (incarnation unknown) except those the
  // checkpoint lists as gone. Every trainer still in the job redoes the
  // steps from `step`.
  void Restore(const CheckpointInfo& info, uint64_t generation, bool restarted,
               absl::Time now);

  int64_t dropped() const { return dropped_.load(); }
  int64_t rejoined() const { return rejoined_.load(); }

 private:
  enum class State : uint8_t { kExpected, kActive, kDropped, kLeft };
  struct Member {
    State state = State::kExpected;
    uint64_t incarnation = 0;
    bool finished = false;  // LeaveRequest.finished, until a new Register
  };

  // How long active trainer k has been silent as of `now` (zero when it is
  // not active).
  absl::Duration Silence(int k, absl::Time now) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Copies members_[k] into active_incarnation_[k].
  void Publish(int k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static absl::Status DroppedError(int k);

  const int num_trainers_;
  const bool sync_;

  mutable absl::Mutex mu_;
  std::vector<Member> members_ ABSL_GUARDED_BY(mu_);
  // required_from_[k]: the first version whose step waits for trainer k
  // (INT64_MAX when it was dropped or left); written under mu_.
  std::unique_ptr<std::atomic<int64_t>[]> required_from_;
  // last_seen_us_[k]: its last word, Unix microseconds.
  std::unique_ptr<std::atomic<int64_t>[]> last_seen_us_;
  // active_incarnation_[k]: trainer k's incarnation while it is active and
  // known, else 0; a lock-free copy of members_ for CheckIncarnation.
  std::unique_ptr<std::atomic<uint64_t>[]> active_incarnation_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> base_step_{0};
  std::atomic<int64_t> dropped_{0}, rejoined_{0};
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_STEP_MEMBERSHIP_H_
