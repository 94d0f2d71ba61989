#ifndef SHARDPS_TRAINER_TRAINER_H_
#define SHARDPS_TRAINER_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/transport/ps_client_interface.h"
#include "proto/ps_service.pb.h"
#include "trainer/checkpoint_requester.h"
#include "trainer/client/heartbeat.h"
#include "trainer/client/job_client.h"
#include "trainer/client/param_client.h"
#include "trainer/client/replica_router.h"
#include "trainer/client/request_stamp.h"
#include "trainer/client/sparse_client.h"
#include "trainer/input_pipeline.h"
#include "trainer/metrics.h"
#include "trainer/model/model.h"
#include "trainer/options.h"
#include "trainer/progress.h"
#include "trainer/recovery_planner.h"
#include "trainer/step_schedule.h"
#include "trainer/update_sharing.h"

namespace shardps {

// The job spec of `o` over dense tables with these names, shapes and
// optimizers (docs/design.md, "Job start"): blocks of the config's
// block_size (65,536 values by default).
JobSpec MakeJobSpec(const TrainerOptions& o,
                    const std::vector<std::string>& names,
                    const std::vector<std::vector<int64_t>>& shapes,
                    const std::vector<OptimizerConfig>& optimizers);

// The clients of a job on `servers` (one per pserver, in --pservers
// order): the JobClient, and the ParamClient and SparseClient that pushes
// and pulls go through: with o.replication > 1, routed to each shard's
// primary by a ReplicaRouter over o.failover_servers (INVALID_ARGUMENT
// without enough pservers); dense values encoded as o.compression asks
// (threshold: with `threshold`). The Trainer's and TrainingSession's
// (trainer/session/). Destroy the router before the others (it calls the
// JobClient) and after the clients that use it.
struct JobClients {
  std::unique_ptr<JobClient> job;
  std::unique_ptr<ReplicaRouter> router;  // o.replication > 1 only
  std::unique_ptr<ParamClient> params;
  std::unique_ptr<SparseClient> sparse;
};
absl::StatusOr<JobClients> MakeJobClients(
    const TrainerOptions& o, const std::vector<PsClientInterface*>& servers,
    RequestStamp* stamp, const std::vector<DenseTableLayout>& layouts,
    const ThresholdPushEncoder::Options& threshold);

// Where dense values go besides gRPC, as `o` asks: shared regions with the
// pservers on this host (ParamClient::UseSharedMemory), the TCP lane with
// the others (UseTcpLane); nothing with replication. Logs the split of the
// `servers` pservers.
void OpenValueLanes(const TrainerOptions& o, ParamClient* params,
                    size_t servers);

// What a run achieved.
struct TrainerResult {
  int64_t steps = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  double test_auc = 0;  // binary tasks; NaN otherwise
  int64_t push_bytes = 0;
  int64_t pull_bytes = 0;
  double train_seconds = 0;
  int64_t recoveries = 0;    // rollbacks to a checkpoint
  int64_t steps_redone = 0;  // steps lost to them
  // Pservers whose dense values went through shared memory at the end.
  int shared_memory_servers = 0;
};

// Trains a model on this trainer's shard of the data against the pservers:
// each step pulls the parameters, computes the gradient of the local batch
// and pushes it (pull -> compute -> push); evaluates on the test set after
// each pass; in sync mode recovers when the pservers roll back. The parts:
// the input pipeline and the model (what a step computes), the clients
// (JobClient, ParamClient, SparseClient), UpdateSharing (threshold
// compression), the recovery planner, CheckpointRequester, Heartbeater and
// ProgressReporter. Thread-compatible.
class Trainer {
 public:
  // `servers` (one per pserver, in --pservers order) must outlive Run().
  Trainer(TrainerOptions options, std::vector<PsClientInterface*> servers);
  ~Trainer();

  absl::Status Run();
  const TrainerResult& result() const { return result_; }

