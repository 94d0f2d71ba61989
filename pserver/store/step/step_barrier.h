#ifndef SHARDPS_PSERVER_STORE_STEP_STEP_BARRIER_H_
#define SHARDPS_PSERVER_STORE_STEP_STEP_BARRIER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "pserver/store/step/membership.h"

namespace shardps {

// Where a streaming save writes the units it has not written yet
// (docs/checkpoint_format.md, "Streaming saves"). A save marks every unit
// (a dense block, a sparse table's stripe) pending at its instant; whoever
// changes a pending unit first (a push, or the save's own thread walking
// the units) writes the unit's record here, as it was at that instant,
// with the unit's lock held, and clears the mark. So the save is
// point-in-time while pushes go on, and holds at most a unit's record per
// thread in memory. Thread-safe.
class SaveSink {
 public:
  virtual ~SaveSink() = default;
  // Appends `record` (whole: records of one blob never interleave) to the
  // blob of table `table_id`. A failure is kept by the sink and ends the
  // save; the caller goes on.
  virtual void Append(uint32_t table_id, absl::string_view record) = 0;
  // Ends the save with `why`: a part of table `table_id` could not be
  // read (a sparse table's disk tier).
  virtual void Fail(uint32_t table_id, const absl::Status& why) = 0;
};

struct PullWaiter;  // pserver/store/step/pull_waiters.h
using WaiterPtr = std::shared_ptr<PullWaiter>;

// The sync step of one barrier unit (a dense block, or the rows of a sparse
// table held here), the same for both kinds (docs/design.md, "Synchronous
// SGD"): the unit is at `version` (steps applied) and assembles step `version`.
// Each trainer sends its part of the step in `num_chunks` pushes (1 for a
// dense block); the step is complete when every trainer the step waits for
// (Membership::Required) has sent all its chunks, or, with
// replicas_to_aggregate = K > 0, when K trainers have. A repeated chunk is
// a duplicate; with K, a push for a step already applied is late (dropped
// and counted), and otherwise refused. The barrier also holds the pulls
// that wait for a later version.
//
// Requires external synchronization: its unit's mutex (BarrierUnit::mu).
class StepBarrier {
 public:
  // `unit` names the unit in messages ("table w block 3", "sparse table
  // e"), `noun` what it is ("block", "table"). `membership` must outlive
  // the barrier. `quorum`: K, or 0 for every live trainer.
  StepBarrier(std::string unit, const char* noun, const Membership* membership,
              int quorum);

  int64_t version() const { return version_; }
  int num_trainers() const { return static_cast<int>(done_.size()); }
  // Trainers that have sent all their chunks of the step being assembled.
  int num_done() const { return num_done_; }

  enum class Admission { kApply, kLate };
  // Whether trainer k's push of `num_chunks` chunks for `step` may be
  // applied: kLate when the step went ahead without it (K of N);
  // FAILED_PRECONDITION when the step was applied already or is ahead of
  // the unit; INVALID_ARGUMENT when the trainer's chunk count changed within
  // the step.
  absl::StatusOr<Admission> Admit(int k, int64_t step,
                                  int32_t num_chunks) const;

  enum class Arrival { kDuplicate, kPartial, kTrainerDone };
  struct Received {
    Arrival arrival;
    bool first;  // the first chunk of any trainer in this step
  };
  // Counts one admitted chunk of trainer k's part.
  Received Receive(int k, int32_t num_chunks);
  // Whether the step being assembled has what it needs (false once it is
  // assembled and waits for its table's norms).
  bool Complete() const;
  // A unit whose optimizer needs its table's norms (LARS) does not apply a
  // complete step at once: it marks it assembled, which answers the pulls
  // of its norms (HoldForAssembly), and applies it, with Advance, once the
  // norms come. Pushes of the step are duplicates meanwhile.
  void Assembled(std::vector<WaiterPtr>* ready);
  bool assembled() const { return assembled_; }
  // Holds `w` until the step being assembled is (Assembled or Reset).
  void HoldForAssembly(WaiterPtr w);
  // Moves to the next version (the step was applied), forgets the pushes,
  // and hands the pulls that may now go to *ready.
  void Advance(std::vector<WaiterPtr>* ready);
  // ASYNC: one more update applied (no pull waits on versions then).
  void Bump() { ++version_; }

  // Holds `w` until the unit reaches `min_version`.
  void Hold(int64_t min_version, WaiterPtr w);
  // Sets the version (a restore), forgets the pushes, and hands every held
  // pull to *dropped.
  void Reset(int64_t version, std::vector<WaiterPtr>* dropped);
  // Pulls held (tests).
  size_t held() const { return held_.size(); }
  // When the first part of the step being assembled arrived (set by the
  // caller, which has the clock), and whether one has.
  void set_started(absl::Time t) { started_ = t; }
  bool assembling() const { return num_received_ > 0; }
  absl::Time started() const { return started_; }
  // Adds to *missing the trainers whose part of the current step is
  // missing.
  void AppendMissing(std::vector<int>* missing) const;

