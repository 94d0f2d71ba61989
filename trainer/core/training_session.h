#ifndef SHARDPS_TRAINER_CORE_TRAINING_SESSION_H_
#define SHARDPS_TRAINER_CORE_TRAINING_SESSION_H_

#include <cmath>
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
#include "trainer/client/heartbeat.h"
#include "trainer/client/job_client.h"
#include "trainer/client/param_client.h"
#include "trainer/client/sparse_client.h"
#include "trainer/core/checkpoint_requester.h"
#include "trainer/core/job_description.h"
#include "trainer/core/json_lines.h"
#include "trainer/core/options.h"
#include "trainer/core/progress.h"
#include "trainer/core/step_exchange.h"
#include "trainer/core/update_sharing.h"
#include "trainer/transport/replica_router.h"
#include "trainer/transport/request_stamp.h"

namespace shardps {

// What ending a step did.
struct StepOutcome {
  // The step the session stands at now: the ended step + 1, or, after a
  // SYNC job rolled back (a pserver restarted from a checkpoint), the step
  // it went back to (the ended step's gradients were dropped).
  int64_t step = 0;
  bool recovered = false;
};

// An evaluation, as the "eval" line of the metrics file and the log tell it.
struct Evaluation {
  int pass = 0;
  bool final = false;
  double loss = 0;
  double accuracy = 0;
  double auc = std::nan("");      // binary tasks; NaN otherwise
  double logloss = std::nan("");  // binary tasks; NaN otherwise
  int64_t pull_bytes = 0;         // pulled for it (counted as pulled)
};

// A trainer's side of a job, whatever computes its steps: the core under
// both front ends, the trainer binary's built-in model (trainer/trainer.h)
// and a PyTorch module through the Python package (python/). It sets up
// the job and its clients (replication, value lanes, compression),
// registers and joins, sends heartbeats, asks for checkpoints, runs a
// step's pushes and pulls, recovers a rolled-back SYNC job, cancels the
// calls in flight on a fatal error, and reports steps and evaluations
// (progress lines, the metrics file, the TrainingObserver). It knows
// nothing of the model or the data.
//
// The caller describes its tables, then Start()s; each step it pulls the
// dense values and the sparse rows it needs (PullDense, PullSparse),
// computes, queues its sparse gradients (PushSparse) and ends the step
// with its dense gradients (EndStep), which also fetches the next step's
// values. A front end that overlaps its transfers with its computation
// (the binary's StepSchedule) runs them on params() and sparse() itself
// and tells the session of each step (StepDone) and of each failure
// (CancelIfFatal, Recover). Thread-compatible: one thread calls it at a
// time. `servers` (in --pservers order) and the wiring of `options` must
// outlive it.
class TrainingSession {
 public:
  // options.config gives the block size (default 65,536) and nothing else;
  // the tables are the caller's (INVALID_ARGUMENT at Start for a block
  // size outside [1, kMaxBlockSize]).
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
  // options.num_passes shape the progress lines and total_steps().
  absl::Status Start(const std::vector<const float*>& initial,
                     int64_t steps_per_pass);

  // The step this trainer computes now, counted from 0.
  int64_t step() const { return step_; }
  // The steps of the run: steps_per_pass * num_passes, at most
  // --max_steps; 0 when unknown (no steps_per_pass and no --max_steps).
  int64_t total_steps() const { return total_steps_; }
  // Whether Start joined a job that had run all its total_steps() already
  // (the same --job_id and checkpoints as a finished run).
  bool joined_finished_job() const { return joined_finished_job_; }
  const JobSpec& job() const { return job_; }
  // Values in dense table t.
  int64_t dense_size(int t) const { return layouts_[t].num_values; }
  bool sync() const { return options_.mode == SYNC; }

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
  // An evaluation's results: the "eval" line of the metrics file, the log
  // line and the observer's report.
  void Evaluated(const Evaluation& e);
  // --save_dir: the chief writes values[t] of each dense table as a saved
  // model (docs/saved_model.md: params.bin with the tables' names and
  // shapes, and `config` as model.pbtxt: the binary's layers, or by
  // default a config naming none), then every sparse table's rows. OK and
  // nothing written for other trainers or without --save_dir.
  absl::Status Save(const std::vector<const float*>& values,
                    const ModelConfig* config = nullptr) const;
  // ASYNC: tells the pservers this trainer has done its steps (those
  // before step()), so that the others' final pulls can wait for its
  // updates. Once; later calls, SYNC and a joined finished job do nothing.
  absl::Status MarkDone();
  // Leaves the job (SYNC: its barrier no longer waits for this trainer);
  // a failure is logged. Once; later calls do nothing.
  void Leave();
  // MarkDone (ASYNC), Leave, stops heartbeats, and with
  // options.wait_for_trainers waits for the others to finish. Later calls
  // do nothing.
  absl::Status Finish();
  // Leaves the job now (a Python exception or a signal ends the loop).
  void Abandon();

