#include "pserver/store/step/membership.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace shardps {

Membership::Membership(int num_trainers, bool sync)
    : num_trainers_(num_trainers),
      sync_(sync),
      members_(num_trainers),
      required_from_(new std::atomic<int64_t>[num_trainers]),
      last_seen_us_(new std::atomic<int64_t>[num_trainers]),
      active_incarnation_(new std::atomic<uint64_t>[num_trainers]) {
  for (int k = 0; k < num_trainers; ++k) {
    required_from_[k].store(0);
    last_seen_us_[k].store(0);
    active_incarnation_[k].store(0);
  }
}

std::vector<int> Membership::LiveTrainers() const {
  std::vector<int> live;
  for (int k = 0; k < num_trainers_; ++k) {
    if (Live(k)) live.push_back(k);
  }
  return live;
}

absl::Status Membership::CheckTrainerId(int k) const {
  if (k < 0 || k >= num_trainers_) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer_id ", k, " is out of range: the job has ",
                     num_trainers_, " trainers"));
  }
  return absl::OkStatus();
}

absl::Status Membership::CheckIncarnation(int k, uint64_t incarnation) const {
  if (k < 0 || k >= num_trainers_) {
    return absl::OkStatus();  // the request's other checks will answer
  }
  const uint64_t known = active_incarnation_[k].load();
  if (known != 0 && incarnation == 0) {
    // Not a way around the check (issue 34's audit): every trainer process
    // stamps its requests with its incarnation.
    return absl::FailedPreconditionError(
        absl::StrCat("trainer ", k, " is running as incarnation ", known,
                     "; a request for it without an incarnation is refused"));
  }
  if (known != 0 && known != incarnation) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trainer ", k, " incarnation ", incarnation,
        " was replaced by incarnation ", known,
        " (a restarted process with the same --trainer_id); this process "
        "must stop"));
  }
  return absl::OkStatus();
}

absl::Status Membership::CheckGeneration(absl::string_view what,
                                         uint64_t generation) const {
  if (!sync_ || generation == kAnyGeneration ||
      generation == generation_.load()) {
    return absl::OkStatus();
  }
  return absl::AbortedError(absl::StrCat(
      what, " from generation ", generation, ": this pserver is on generation ",
      generation_.load(), ", restarted from step ", base_step_.load(),
      "; the trainer must recover"));
}

absl::Status Membership::DroppedError(int k) {
  return absl::FailedPreconditionError(absl::StrCat(
      "trainer ", k,
      " was dropped from the job after --trainer_timeout without a word; "
      "restart it to rejoin"));
}

absl::Status Membership::Touch(int k, absl::Time now) {
  if (absl::Status s = CheckTrainerId(k); !s.ok()) return s;
  last_seen_us_[k].store(absl::ToUnixMicros(now), std::memory_order_relaxed);
  if (Live(k)) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  if (members_[k].state == State::kDropped) return DroppedError(k);
  return absl::OkStatus();
}

void Membership::Publish(int k) {
  const Member& m = members_[k];
  active_incarnation_[k].store(m.state == State::kActive ? m.incarnation : 0);
}

Membership::Registration Membership::Register(int k, uint64_t incarnation,
                                              absl::Time now, int64_t next_step,
                                              int64_t async_clock) {
  Registration r;
  absl::MutexLock l(&mu_);
  Member& m = members_[k];
  m.finished = false;
  last_seen_us_[k].store(absl::ToUnixMicros(now));
  if (m.state == State::kExpected ||
      (m.state == State::kActive &&
       (m.incarnation == incarnation || m.incarnation == 0))) {
    m.state = State::kActive;
    m.incarnation = incarnation;
    Publish(k);
    r.join_step = sync_ ? required_from_[k].load() : async_clock;
    return r;
  }
  // A rejoin: a new incarnation, or a trainer that was dropped or left.
  const char* was = m.state == State::kDropped ? "dropped"
                    : m.state == State::kLeft  ? "gone"
                                               : "running";
  if (sync_) {
    r.join_step = next_step;
    required_from_[k].store(next_step);
  } else {
    r.join_step = async_clock;
    required_from_[k].store(0);
  }
  m.state = State::kActive;
  m.incarnation = incarnation;
  Publish(k);
  ++rejoined_;
  r.rejoined = true;
  LOG(WARNING) << "trainer " << k << " rejoined (incarnation " << incarnation
               << "; it was " << was << "): "
               << (sync_ ? "the barrier waits for it from step "
                         : "it resumes at step ")
               << r.join_step;
  return r;
}