 private:
  const std::string unit_;
  const char* const noun_;
  const Membership* const membership_;
  const int quorum_;
  int64_t version_ = 0;
  // Per trainer, for the step being assembled: the chunks it announced (0:
  // none yet) and received, and whether it sent them all.
  std::vector<int32_t> expected_;
  std::vector<int32_t> received_;
  std::vector<uint8_t> done_;
  int num_done_ = 0;
  int num_received_ = 0;  // chunks of any trainer
  absl::Time started_;
  std::vector<std::pair<int64_t, WaiterPtr>> held_;
  bool assembled_ = false;
  std::vector<WaiterPtr> held_for_assembly_;
};

// One push's data for one unit, as views into the request: a dense block's
// gradient (`values`), or a sparse chunk's keys and keys.size() * dim
// gradient values.
struct PushPayload {
  absl::Span<const float> values;
  absl::Span<const uint64_t> keys;
  int32_t num_chunks = 1;
  // ASYNC: the step of the slowest live trainer, which paces eviction (a
  // push's own step is the client's word).
  int64_t job_step = 0;
};

// An update as a unit's optimizer applied it (docs/replication.md,
// "Replication after aggregation"): a backup unit that applies it to the
// same values and state gets the same bits. A dense block's: its gradient
// (`grad`, the block's size) times `scales[0]`; a sparse table's: one row
// of `grad` per key, times that key's scale.
struct AppliedUpdate {
  uint32_t table_id = 0;
  uint32_t block = 0;    // the unit's index (0 for a sparse table)
  int64_t step = 0;      // the optimizer's step argument
  int64_t version = 0;   // the unit's version before the update
  bool sync = true;      // a sync step (the barrier advances) or an async push
  int64_t job_step = 0;  // ASYNC sparse: what paces eviction
  std::vector<uint64_t> keys;  // sparse only
  std::vector<float> scales;   // 1 (dense) or one per key
  std::vector<float> grad;
  float trust_ratio = 1.0f;  // LARS: the table's ratio the step applied
  // Sparse: rows evicted to make room for new ones (before the update),
  // and rows that expired (after it): a backup removes the same.
  std::vector<uint64_t> evicted_full;
  std::vector<uint64_t> expired;
};

// Receives a pulled dense block, under that block's lock.
using PullSink =
    std::function<void(uint32_t table_id, uint32_t block, int64_t version,
                       absl::Span<const float> values)>;

// What a pull reads from one unit: a dense block whole (to the sink), or
// the rows of `keys` of a sparse table (to `out`, keys.size() * dim floats
// owned by the caller until the pull is done).
struct PullTarget;

// A unit that a sync step assembles as a whole, with the mutex that guards
// its barrier and its values. Units are locked in (table_id, index) order.
// Thread-safe through `mu`.
class BarrierUnit {
 public:
  BarrierUnit(uint32_t table_id, uint32_t index, std::string name,
              const char* noun, const Membership* membership, int quorum)
      : barrier(name, noun, membership, quorum),
        name_(std::move(name)),
        table_id_(table_id),
        index_(index) {}
  virtual ~BarrierUnit() = default;

  BarrierUnit(const BarrierUnit&) = delete;
  BarrierUnit& operator=(const BarrierUnit&) = delete;

  // "table w block 3", "sparse table e".
  const std::string& name() const { return name_; }
  uint32_t table_id() const { return table_id_; }
  uint32_t index() const { return index_; }
  bool LockedBefore(const BarrierUnit& o) const {
    return std::make_pair(table_id_, index_) <
           std::make_pair(o.table_id_, o.index_);
  }

  // SYNC: adds one trainer's chunk of the step being assembled; `first`:
  // the step's first chunk.
  virtual void Accumulate(const PushPayload& p, bool first)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
  // SYNC: applies the step (the mean of what was accumulated; `last` is the
  // push that completed it, null when a membership change did) and advances
  // the barrier, handing the pulls it releases to *ready. A replicated
  // unit returns the update it applied (set_replicated).
  virtual std::optional<AppliedUpdate> ApplyStep(const PushPayload* last,
                                                 std::vector<WaiterPtr>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
  // ASYNC: applies one push on arrival; returns the update as ApplyStep.
  virtual std::optional<AppliedUpdate> ApplyNow(int64_t step,
                                                const PushPayload& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
  // Answers a pull: takes what it needs of `mu` itself, once the unit is
  // settled (a replicated unit's pulls wait for its updates in flight).
  virtual void Read(const PullTarget& target, const PullSink& sink) const = 0;
  // SYNC, LARS (docs/tuning.md, "LARS"): whether the unit has the squared
  // norms of `step` (it was assembled, or applied as the last step); false
  // while the step is being assembled; INVALID_ARGUMENT when the unit has
  // no such norms or the step is not the current or the last one.
  virtual absl::StatusOr<bool> NormsReady(int64_t step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, " has no table norms (only LARS blocks have)"));
  }

