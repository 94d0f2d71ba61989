#ifndef SHARDPS_TRAINER_SESSION_TRAINING_SESSION_H_
#define SHARDPS_TRAINER_SESSION_TRAINING_SESSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/transport/ps_client_interface.h"
#include "proto/ps_service.pb.h"
#include "trainer/checkpoint_requester.h"
#include "trainer/client/heartbeat.h"
#include "trainer/client/job_client.h"
#include "trainer/client/param_client.h"
#include "trainer/client/replica_router.h"
#include "trainer/client/request_stamp.h"
#include "trainer/client/sparse_client.h"
#include "trainer/metrics.h"
#include "trainer/model/layers.h"
#include "trainer/options.h"
#include "trainer/progress.h"
#include "trainer/session/step_exchange.h"
#include "trainer/update_sharing.h"

namespace shardps {

// What ending a step did.
struct StepOutcome {
  // The step the session stands at now: the ended step + 1, or, after a
  // SYNC job rolled back (a pserver restarted from a checkpoint), the step
  // it went back to (the ended step's gradients were dropped).
  int64_t step = 0;
  bool recovered = false;
};

// A trainer's side of a job whose model lives elsewhere (a PyTorch module,
// through the Python package, python/): the same job set-up, recovery,
// replication, heartbeats, checkpoints, value lanes, compression and
// metrics as the trainer binary's Trainer, step by step at its caller's
// pace. The caller describes its tables, then Start()s; each step it pulls
// the dense values and the sparse rows it needs (PullDense, PullSparse),
// computes, queues its sparse gradients (PushSparse) and ends the step
// with its dense gradients (EndStep), which also fetches the next step's
// values. Thread-compatible: one thread calls it at a time. `servers` (in
// --pservers order) and the wiring of `options` must outlive it.
class TrainingSession {
 public:
  // options.config gives the block size (default 65,536) and nothing else;
  // the tables are the caller's.
  TrainingSession(TrainerOptions options,
                  std::vector<PsClientInterface*> servers);
  ~TrainingSession();
  TrainingSession(const TrainingSession&) = delete;
  TrainingSession& operator=(const TrainingSession&) = delete;

  // Before Start: a dense float32 table of this shape, updated on the
  // pservers by `optimizer`; returns its index among the dense tables.
  // INVALID_ARGUMENT for an empty or repeated name, a non-positive
  // dimension, or an optimizer the job cannot run (LARS outside plain
  // SYNC; docs/tuning.md).
  absl::StatusOr<int> AddDenseTable(const std::string& name,
                                    const std::vector<int64_t>& shape,
                                    const OptimizerConfig& optimizer);
  // Before Start: a sparse table (uint64 keys to rows of sparse.dim()
  // floats); returns its index among the sparse tables. INVALID_ARGUMENT
  // for a dim outside [1, 65536], LARS, or a bad name.
  absl::StatusOr<int> AddSparseTable(const std::string& name,
                                     const SparseTableOptions& sparse,
                                     const OptimizerConfig& optimizer);

  // Registers with every pserver; the chief (trainer 0) initialises the
  // job with initial[t] (table t's values; others' are not read), and a
  // pserver that already holds the job keeps its values. Waits until the
  // job is ready (--ready_timeout_s), checks that it is this one
  // (FAILED_PRECONDITION naming the difference: a model changed between
  // trainers), brings the pservers onto one timeline and joins at the step
  // they agree on (step()). With --load_dir, the chief's initial values
  // are the saved model's instead (FAILED_PRECONDITION naming a table
  // whose name or shape differs). `steps_per_pass` (0: unknown) and
  // options.num_passes shape the progress lines.
  absl::Status Start(const std::vector<const float*>& initial,
                     int64_t steps_per_pass);

  // The step this trainer computes now, counted from 0.
  int64_t step() const { return step_; }
  const JobSpec& job() const { return job_; }
  int num_dense_tables() const { return static_cast<int>(layouts_.size()); }
  // Values in dense table t.
  int64_t dense_size(int t) const { return layouts_[t].num_values; }