absl::Status Membership::ConfirmJoin(int k, uint64_t incarnation,
                                     int64_t start_step, bool* changed) {
  *changed = false;
  absl::MutexLock l(&mu_);
  const Member& m = members_[k];
  if (m.state != State::kActive || m.incarnation != incarnation) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trainer ", k, " incarnation ", incarnation,
        " confirms a join it did not register for (register first)"));
  }
  if (!sync_ || start_step <= required_from_[k].load()) {
    return absl::OkStatus();
  }
  required_from_[k].store(start_step);
  *changed = true;
  return absl::OkStatus();
}

absl::Status Membership::Heartbeat(int k, uint64_t incarnation,
                                   absl::Time now) {
  if (absl::Status s = CheckTrainerId(k); !s.ok()) return s;
  absl::MutexLock l(&mu_);
  Member& m = members_[k];
  if (m.state == State::kExpected ||
      (m.state == State::kActive && m.incarnation == 0)) {
    // First word since this pserver started (or restarted from a
    // checkpoint).
    m.state = State::kActive;
    m.incarnation = incarnation;
    Publish(k);
  }
  if (m.incarnation != incarnation) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer ", k, " incarnation ", incarnation,
                     " was replaced by incarnation ", m.incarnation,
                     " (a restarted process with the same --trainer_id)"));
  }
  if (m.state == State::kDropped) return DroppedError(k);
  last_seen_us_[k].store(absl::ToUnixMicros(now));
  return absl::OkStatus();
}

absl::Status Membership::Leave(int k, uint64_t incarnation, bool* changed) {
  *changed = false;
  if (absl::Status s = CheckTrainerId(k); !s.ok()) return s;
  {
    absl::MutexLock l(&mu_);
    Member& m = members_[k];
    if (m.state != State::kExpected && m.incarnation != 0 &&
        m.incarnation != incarnation) {
      return absl::FailedPreconditionError(
          absl::StrCat("trainer ", k, " incarnation ", incarnation,
                       " was replaced by incarnation ", m.incarnation));
    }
    if (m.state == State::kLeft) return absl::OkStatus();
    m.state = State::kLeft;
    m.incarnation = incarnation;
    Publish(k);
    required_from_[k].store(INT64_MAX);
  }
  *changed = true;
  LOG(INFO) << "trainer " << k << " left the job";
  return absl::OkStatus();
}

absl::Status Membership::MarkFinished(int k, uint64_t incarnation) {
  RETURN_IF_ERROR(CheckTrainerId(k));
  absl::MutexLock l(&mu_);
  Member& m = members_[k];
  if (m.state != State::kLeft || m.incarnation != incarnation) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer ", k, " incarnation ", incarnation,
                     " has not left the job, so it cannot have finished"));
  }
  if (!m.finished) LOG(INFO) << "trainer " << k << " has finished";
  m.finished = true;
  return absl::OkStatus();
}

std::vector<int> Membership::FinishedTrainers() const {
  std::vector<int> out;
  absl::MutexLock l(&mu_);
  for (int k = 0; k < num_trainers_; ++k) {
    if (members_[k].finished) out.push_back(k);
  }
  return out;
}

absl::Duration Membership::Silence(int k, absl::Time now) const {
  if (members_[k].state != State::kActive) return absl::ZeroDuration();
  return now - absl::FromUnixMicros(last_seen_us_[k].load());
}

