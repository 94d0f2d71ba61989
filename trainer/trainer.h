#ifndef SHARDPS_TRAINER_TRAINER_H_
#define SHARDPS_TRAINER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/model_config.pb.h"
#include "proto/ps_service.pb.h"
#include "trainer/client/ps_client_interface.h"

namespace shardps {

struct TrainerOptions {
  int trainer_id = 0;
  int num_trainers = 1;
  // The model, its data and its optimizer; batch_size, num_passes and seed
  // in it are the defaults that the fields below override.
  ModelConfig config;
  TrainingMode mode = SYNC;
  // ASYNC: bound on how far this trainer may run ahead of the slowest one;
  // -1 = unbounded. Default: -1.
  int max_staleness = -1;
  int num_passes = 1;
  // Stop after this many steps in all; 0 = no limit. Default: 0.
  int64_t max_steps = 0;
  int batch_size = 64;  // per trainer
  bool shuffle = false;
  uint64_t shuffle_seed = 1;
  std::string metrics_file;  // JSON lines; empty = none
  std::string save_dir;      // chief saves the final model here; empty = no
  std::string load_dir;      // chief starts from this saved model; empty = no
  // A "step" metrics line, and a progress line when stderr is no terminal,
  // every this many steps. Default: 50.
  int log_every_steps = 50;
  bool progress_bar = false;  // redraw one line on stderr (a terminal)
  // How long a non-chief waits for the chief to initialise the job.
  absl::Duration ready_timeout = absl::Minutes(10);
  uint64_t incarnation = 0;  // distinguishes restarts of one trainer id
  // Dense gradient compression: "none", "fp16" or "bf16" (pushes and pulls
  // in 16 bits), "threshold" (threshold encoding with residuals).
  std::string compression = "none";
  // "threshold": fixed threshold, or DL4J's adaptive algorithm starting
  // there; residual clipping; shake-up frequency; residuals on or off.
  bool adaptive_threshold = true;
  double updates_threshold = 1e-3;
  bool residual_clipping = false;
  int64_t shake_frequency = 0;
  bool use_residual = true;
  // Threshold: zero the trainer's velocity where a message sent the
  // value (DGC's momentum factor masking).
  bool momentum_masking = true;
  double min_sparsity = 1e-4;  // adaptive threshold's band
  double max_sparsity = 1e-2;
  // Forward and backward on CUDA device `gpu_id` (the CUDA backend) instead
  // of the CPU backend with `cpu_threads` threads. Default: CPU, 1 thread.
  bool use_gpu = false;
  int gpu_id = 0;
  int cpu_threads = 1;

  // Fault tolerance (docs/fault_tolerance.md).
  // Chief: ask every pserver for a checkpoint every this many steps; 0 =
  // never. Default: 0.
  int64_t checkpoint_every_steps = 0;
  // SYNC: apply a step once this many trainers have pushed it (backup
  // workers); 0 = every live trainer. Default: 0.
  int replicas_to_aggregate = 0;
  // Clients for heartbeats (one per pserver, short retry budget), sent
  // every heartbeat_interval; empty = no heartbeats. Must outlive Run().
  std::vector<PsClientInterface*> heartbeat_servers;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // Polled between steps: when it becomes true the trainer leaves the job
  // and Run returns CANCELLED (SIGTERM). May be null.
  const std::atomic<bool>* stop_requested = nullptr;
};

class ParamClient;

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
};

// Trains a model on this trainer's shard of the data against the pservers:
// each step pulls the parameters, computes the gradient of the local batch
// and pushes it. Evaluates on the test set after each pass. Thread-compatible.
class Trainer {
 public:
  // `servers` (one per pserver, in --pservers order) must outlive Run().
  Trainer(TrainerOptions options, std::vector<PsClientInterface*> servers);

  absl::Status Run();
  const TrainerResult& result() const { return result_; }

  // The job spec this trainer's options describe, given the model's tables
  // (exposed for tests).
  static JobSpec MakeJobSpec(const TrainerOptions& options,
                             const std::vector<std::string>& table_names,
                             const std::vector<std::vector<int64_t>>& shapes,
                             const std::vector<OptimizerConfig>& optimizers);

 private:
  // Brings the pservers onto one timeline (rolling every one back to the
  // newest checkpoint they all hold when they disagree), adopts it, and
  // joins the job; returns the step to start at.
  absl::StatusOr<int64_t> SyncWithPservers(ParamClient* client);

  const TrainerOptions options_;
  const std::vector<PsClientInterface*> servers_;
  TrainerResult result_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_TRAINER_H_
