#ifndef SHARDPS_TRAINER_CORE_CHECKPOINT_REQUESTER_H_
#define SHARDPS_TRAINER_CORE_CHECKPOINT_REQUESTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainer/client/job_client.h"
#include "trainer/core/training_observer.h"

namespace shardps {

// The chief's checkpoint requests (--checkpoint_every_steps,
// docs/fault_tolerance.md): every pserver writes a checkpoint of each step
// that is a multiple of the interval, except the step the job resumed from
// (it has one). Non-chiefs and an interval of 0 ask for none.
//
// K-of-N jobs (`k_of_n`, --replicas_to_aggregate): steps complete without
// the trainers that are late, the chief among them, so the pservers' units
// are at different versions, past the chief's step. At each interval the
// chief asks instead for the version kLeadSteps past the newest any
// pserver holds; each pserver takes each unit when it gets there
// (docs/checkpoint_format.md, "Checkpoints of K-of-N jobs"). A unit that
// got past it meanwhile (FAILED_PRECONDITION) makes the chief ask again,
// further ahead, up to kTries times.
//
// Thread-compatible. `client` and `observer` (may be null) must outlive it.
class CheckpointRequester {
 public:
  static constexpr int64_t kLeadSteps = 2;
  static constexpr int kTries = 3;

  CheckpointRequester(JobClient* client, int64_t every_steps, bool chief,
                      TrainingObserver* observer = nullptr,
                      bool k_of_n = false);

  // FAILED_PRECONDITION naming the first pserver started without
  // --checkpoint_dir, when checkpoints are asked for.
  absl::Status CheckPservers();
  // Called between the pull and the push of `step` (in sync mode no block
  // can move then; K of N: the checkpoint is of a later version). ABORTED (the
  // job went to another timeline) is returned; any other failure is logged and
  // training goes on, and so is a pserver's previous write that failed (its
  // answer says). A pserver whose disk is still full refuses at once
  // (RESOURCE_EXHAUSTED, nothing copied or written): that too is logged and
  // counted at each interval, until a checkpoint is taken again, which is
  // logged as well.
  absl::Status AtStep(int64_t step);
  // Whether AtStep(step) asks for a checkpoint.
  bool DueAt(int64_t step) const {
    return every_ > 0 && step % every_ == 0 && step != last_;
  }
  // The job (re)started at `step`.
  void ResumedAt(int64_t step) { last_ = step; }
  // Checkpoints the pservers said were not written (a write that failed,
  // or a request refused for want of room), so far; each also goes to the
  // observer's CheckpointsFailed.
  int64_t write_failures() const { return write_failures_; }

 private:
  void Failed(int64_t n);
  // K of N: asks for a version no unit has reached yet; *label is the one
  // asked for last.
  absl::Status AskAhead(std::vector<std::string>* write_errors, int64_t* label);

  JobClient* const client_;
  const int64_t every_;
  TrainingObserver* const observer_;
  const bool k_of_n_;
  int64_t last_ = 0;
  int64_t write_failures_ = 0;
  bool no_room_ = false;  // the last request was refused for want of room
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CORE_CHECKPOINT_REQUESTER_H_
