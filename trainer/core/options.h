#ifndef SHARDPS_TRAINER_CORE_OPTIONS_H_
#define SHARDPS_TRAINER_CORE_OPTIONS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/transport/ps_client_interface.h"
#include "common/transport/tcp_lane.h"
#include "compression/threshold_push_encoder.h"
#include "proto/model_config.pb.h"
#include "proto/ps_service.pb.h"
#include "trainer/core/training_observer.h"

namespace shardps {

// How dense values travel (--compression, docs/compression.md).
enum class Compression {
  kNone,       // float32 both ways
  kFp16,       // float16 pushes and pulls, float32 master values
  kBf16,       // bfloat16 pushes and pulls
  kThreshold,  // threshold-encoded updates with residuals
};

// Everything a trainer runs with, parsed once from the flags
// (trainer/flags/flags.h) or set by a test. Each field states its default.
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
  // SYNC: the next step's pull goes out with this step's push rather than
  // after its answer; the arithmetic is unchanged. Default: true.
  bool overlap = true;
  // SYNC with overlap: each layer's gradient is pushed as soon as backward
  // has it, its next parameters pulled with it, and forward waits for each
  // layer's parameters only before that layer (models without a sparse
  // table, compression or replicas_to_aggregate). Default: false: each
  // layer is a call of its own, and on the canonical workloads the calls
  // cost more than the overlap gains (docs/performance.md).
  bool layer_pipeline = false;
  // ASYNC: the same, answered once this trainer's push is applied (models
  // without a sparse table). Default: false: it costs accuracy
  // (docs/performance.md).
  bool async_overlap = false;
  // ASYNC: the next step's pull runs during this step's compute and a push
  // is waited for only before the next push, so each step's parameters lack
  // this trainer's previous update. Default: false (docs/performance.md).
  bool async_prefetch = false;
  // Dense float32 values go through shared memory with pservers on this
  // host (ParamClient::UseSharedMemory). Default: true.
  bool shared_memory = true;
  // Dense float32 values go over the TCP lane with the other pservers that
  // serve one (ParamClient::UseTcpLane), on this many connections each,
  // retrying this long before sleeping on an answer (TcpLaneSocket).
  // Default: true, 2, 50 µs.
  bool tcp_lane = true;
  int tcp_lane_connections = 2;
  absl::Duration tcp_lane_spin = tcp_lane::kDefaultSpin;
  // After training, how long to wait for every other trainer to finish
  // (JobClient::FinishAndWait); zero: exit at once. Default: zero.
  absl::Duration wait_for_trainers = absl::ZeroDuration();
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
  // Distinguishes restarts of one trainer id; never 0, which pservers
  // refuse (trainer/main.cc draws 64 random bits).
  uint64_t incarnation = 1;

  // Dense compression. Default: none.
  Compression compression = Compression::kNone;
  // kThreshold: fixed threshold or DL4J's adaptive algorithm, residual
  // clipping, shake-up, residuals on or off (ThresholdPushEncoder).
  ThresholdPushEncoder::Options threshold;
  // kThreshold: zero the trainer's velocity where a message sent the value
  // (DGC's momentum factor masking). Default: true.
  bool momentum_masking = true;
  // kThreshold: pulls carry threshold-encoded changes (compressed pulls,
  // docs/compression.md) rather than dense float32. Default: true.
  bool compressed_pulls = true;

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
  // Copies of every dense block on distinct pservers (docs/replication.md):
  // a primary and replication - 1 backups; a dead primary's shard moves to
  // a backup. 1: none. Default: 1.
  int replication = 1;
  // With replication: how long an unreachable pserver is retried before
  // its shards fail over (--failover_after_ms). Default: 150 ms.
  absl::Duration failover_after = absl::Milliseconds(150);
  // With replication: how long a pserver that answers nothing is waited
  // for before it is taken out (--pserver_lease_ms; JobSpec). Default: 4 s.
  absl::Duration pserver_lease = absl::Seconds(4);

  // Wiring rather than flags: clients for heartbeats (one per pserver,
  // short retry budget), sent every heartbeat_interval; empty = no
  // heartbeats. Must outlive Run().
  std::vector<PsClientInterface*> heartbeat_servers;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // With replication > 1: clients (one per pserver) whose retries of an
  // unreachable pserver stop after --failover_after_ms, through which
  // pushes and pulls go; a call that then fails moves its shard to a
  // backup.
  std::vector<PsClientInterface*> failover_servers;
  // Polled between steps: when it becomes true the trainer leaves the job
  // and Run returns CANCELLED (SIGTERM). May be null.
  const std::atomic<bool>* stop_requested = nullptr;
  // Told of readiness, steps, evaluations and recoveries (monitoring); must
  // outlive the trainer. Null: none.
  TrainingObserver* observer = nullptr;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CORE_OPTIONS_H_