 private:
  // Data, model, tables, the job spec and the clients.
  absl::Status Setup();
  // The step's schedule, from the options and the parts Setup made.
  std::unique_ptr<StepSchedule> MakeSchedule();
  // The dense tables of the model and the job they make.
  absl::Status DescribeJob();
  // Registers; the chief initialises the job; waits until it is ready and
  // joins it at the step the pservers agree on.
  absl::Status Connect();
  // Brings the pservers onto one timeline (PlanRecovery; when they
  // disagree, the chief rolls every one back to the newest checkpoint they
  // all hold, and another trainer asks it to and waits), adopts it, and
  // joins the job; returns the step to start at.
  absl::StatusOr<int64_t> SyncWithPservers();
  // One step of pass `pass`: batch `index` pulled, computed and pushed.
  absl::Status Step(int pass, int64_t index);
  // Marks the LARS tables (lars_tables_); INVALID_ARGUMENT naming the table
  // and the flag when the job cannot carry their norms.
  absl::Status CheckLars(const std::vector<std::string>& names,
                         const std::vector<OptimizerConfig>& optimizers);
  absl::Status Evaluate(int pass, bool final);
  // SYNC: after `why` (ABORTED: the job was rolled back), goes back to the
  // step the pservers agree on.
  absl::Status Recover(const absl::Status& why);
  // After the last step: leaves (async), stops heartbeats, saves the model.
  absl::Status Finish(absl::Time train_start);
  bool sync() const { return options_.mode == SYNC; }
  void LeaveQuietly();
  // Where dense values go besides gRPC: shared regions with the pservers
  // on this host (options_.shared_memory, ParamClient::UseSharedMemory),
  // the TCP lane with the others (options_.tcp_lane, UseTcpLane).
  void OpenValueLanes();
  // A step that failed with `why` (at its push, or its LARS norms): the
  // calls in flight cancelled unless the run recovers, the transfers
  // drained; returns `why`.
  absl::Status StepFailed(const absl::Status& why);
  // After a step failed with `why`: unless the run recovers from it (a sync
  // ABORTED), logs it and cancels the pserver calls in flight, so that the
  // transfers StepSchedule::Drain waits for end now rather than after their
  // retries (up to --rpc_retry_s).
  void CancelIfFatal(const absl::Status& why);
  const TrainerOptions options_;
  // options_.config, its optimizers adapted to the data where it asks
  // (InputPipeline::Create).
  ModelConfig config_;
  const std::vector<PsClientInterface*> servers_;
  TrainerResult result_;

  // Set up by Setup().
  std::unique_ptr<InputPipeline> input_;
  std::unique_ptr<Model> model_;
  JobSpec job_;
  std::vector<DenseTableLayout> layouts_;
  std::vector<float*> values_;
  std::vector<const float*> grads_;
  std::unique_ptr<UpdateSharing> sharing_;  // threshold compression only
  // Threshold compression: options_.threshold, with the thresholds per
  // table where --updates_threshold is 0 (UpdateSharing::DefaultThreshold).
  ThresholdPushEncoder::Options threshold_;
  // Per dense table: whether its optimizer is LARS, whose norms the
  // trainers carry between the pservers after each push
  // (ParamClient::ExchangeTableNorms); empty when none is.
  std::vector<bool> lars_tables_;
  int64_t steps_per_pass_ = 0;
  int64_t total_steps_ = 0;
  RequestStamp stamp_;
  // Declared before the router: the chief's router sends restarted
  // pservers the job through it from its own thread until it is gone.
  std::unique_ptr<JobClient> job_client_;
  // With replication: routes pushes and pulls to each shard's primary
  // (declared before the clients that use it, so that it outlives them).
  std::unique_ptr<ReplicaRouter> router_;
  std::unique_ptr<ParamClient> params_;
  std::unique_ptr<SparseClient> sparse_;
  std::unique_ptr<CheckpointRequester> checkpoints_;
  std::unique_ptr<Heartbeater> heartbeats_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<ProgressReporter> progress_;

  // The loop.
  int64_t step_ = 0;
  // Joined a job whose steps were all done (Run evaluates, trains nothing).
  bool joined_finished_job_ = false;
  int64_t push_bytes_ = 0;
  int64_t pull_bytes_ = 0;
  absl::Duration train_time_;  // excludes evaluation
  absl::Time last_ok_;         // the end of the last good step
  // When the dense values and gradients travel, with the transfers in
  // flight between steps. Declared after the clients and the model:
  // destroyed first, its transfers wait for their calls before those go.
  std::unique_ptr<StepSchedule> schedule_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_TRAINER_H_
