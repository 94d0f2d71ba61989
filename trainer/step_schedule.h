#ifndef SHARDPS_TRAINER_STEP_SCHEDULE_H_
#define SHARDPS_TRAINER_STEP_SCHEDULE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/client/param_client.h"
#include "trainer/core/options.h"
#include "trainer/core/update_sharing.h"
#include "trainer/input_pipeline.h"
#include "trainer/model/model.h"

namespace shardps {

// What a schedule works on, owned by the Trainer; each must outlive it.
struct StepContext {
  const TrainerOptions* options = nullptr;
  ParamClient* params = nullptr;
  Model* model = nullptr;
  InputPipeline* input = nullptr;
  // Threshold compression's residuals and updates; null without it.
  UpdateSharing* sharing = nullptr;
  // The model's dense tables as the client reads and writes them (a
  // schedule that swaps buffers points them at the new ones).
  std::vector<float*>* values = nullptr;
  std::vector<const float*>* grads = nullptr;
  // Counts the bytes of a push that ends in Drain
  // (TrainingSession::CountPushed).
  std::function<void(int64_t bytes)> count_pushed;
  // After a transfer failed with `why`: cancels the pserver calls in flight
  // unless the run recovers from it (TrainingSession::CancelIfFatal).
  std::function<void(const absl::Status& why)> cancel_if_fatal;
};

// What a step tells its schedule.
struct StepPlan {
  int64_t step = 0;
  // The version its pull waits for: the step in sync mode, 0 in async.
  int64_t min_version = 0;
  // The version its push is tagged with (set once the pull has ended).
  int64_t tag = 0;
  // Whether the next step's parameters may be fetched during this one
  // (not when the next starts a pass, or there is none).
  bool prefetch = false;
};

// When a step's dense parameters and gradients travel
// (docs/architecture.md, "The trainer's step"): plain (pull, compute, push,
// one after the other), overlap (the next step's pull starts with this
// step's push), async prefetch (the next step's pull runs during compute,
// into buffers of its own, and the push stays in flight) or the layer
// pipeline (each layer's push and next pull start as its backward ends).
// Chosen once from TrainerOptions (Create); it owns the transfers that are
// in flight between steps. The sparse rows are the InputPipeline's.
// Thread-compatible.
class StepSchedule {
 public:
  static std::unique_ptr<StepSchedule> Create(StepContext context);
  virtual ~StepSchedule() = default;

  // The step's dense values into the model: waits for the pull started
  // ahead of it, or pulls now (after draining what is in flight for
  // another step). Adds its stats to *pull.
  virtual absl::Status Pull(const StepPlan& plan, TransferStats* pull);
  // Before a checkpoint of the step: ends its pulls still in flight, so
  // that no block moves while it is taken.
  virtual absl::Status SettlePulls(TransferStats* /*pull*/) {
    return absl::OkStatus();
  }
  // Forward and backward of the loaded batch. A schedule that waits for
  // pulls during forward adds them to *pull and the time waited to
  // *pull_wait. On an error its transfers have ended.
  virtual absl::StatusOr<BatchStats> Compute(const StepPlan& plan,
                                             TransferStats* pull,
                                             absl::Duration* pull_wait);
  // The step's dense push, and with plan.prefetch the next step's pull
  // where the schedule starts it then. Adds the push's stats to *push.
  virtual absl::Status Push(const StepPlan& plan, TransferStats* push);
  // Ends every transfer in flight: a pull started ahead is dropped (its
  // step is pulled again), a push in flight is waited for and counted;
  // returns the push's status.
  virtual absl::Status Drain() { return absl::OkStatus(); }

 protected:
  explicit StepSchedule(StepContext context) : ctx_(std::move(context)) {}
  // Threshold compression: the step's updates from its gradients, before
  // its push.
  void ComputeUpdates(const StepPlan& plan);
  // The step's push started: threshold compression's updates, or the
  // gradients; with `only`, the tables it marks.
  absl::StatusOr<std::unique_ptr<Transfer>> StartPush(
      int64_t tag, const std::vector<bool>* only = nullptr);
  // Waits for every one of `transfers` (and clears them), adding their
  // stats; returns the first error.
  static absl::Status WaitAll(std::vector<std::unique_ptr<Transfer>>& transfers,
                              TransferStats* stats);

  const StepContext ctx_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_STEP_SCHEDULE_H_