  // The dense values of this step (SYNC: after every update of the steps
  // before it) into values[t]. May block on the pservers.
  absl::Status PullDense(const std::vector<float*>& values);
  // The rows of sparse table `table` for `keys` (distinct) at this step,
  // keys.size() * dim floats into `rows`.
  absl::Status PullSparse(int table, absl::Span<const uint64_t> keys,
                          float* rows);
  // Queues sparse table `table`'s gradient rows for `keys` (distinct;
  // keys.size() * dim floats, copied); EndStep sends them. Again for the
  // same table adds to what is queued.
  absl::Status PushSparse(int table, absl::Span<const uint64_t> keys,
                          absl::Span<const float> grads);
  // Sends dense table `table`'s gradient for this step now, ahead of
  // EndStep: a backward hook's push, once that layer's gradient is ready,
  // so that it travels while the layers below compute. `grad` (dense_size
  // floats) must stay unchanged until EndStep returns. The first of a
  // step's early pushes makes the chief's checkpoint request of the step.
  // EndStep pushes the other tables, then waits for these and reports
  // their errors (a rolled-back job among them). INVALID_ARGUMENT for a
  // table that is not, or one sent already this step; FAILED_PRECONDITION
  // with threshold compression or LARS, whose updates need every table's
  // gradient at once.
  absl::Status PushDenseEarly(int table, const float* grad);
  // Ends the step: the chief asks for a checkpoint when one is due; the
  // queued sparse gradients, then grads[t] for each dense table, are
  // pushed; with `next_values`, the next step's dense values are pulled
  // into them (SYNC: sent with the push, answered once the step is
  // applied); with `next_rows`, so are the next step's rows of those keys
  // (what PullSparse would give at the next step; SYNC: sent before the
  // push, ASYNC: after the sparse push), in one pull of every table.
  // `loss_sum` over `samples` examples goes to the progress lines and
  // metrics. SYNC, a job rolled back meanwhile: recovers (joins the agreed
  // step, which step() then gives; next_values and next_rows not written).
  absl::StatusOr<StepOutcome> EndStep(const std::vector<const float*>& grads,
                                      const std::vector<float*>* next_values,
                                      const std::vector<SparseFetch>* next_rows,
                                      double loss_sum, int64_t samples);
  // An evaluation's results, as the trainer binary's "eval" line
  // (metrics_file) and log line; `auc` NaN for none.
  void Evaluated(int pass, bool final, double loss, double accuracy,
                 double auc);
  // --save_dir: the chief writes values[t] of each dense table as a saved
  // model (docs/saved_model.md: params.bin with the tables' names and
  // shapes, and a model.pbtxt naming no layers). OK and nothing written
  // for other trainers or without --save_dir.
  absl::Status Save(const std::vector<const float*>& values) const;
  // Leaves the job (SYNC: its barrier no longer waits for this trainer),
  // stops heartbeats, and with options.wait_for_trainers waits for the
  // others to finish. ASYNC: first marks this trainer's steps done, so the
  // others' final pulls see its updates. Later calls do nothing.
  absl::Status Finish();
  // Leaves the job now (a Python exception or a signal ends the loop).
  void Abandon();

  // Bytes pushed and pulled so far, and pservers reached through shared
  // memory.
  int64_t push_bytes() const { return push_bytes_; }
  int64_t pull_bytes() const { return pull_bytes_; }
  int shared_memory_servers() const;

 private:
  bool sync() const { return options_.mode == SYNC; }
  absl::Status CheckNotStarted(const std::string& name) const;
  // The dense tables as saved-model tables, with these values.
  std::vector<ParamTable> SavedTables(
      const std::vector<const float*>& values) const;
  // Builds the clients after the tables are known.
  absl::Status MakeClients();
  absl::Status Recover(const absl::Status& why);
  // Unless the run recovers from `why`, cancels the calls in flight.
  void CancelIfFatal(const absl::Status& why);
  void Report(int64_t pass, const StepTimes& times, double loss_sum,
              int64_t samples, int64_t push_bytes, int64_t pull_bytes);

  const TrainerOptions options_;
  const std::vector<PsClientInterface*> servers_;
  RequestStamp stamp_;

  // Described before Start.
  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<OptimizerConfig> optimizers_;
  std::vector<TableSpec> sparse_specs_;
  JobSpec job_;
  std::vector<DenseTableLayout> layouts_;
  std::vector<bool> lars_tables_;  // empty: no LARS table
  // --compression=threshold: the thresholds, and the optimizers that turn
  // gradients into the updates pushed (null otherwise).
  ThresholdPushEncoder::Options threshold_;
  std::unique_ptr<UpdateSharing> sharing_;

  // Declared before the router (the chief's router calls it).
  std::unique_ptr<JobClient> job_client_;
  std::unique_ptr<ReplicaRouter> router_;
  std::unique_ptr<ParamClient> params_;
  std::unique_ptr<SparseClient> sparse_;
  std::unique_ptr<CheckpointRequester> checkpoints_;
  std::unique_ptr<StepExchange> exchange_;  // after Start
  std::unique_ptr<Heartbeater> heartbeats_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<ProgressReporter> progress_;

  bool started_ = false;
  bool finished_ = false;
  int64_t step_ = 0;
  int64_t steps_per_pass_ = 0;
  int64_t push_bytes_ = 0;
  int64_t pull_bytes_ = 0;
  // Since the end of the last step: its data and compute time is the
  // caller's, between EndStep and the next pulls.
  absl::Time last_end_;
  absl::Duration pulled_;  // this step's PullDense and PullSparse time
  absl::Duration train_time_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_SESSION_TRAINING_SESSION_H_