  // A primary's unit of a replicated job (docs/replication.md), from now
  // on: every update it applies is returned by the apply step, for the
  // caller to forward to the backups once the unit's lock is released, and
  // is in flight until the caller settles it (Settle). While an update is
  // in flight the unit is not settled: pushes (UnitLocks) and pulls (Read)
  // of the unit wait, so that no pull sees an update a backup may not hold
  // and the backups receive a unit's updates in order.
  void set_replicated() { replicated_.store(true); }
  bool replicated() const { return replicated_.load(); }
  // Whether none of the unit's updates is in flight.
  bool settled() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return in_flight_ == 0;
  }
  // One update this unit returned has reached the backups, or failed to;
  // takes `mu`.
  void Settle() ABSL_LOCKS_EXCLUDED(mu);
  // A backup's unit: applies its primary's `update` as the primary did,
  // handing the pulls it releases to *ready. FAILED_PRECONDITION when the
  // update does not follow this unit's version (a gap or a repeat),
  // INVALID_ARGUMENT when it names another unit or has the wrong sizes;
  // nothing is applied then.
  virtual absl::Status ApplyReplicated(const AppliedUpdate& update,
                                       std::vector<WaiterPtr>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // Checkpoints of K-of-N jobs (docs/checkpoint_format.md, "Checkpoints of
  // K-of-N jobs"): a save of version `version` takes a unit still below it
  // when it gets there. ArmSave keeps the save's `sink` (and whether it is
  // a delta) until the unit's version reaches `version`; the unit then
  // marks itself for the save (MarkForSave), before anything changes it
  // again. REQUIRES: the unit is below `version`.
  void ArmSave(int64_t version, SaveSink* sink, bool delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Whether no save is armed here (the unit got to the version, or the
  // save was called off): the condition a save waits for.
  bool save_unarmed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return armed_sink_ == nullptr;
  }
  // Forgets an armed save (it was called off, or gave up waiting): the
  // unit no longer refers to its sink, and save_called_off() says so.
  void DisarmSave() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (armed_sink_ != nullptr) save_called_off_ = true;
    armed_sink_ = nullptr;
  }
  // Whether the last save armed here was called off before the unit got
  // to its version; a new save forgets it (ForgetCalledOff).
  bool save_called_off() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return save_called_off_;
  }
  void ForgetCalledOff() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    save_called_off_ = false;
  }
  // Marks the unit as not yet written by the save to `sink` (a streaming
  // save, SaveSink): the next change, or the save's own pass, writes it
  // first. `delta`: the save is a delta (a sparse table writes its changed
  // keys only).
  virtual void MarkForSave(SaveSink* sink, bool delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  mutable absl::Mutex mu;
  StepBarrier barrier ABSL_GUARDED_BY(mu);
  // Updates not applied because they would have made a value or optimizer
  // state non-finite (Optimizer::ApplyIfFinite): a dense block's whole
  // step or push; a sparse table's rows (the version moves on all the
  // same).
  int64_t non_finite_updates ABSL_GUARDED_BY(mu) = 0;

 protected:
  // A replicated unit's record of an update it applies now at `step`: its
  // ids, version and kind, counted in flight; the caller adds keys, scales
  // and the gradient. Nothing for a unit not replicated.
  std::optional<AppliedUpdate> UpdateRecord(int64_t step, bool sync)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The checks every ApplyReplicated makes: this unit, this version.
  absl::Status CheckReplicated(const AppliedUpdate& update) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Called by a unit once a change of its version is whole (the step
  // applied, its rows evicted): marks it for an armed save that waited
  // for this version (ArmSave).
  void Reached() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Set once, before the unit serves (a replicated job's primary).
  std::atomic<bool> replicated_{false};
  int in_flight_ ABSL_GUARDED_BY(mu) = 0;

 private:
  SaveSink* armed_sink_ ABSL_GUARDED_BY(mu) = nullptr;
  int64_t armed_version_ ABSL_GUARDED_BY(mu) = -1;
  bool armed_delta_ ABSL_GUARDED_BY(mu) = false;
  bool save_called_off_ ABSL_GUARDED_BY(mu) = false;
  const std::string name_;
  const uint32_t table_id_;
  const uint32_t index_;
};

struct PullTarget {
  BarrierUnit* unit = nullptr;
  absl::Span<const uint64_t> keys;  // sparse only
  float* out = nullptr;             // sparse only
  // A pull of a LARS block's norms (BarrierUnit::NormsReady): the block's
  // squared sums of weights and gradient go here, not its values.
  double* norms_out = nullptr;
};

// Locks a set of units in (table_id, index) order for its lifetime, each
// once it is settled (BarrierUnit::set_replicated), and unlocks them in
// reverse: the scoped locker of a multi-unit push. The units must be sorted
// and distinct. Code that uses a unit while the lock
// is held says so with `unit->mu.AssertHeld()`.
class UnitLocks {
 public:
  explicit UnitLocks(absl::Span<BarrierUnit* const> units);
  ~UnitLocks();
  UnitLocks(const UnitLocks&) = delete;
  UnitLocks& operator=(const UnitLocks&) = delete;

 private:
  const absl::Span<BarrierUnit* const> units_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_STEP_STEP_BARRIER_H_