  // For a front end that runs a step's transfers itself (the binary's
  // StepSchedule); valid after Start.
  ParamClient* params() { return params_.get(); }
  SparseClient* sparse() { return sparse_.get(); }
  CheckpointRequester* checkpoints() { return checkpoints_.get(); }
  // Threshold compression's updates and residuals; null without it.
  UpdateSharing* sharing() { return sharing_.get(); }
  // Per dense table, whether its optimizer is LARS (whose norms are
  // exchanged after each push); empty when none is.
  const std::vector<bool>& lars_tables() const { return tables_.lars(); }
  // The heartbeats' state: an error once a pserver said this trainer was
  // dropped.
  absl::Status HeartbeatStatus() const;
  // Such a front end's step ended: the step advances, its bytes are
  // counted, and it is reported (progress lines, metrics, observer).
  // `took`: its wall time (the training time, which evaluation is not).
  void StepDone(int pass, const StepTimes& times, double loss_sum,
                int64_t samples, int64_t push_bytes, int64_t pull_bytes,
                absl::Duration took);
  // The bytes of a push that ended between steps (a schedule's drain).
  void CountPushed(int64_t bytes) { push_bytes_ += bytes; }
  // SYNC, after `why` (ABORTED: the job was rolled back, a pserver
  // restarted from a checkpoint): goes back to the step the pservers
  // agree on (step() gives it); the caller has ended its transfers.
  absl::Status Recover(const absl::Status& why);
  // After a step failed with `why`: unless the run recovers from it (a
  // SYNC ABORTED), logs it and cancels the pserver calls in flight, so
  // that transfers waited for end now rather than after their retries
  // (up to --rpc_retry_s).
  void CancelIfFatal(const absl::Status& why);

  // Bytes pushed and pulled so far, pservers reached through shared
  // memory, the time spent in steps, and the rollbacks recovered from and
  // the steps they cost.
  int64_t push_bytes() const { return push_bytes_; }
  int64_t pull_bytes() const { return pull_bytes_; }
  int shared_memory_servers() const;
  absl::Duration train_time() const { return train_time_; }
  int64_t recoveries() const { return recoveries_; }
  int64_t steps_redone() const { return steps_redone_; }

 private:
  absl::Status CheckNotStarted(const std::string& name) const;
  // Builds the clients after the tables are known.
  absl::Status MakeClients();
  // Start's parts: the job initialised (chief) and joined; the step's
  // helpers (checkpoints, the exchange, rejoins, heartbeats); the reports.
  absl::Status JoinJob(const std::vector<const float*>& initial);
  absl::Status StartStepParts();
  absl::Status StartReports(int64_t steps_per_pass);
  // The chief's initial values: `initial`, or --load_dir's.
  absl::Status InitJob(const std::vector<const float*>& initial);
  // Where dense values go besides gRPC (after a join, and a recovery).
  void OpenValueLanes();
  void WriteRecoveryLine(int64_t from, absl::Duration took,
                         absl::Duration stalled);

  const TrainerOptions options_;
  const std::vector<PsClientInterface*> servers_;
  RequestStamp stamp_;

  // Described before Start, and what they make (DescribedJob).
  JobDescription tables_{&options_};
  JobSpec job_;
  std::vector<DenseTableLayout> layouts_;
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
  std::unique_ptr<JsonLinesWriter> metrics_;
  std::unique_ptr<ProgressReporter> progress_;

  bool started_ = false;
  bool finished_ = false;
  bool marked_done_ = false;
  bool left_ = false;
  bool joined_finished_job_ = false;
  int64_t step_ = 0;
  int64_t steps_per_pass_ = 0;
  int64_t total_steps_ = 0;
  int64_t push_bytes_ = 0;
  int64_t pull_bytes_ = 0;
  int64_t samples_ = 0;  // trained on by this trainer
  int64_t recoveries_ = 0;
  int64_t steps_redone_ = 0;
  // Since the end of the last step: its data and compute time is the
  // caller's, between EndStep and the next pulls.
  absl::Time last_end_;
  // The end of the last good step or evaluation (a recovery's stall).
  absl::Time last_ok_;
  absl::Duration pulled_;  // this step's PullDense and PullSparse time
  absl::Duration train_time_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CORE_TRAINING_SESSION_H_