bool Membership::HasSilent(absl::Time now, absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  for (int k = 0; k < num_trainers_; ++k) {
    if (members_[k].state == State::kActive && Silence(k, now) >= timeout) {
      return true;
    }
  }
  return false;
}

int Membership::DropSilent(absl::Time now, absl::Duration timeout) {
  int dropped = 0;
  absl::MutexLock l(&mu_);
  for (int k = 0; k < num_trainers_; ++k) {
    Member& m = members_[k];
    if (m.state != State::kActive) continue;
    const absl::Duration silent = Silence(k, now);
    if (silent < timeout) continue;
    m.state = State::kDropped;
    Publish(k);
    required_from_[k].store(INT64_MAX);
    ++dropped_;
    ++dropped;
    LOG(WARNING) << "trainer " << k << " (incarnation " << m.incarnation
                 << ") said nothing for "
                 << absl::FormatDuration(absl::Trunc(silent, absl::Seconds(1)))
                 << " (--trainer_timeout=" << absl::ToInt64Seconds(timeout)
                 << "): dropped from the job; " << LiveTrainers().size()
                 << " of " << num_trainers_ << " trainers go on";
  }
  return dropped;
}

bool Membership::DropStalling(int k, int64_t step, absl::Duration waited) {
  absl::MutexLock l(&mu_);
  Member& m = members_[k];
  if (m.state != State::kActive) return false;
  m.state = State::kDropped;
  Publish(k);
  required_from_[k].store(INT64_MAX);
  ++dropped_;
  LOG(WARNING) << "trainer " << k << " (incarnation " << m.incarnation
               << ") has not sent its part of step " << step << " for "
               << absl::FormatDuration(absl::Trunc(waited, absl::Seconds(1)))
               << " while the others wait (--trainer_timeout): dropped from "
               << "the job; " << LiveTrainers().size() << " of "
               << num_trainers_ << " trainers go on";
  return true;
}

void Membership::AddTo(CheckpointInfo* info) const {
  absl::MutexLock l(&mu_);
  for (int k = 0; k < num_trainers_; ++k) {
    if (members_[k].state == State::kLeft) info->add_left_trainers(k);
    if (members_[k].state == State::kDropped) info->add_dropped_trainers(k);
  }
}

void Membership::Restore(const CheckpointInfo& info, uint64_t generation,
                         bool restarted, absl::Time now) {
  absl::MutexLock l(&mu_);
  if (restarted) {
    // The trainers that had left or been dropped stay out; every other one
    // is taken as alive now, so that one that died while this pserver was
    // away is dropped after --trainer_timeout instead of being waited for
    // forever. Its incarnation is learnt from its first heartbeat or
    // registration.
    for (int k = 0; k < num_trainers_; ++k) {
      last_seen_us_[k].store(absl::ToUnixMicros(now));
      members_[k] = Member{State::kActive, 0};
    }
    for (int k : info.left_trainers()) {
      if (k >= 0 && k < num_trainers_) members_[k].state = State::kLeft;
    }
    for (int k : info.dropped_trainers()) {
      if (k >= 0 && k < num_trainers_) members_[k].state = State::kDropped;
    }
    // None in: the job had ended (its final checkpoint). Started again, it
    // goes on with all its trainers from the step, as a job that never
    // stopped would, rather than with whichever registers first.
    bool any_in = false;
    for (int k = 0; k < num_trainers_; ++k) {
      any_in = any_in || members_[k].state == State::kActive;
    }
    if (!any_in) {
      for (int k = 0; k < num_trainers_; ++k) {
        members_[k] = Member{State::kExpected, 0};
      }
    }
    for (int k = 0; k < num_trainers_; ++k) Publish(k);
  }
  for (int k = 0; k < num_trainers_; ++k) {
    // Every trainer still in the job redoes the steps from here.
    const bool in = members_[k].state == State::kExpected ||
                    members_[k].state == State::kActive;
    required_from_[k].store(in ? info.step() : INT64_MAX);
  }
  generation_.store(generation);
  base_step_.store(info.step());
}

}  // namespace shardps
