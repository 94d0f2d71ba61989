#include "trainer/flags/flags.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/job_id.h"
#include "base/status_macros.h"
#include "common/launch/address.h"
#include "common/launch/launch_env.h"
#include "gflags/gflags.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "kernels/cuda/cuda_backend.h"
#include "trainer/flags/config_override.h"

DEFINE_string(pservers, "",
              "comma-separated pserver addresses, host or "
              "host:port (port 7164 by default); the same order everywhere");
DEFINE_int32(trainer_id, -1,
             "this trainer's index in [0, N); unset: from "
             "the scheduler (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, "
             "JOB_COMPLETION_INDEX)");
DEFINE_int32(num_gradient_servers, 0,
             "number of trainers N; unset: from the "
             "scheduler, else 1");
DEFINE_string(config, "", "model and job config, protobuf text format");
DEFINE_string(config_set, "",
              "fields of --config to change, path=value,...: e.g. "
              "optimizer.learning_rate=0.1,layers[fc1].output_dim=512 "
              "(docs/config.md); a sweep's trials differ only in flags");
DEFINE_string(job_id, "default",
              "the job on the pservers (several jobs may share pservers; "
              "each has its own tables, trainers and checkpoints)");
DEFINE_string(mode, "sync", "sync (a barrier per step) or async");
DEFINE_int32(max_staleness, -1,
             "async: a trainer may run at most this many "
             "steps ahead of the slowest; -1 = unbounded");
DEFINE_bool(overlap, true,
            "sync: send the next step's pull with this step's push instead "
            "of after its answer (the same parameters, bit for bit)");
DEFINE_bool(layer_pipeline, false,
            "sync, with --overlap: push each layer's gradient as soon as "
            "backward has it, and wait for each layer's parameters only "
            "before its forward (the same parameters, bit for bit; models "
            "without a sparse table, compression or replicas_to_aggregate). "
            "Off by default: a call per layer cost more than it hid on the "
            "canonical workloads");
DEFINE_bool(async_overlap, false,
            "async: send the next step's pull with this step's push; the "
            "pserver answers it once the push is applied. Faster, but it "
            "sees the other trainers' updates later (lower accuracy)");
DEFINE_bool(async_prefetch, false,
            "async: pull the next step's parameters during this step's "
            "compute and start it without waiting for this step's push; "
            "faster, but each step misses this trainer's last update");
DEFINE_bool(shared_memory, true,
            "move dense float32 values through shared memory with pservers "
            "on this host (same user and PID namespace); others stay on TCP");
DEFINE_bool(tcp_lane, true,
            "move dense float32 values over TCP connections of their own "
            "with the pservers that serve them (not with TLS), without "
            "gRPC's copies (docs/wire_protocol.md, \"TCP lane\")");
DEFINE_int32(tcp_lane_connections, 2,
             "TCP lane connections to each pserver, in [1, 8]: the calls of "
             "a step to one pserver go over them in parallel");
DEFINE_int32(tcp_lane_spin_us, 50,
             "microseconds a TCP lane connection that would wait polls "
             "before it sleeps, in [0, 10000], while at most one other lane "
             "call or polling connection is counted: costs up to that much "
             "of a core per call, saves a wake-up; 0 when cores are scarce "
             "(docs/performance.md, \"TCP lane\")");
DEFINE_int32(wait_for_trainers_s, 0,
             "after training, wait up to this many seconds for every other "
             "trainer of the job to finish too before exiting, so that a "
             "pserver that stops with this trainer (its pod's sidecar, "
             "configs/k8s/beside) serves them to the end; 0 = exit at once");
DEFINE_int32(num_passes, 0, "passes over the data; 0 = the config's (1)");
DEFINE_int64(max_steps, 0, "stop after this many steps; 0 = no limit");
DEFINE_int32(batch_size, 0, "examples per step per trainer; 0 = the config's");
DEFINE_bool(shuffle, false, "shuffle the local data each pass");
DEFINE_uint64(seed, 1, "seed of the per-pass shuffle");
DEFINE_string(metrics_file, "", "append JSON metrics lines to this file");
DEFINE_string(save_dir, "", "the chief saves the trained model here");
DEFINE_string(load_dir, "", "the chief starts from the model saved here");
DEFINE_int32(log_every_steps, 50, "a step metrics line every this many steps");
DEFINE_int32(num_threads, 1,
             "CPU backend: BLAS threads, and threads for per-example work "
             "(im2col, pooling)");
DEFINE_int32(ready_timeout_s, 600,
             "how long to wait for the chief to "
             "initialise the job");
DEFINE_int32(rpc_retry_s, 600,
             "how long a call to a pserver keeps retrying "
             "while the pserver is unavailable");
DEFINE_string(train_data, "",
              "training data file(s), replacing the config's train_images "
              "(LIBSVM: the libsvm files; IDX: the image files)");
DEFINE_string(test_data, "", "test data file(s), replacing test_images");
DEFINE_string(train_labels, "", "IDX: label file(s), replacing train_labels");
DEFINE_string(test_labels, "", "IDX: label file(s), replacing test_labels");
DEFINE_string(compression, "none",
              "dense gradient compression: none, fp16 or bf16 (16-bit "
              "pushes and pulls, float32 master weights on the pservers), "
              "threshold (threshold encoding with residuals)");
DEFINE_double(updates_threshold, 0,
              "--compression=threshold: the threshold on the trainer's "
              "updates (fixed), or the adaptive algorithm's starting value; "
              "0: per table by its optimizer, 3e-2 for MOMENTUM and 1e-2 "
              "for the others (chosen by sweeps, docs/tuning.md)");
DEFINE_bool(adaptive_threshold, false,
            "--compression=threshold: adapt the threshold to keep the sent "
            "fraction in [--threshold_min_sparsity, "
            "--threshold_max_sparsity] (DL4J's AdaptiveThresholdAlgorithm; "
            "DL4J's default, behind the fixed threshold in docs/tuning.md); "
            "false: fixed");
DEFINE_double(threshold_min_sparsity, 1e-4,
              "--compression=threshold, adaptive: the threshold falls while "
              "fewer than this fraction of values is sent");
DEFINE_double(threshold_max_sparsity, 1e-2,
              "--compression=threshold, adaptive: the threshold rises while "
              "more than this fraction is sent");
DEFINE_bool(momentum_masking, true,
            "--compression=threshold: zero the trainer's momentum where a "
            "value was sent (DGC's momentum factor masking)");
DEFINE_bool(compressed_pulls, true,
            "--compression=threshold: pulls carry the threshold-encoded "
            "change since the trainer's copy, the pserver keeping the "
            "residual (docs/compression.md, \"Compressed pulls\"); false: "
            "pulls stay dense float32");
DEFINE_bool(residual_clipping, false,
            "--compression=threshold: clip the residual to +-5 thresholds "
            "every 5 steps");
DEFINE_int64(shake_frequency, 0,
             "--compression=threshold: every this many steps send a bitmap "
             "of the residual at a third of the threshold; 0: never");
DEFINE_bool(residual, true,
            "--compression=threshold: keep what is not sent for later "
            "(false: drop it, for comparison)");
DEFINE_bool(use_gpu, false,
            "run forward and backward on a CUDA device (the CUDA backend); "
            "without a usable device the trainer stops at start");
DEFINE_int32(gpu_id, -1,
             "--use_gpu: the CUDA device; -1: the local rank "
             "(OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID, else 0) modulo "
             "the visible devices");
DEFINE_int64(checkpoint_every_steps, 0,
             "the chief asks every pserver for a checkpoint every this many "
             "steps (pservers need --checkpoint_dir); 0 = never");
DEFINE_int32(replicas_to_aggregate, 0,
             "sync: apply a step once this many trainers have pushed it "
             "(backup workers; late pushes are dropped); 0 = all live "
             "trainers");
DEFINE_int32(replication, 1,
             "copies of every dense block on distinct pservers (a primary "
             "and replication-1 backups, docs/replication.md): with 2, the "
             "job goes on without losing a step when a pserver dies; 1 = "
             "none. At most the pserver count");
DEFINE_int32(failover_after_ms, 150,
             "with --replication > 1: a pserver whose host refuses "
             "connections (the process is gone) for this long is taken out "
             "of the job, and its shards go to their backups; the pservers "
             "take such a backup out after as long");
DEFINE_int32(pserver_lease_ms, 4000,
             "with --replication > 1: a pserver that answers nothing (cut "
             "off, paused, losing packets) is waited for this long before "
             "it is taken out of the job; the pservers take a silent backup "
             "out after as long (docs/replication.md, \"Faults\")");
DEFINE_double(heartbeat_interval_s, 1.0,
              "seconds between heartbeats to every pserver (keep it well "
              "under the pservers' --trainer_timeout); 0 = none");
DEFINE_string(progress, "auto",
              "progress bar on stderr: auto (when stderr is "
              "a terminal), on or off");

namespace shardps {
namespace {

absl::Status Bad(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

class OneLineErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first.empty()) {
      first = absl::StrCat("line ", line + 1, " column ", column + 1, ": ",
                           message);
    }
  }
  std::string first;
};

// Trainer id and count: flags or SHARDPS_ variables, then the scheduler.
absl::Status IdentityFromFlags(const GetEnvFn& env, TrainerOptions* o) {
  SchedulerRank sched;
  RETURN_IF_ERROR(DetectSchedulerRank(env, &sched));
  // Kubeflow's TF_CONFIG and PaddlePaddle's PADDLE_INIT_* come last.
  if (!sched.rank.has_value()) RETURN_IF_ERROR(LaunchRank(env, &sched));
  o->num_trainers = FLAGS_num_gradient_servers;
  if (!FlagWasSet("num_gradient_servers")) {
    o->num_trainers = sched.size.value_or(1);
  }
  if (o->num_trainers <= 0) {
    return Bad(absl::StrCat("--num_gradient_servers must be positive, got ",
                            o->num_trainers));
  }
  o->trainer_id = FLAGS_trainer_id;
  if (!FlagWasSet("trainer_id")) {
    if (sched.rank.has_value()) {
      o->trainer_id = *sched.rank;
    } else if (o->num_trainers == 1) {
      o->trainer_id = 0;
    } else {
      return Bad(
          "--trainer_id is not set and no scheduler variable "
          "(OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, "
          "JOB_COMPLETION_INDEX, TF_CONFIG, PADDLE_INIT_TRAINER_ID) gives "
          "it");
    }
  }
  if (o->trainer_id < 0 || o->trainer_id >= o->num_trainers) {
    const std::string source =
        FlagWasSet("trainer_id")
            ? absl::StrCat("--trainer_id=", o->trainer_id)
            : absl::StrCat(sched.source.substr(0, sched.source.find('/')), "=",
                           o->trainer_id, ": the trainer id");
    return Bad(absl::StrCat(source, " must be in [0, ", o->num_trainers,
                            ") (the trainer count is ", o->num_trainers, ")"));
  }
  return absl::OkStatus();
}

// The model and its data.
absl::Status ModelFromFlags(ModelSource model, TrainerOptions* o) {
  if (model == ModelSource::kConfig) {
    ASSIGN_OR_RETURN(o->config, ReadModelConfig(FLAGS_config));
    RETURN_IF_ERROR(ApplyConfigSet(FLAGS_config_set, &o->config));
  } else if (!FLAGS_config.empty() || !FLAGS_config_set.empty()) {
    return Bad(
        "--config and --config_set are the trainer binary's: this job's "
        "model is its caller's (a Python job's torch module)");
  }
  DataConfig* data = o->config.mutable_data();
  if (!FLAGS_train_data.empty()) data->set_train_images(FLAGS_train_data);
  if (!FLAGS_test_data.empty()) data->set_test_images(FLAGS_test_data);
  if (!FLAGS_train_labels.empty()) data->set_train_labels(FLAGS_train_labels);
  if (!FLAGS_test_labels.empty()) data->set_test_labels(FLAGS_test_labels);
  return absl::OkStatus();
}

// Sync or async, and when the transfers go.
absl::Status ModeFromFlags(TrainerOptions* o) {
  if (FLAGS_mode == "sync") {
    o->mode = SYNC;
  } else if (FLAGS_mode == "async") {
    o->mode = ASYNC;
  } else {
    return Bad(absl::StrCat("--mode=", FLAGS_mode, ": must be sync or async"));
  }
  if (FLAGS_max_staleness < -1) return Bad("--max_staleness must be >= -1");
  if (FLAGS_max_staleness >= 0 && o->mode != ASYNC) {
    return Bad("--max_staleness applies to --mode=async only");
  }
  o->max_staleness = FLAGS_max_staleness;
  o->overlap = FLAGS_overlap;
  o->layer_pipeline = FLAGS_layer_pipeline;
  if (FLAGS_async_prefetch && o->mode != ASYNC) {
    return Bad("--async_prefetch applies to --mode=async only");
  }
  o->async_prefetch = FLAGS_async_prefetch;
  if (FLAGS_async_overlap && o->mode != ASYNC) {
    return Bad("--async_overlap applies to --mode=async only");
  }
  if (FLAGS_async_overlap && FLAGS_async_prefetch) {
    return Bad(
        "--async_overlap and --async_prefetch exclude each other "
        "(--async_prefetch already pulls ahead)");
  }
  o->async_overlap = FLAGS_async_overlap;
  return absl::OkStatus();
}

// The shape of the run, its files and what it tells.
absl::Status RunFromFlags(ModelSource model, TrainerOptions* o) {
  RETURN_IF_ERROR(ModelFromFlags(model, o));
  RETURN_IF_ERROR(ModeFromFlags(o));
  o->num_passes = FLAGS_num_passes > 0         ? FLAGS_num_passes
                  : o->config.num_passes() > 0 ? o->config.num_passes()
                                               : 1;
  if (FLAGS_num_passes < 0) return Bad("--num_passes must be >= 0");
  if (FLAGS_max_steps < 0) return Bad("--max_steps must be >= 0");
  o->max_steps = FLAGS_max_steps;
  if (FLAGS_batch_size < 0) return Bad("--batch_size must be >= 0");
  o->batch_size = FLAGS_batch_size > 0         ? FLAGS_batch_size
                  : o->config.batch_size() > 0 ? o->config.batch_size()
                                               : 64;
  if (FLAGS_wait_for_trainers_s < 0) {
    return Bad("--wait_for_trainers_s must be >= 0");
  }
  o->wait_for_trainers = absl::Seconds(FLAGS_wait_for_trainers_s);
  o->shuffle = FLAGS_shuffle;
  o->shuffle_seed = FLAGS_seed;
  o->metrics_file = FLAGS_metrics_file;
  o->save_dir = FLAGS_save_dir;
  o->load_dir = FLAGS_load_dir;
  if (FLAGS_log_every_steps <= 0) {
    return Bad("--log_every_steps must be positive");
  }
  o->log_every_steps = FLAGS_log_every_steps;
  if (FLAGS_num_threads <= 0) return Bad("--num_threads must be positive");
  o->cpu_threads = FLAGS_num_threads;
  if (FLAGS_ready_timeout_s <= 0) {
    return Bad("--ready_timeout_s must be positive");
  }
  o->ready_timeout = absl::Seconds(FLAGS_ready_timeout_s);
  if (FLAGS_progress == "auto") {
    o->progress_bar = isatty(STDERR_FILENO);
  } else if (FLAGS_progress == "on" || FLAGS_progress == "off") {
    o->progress_bar = FLAGS_progress == "on";
  } else {
    return Bad("--progress must be auto, on or off");
  }
  return absl::OkStatus();
}

// How dense values travel besides gRPC: shared memory, the TCP lane.
absl::Status ValueLanesFromFlags(TrainerOptions* o) {
  o->shared_memory = FLAGS_shared_memory;
  if (FLAGS_tcp_lane_connections < 1 || FLAGS_tcp_lane_connections > 8) {
    return Bad("--tcp_lane_connections must be in [1, 8]");
  }
  o->tcp_lane = FLAGS_tcp_lane;
  o->tcp_lane_connections = FLAGS_tcp_lane_connections;
  if (FLAGS_tcp_lane_spin_us < 0 || FLAGS_tcp_lane_spin_us > 10000) {
    return Bad("--tcp_lane_spin_us must be in [0, 10000]");
  }
  o->tcp_lane_spin = absl::Microseconds(FLAGS_tcp_lane_spin_us);
  return absl::OkStatus();
}

absl::Status CompressionFromFlags(TrainerOptions* o) {
  if (FLAGS_compression == "none") {
    o->compression = Compression::kNone;
  } else if (FLAGS_compression == "fp16") {
    o->compression = Compression::kFp16;
  } else if (FLAGS_compression == "bf16") {
    o->compression = Compression::kBf16;
  } else if (FLAGS_compression == "threshold") {
    o->compression = Compression::kThreshold;
  } else {
    return Bad(absl::StrCat("--compression=", FLAGS_compression,
                            ": must be none, fp16, bf16 or threshold"));
  }
  if (!(FLAGS_updates_threshold >= 0) ||
      !std::isfinite(FLAGS_updates_threshold)) {
    return Bad(
        "--updates_threshold must be positive and finite, or 0 (per table "
        "by its optimizer)");
  }
  if (FLAGS_shake_frequency < 0) return Bad("--shake_frequency must be >= 0");
  if (!(FLAGS_threshold_min_sparsity > 0) ||
      !(FLAGS_threshold_min_sparsity <= FLAGS_threshold_max_sparsity) ||
      !(FLAGS_threshold_max_sparsity < 1)) {
    return Bad(
        "--threshold_min_sparsity and --threshold_max_sparsity need "
        "0 < min <= max < 1");
  }
  ThresholdPushEncoder::Options& t = o->threshold;
  t.threshold = FLAGS_updates_threshold;
  t.adaptive = FLAGS_adaptive_threshold;
  t.clip = FLAGS_residual_clipping;
  t.shake_frequency = FLAGS_shake_frequency;
  t.use_residual = FLAGS_residual;
  t.min_sparsity = FLAGS_threshold_min_sparsity;
  t.max_sparsity = FLAGS_threshold_max_sparsity;
  o->momentum_masking = FLAGS_momentum_masking;
  o->compressed_pulls = FLAGS_compressed_pulls;
  return absl::OkStatus();
}

absl::Status DeviceFromFlags(const GetEnvFn& env, TrainerOptions* o) {
  if (!FLAGS_use_gpu) {
    if (FlagWasSet("gpu_id")) return Bad("--gpu_id applies to --use_gpu only");
    return absl::OkStatus();
  }
  absl::StatusOr<int> devices = CudaDeviceCount();
  if (!devices.ok()) {
    return Bad(absl::StrCat("--use_gpu: no usable CUDA device (",
                            devices.status().message(), ")"));
  }
  if (*devices == 0) {
    return Bad(
        "--use_gpu: no usable CUDA device (cudaGetDeviceCount: 0 devices)");
  }
  o->gpu_id = FLAGS_gpu_id;
  if (o->gpu_id < 0) {
    int local_rank = 0;
    absl::Status s = DetectLocalRank(env, &local_rank);
    if (!s.ok()) return Bad(absl::StrCat("--gpu_id: ", s.message()));
    o->gpu_id = local_rank % *devices;
  } else if (o->gpu_id >= *devices) {
    return Bad(absl::StrCat("--gpu_id=", o->gpu_id, ": only ", *devices,
                            " CUDA device(s) visible"));
  }
  o->use_gpu = true;
  return absl::OkStatus();
}

absl::Status FaultToleranceFromFlags(TrainerOptions* o) {
  if (FLAGS_checkpoint_every_steps < 0) {
    return Bad("--checkpoint_every_steps must be >= 0");
  }
  o->checkpoint_every_steps = FLAGS_checkpoint_every_steps;
  if (FLAGS_replicas_to_aggregate < 0 ||
      FLAGS_replicas_to_aggregate > o->num_trainers) {
    return Bad(absl::StrCat("--replicas_to_aggregate must be in [0, ",
                            o->num_trainers, "] (the trainer count)"));
  }
  if (FLAGS_replicas_to_aggregate > 0 && o->mode != SYNC) {
    return Bad("--replicas_to_aggregate applies to --mode=sync only");
  }
  o->replicas_to_aggregate = FLAGS_replicas_to_aggregate;
  if (FLAGS_replication < 1) return Bad("--replication must be >= 1");
  o->replication = FLAGS_replication;
  if (FLAGS_failover_after_ms < 1 || FLAGS_failover_after_ms > 60000) {
    return Bad("--failover_after_ms must be in [1, 60000]");
  }
  o->failover_after = absl::Milliseconds(FLAGS_failover_after_ms);
  if (FLAGS_pserver_lease_ms < 100 || FLAGS_pserver_lease_ms > 600000) {
    return Bad("--pserver_lease_ms must be in [100, 600000]");
  }
  o->pserver_lease = absl::Milliseconds(FLAGS_pserver_lease_ms);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ReadModelConfig(const std::string& path) {
  if (path.empty()) return Bad("--config is required (a .pbtxt model config)");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Bad(absl::StrCat("--config=", path, ": no such file"));
  }
  std::ifstream f(path);
  if (!f) return Bad(absl::StrCat("--config=", path, ": cannot read the file"));
  std::stringstream ss;
  ss << f.rdbuf();
  ModelConfig config;
  google::protobuf::TextFormat::Parser parser;
  OneLineErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(ss.str(), &config)) {
    return Bad(absl::StrCat("--config=", path, ": ", errors.first));
  }
  return config;
}

absl::StatusOr<TrainerOptions> TrainerOptionsFromFlags(const GetEnvFn& env,
                                                       ModelSource model) {
  TrainerOptions o;
  RETURN_IF_ERROR(IdentityFromFlags(env, &o));
  RETURN_IF_ERROR(ConnectionOptionsFromFlags().status());
  RETURN_IF_ERROR(RunFromFlags(model, &o));
  RETURN_IF_ERROR(ValueLanesFromFlags(&o));
  RETURN_IF_ERROR(CompressionFromFlags(&o));
  RETURN_IF_ERROR(DeviceFromFlags(env, &o));
  RETURN_IF_ERROR(FaultToleranceFromFlags(&o));
  return o;
}

absl::StatusOr<ConnectionOptions> ConnectionOptionsFromFlags() {
  ConnectionOptions c;
  for (absl::string_view a :
       absl::StrSplit(FLAGS_pservers, ',', absl::SkipWhitespace())) {
    auto addr = NormalizeAddress(std::string(a));
    if (!addr.ok()) {
      return Bad(absl::StrCat("--pservers: ", addr.status().message()));
    }
    c.addresses.push_back(*addr);
  }
  if (c.addresses.empty()) return Bad("--pservers is required (host:port,...)");
  if (FLAGS_rpc_retry_s <= 0) return Bad("--rpc_retry_s must be positive");
  c.rpc_retry = absl::Seconds(FLAGS_rpc_retry_s);
  if (!(FLAGS_heartbeat_interval_s >= 0) ||
      !std::isfinite(FLAGS_heartbeat_interval_s)) {
    return Bad("--heartbeat_interval_s must be >= 0");
  }
  c.heartbeat_interval = absl::Seconds(FLAGS_heartbeat_interval_s);
  auto security = LoadTransportSecurity(TransportSecurityFilesFromFlags(),
                                        TransportRole::kClient);
  if (!security.ok()) return security.status();
  c.security = *std::move(security);
  if (absl::Status s = ValidateJobId(FLAGS_job_id); !s.ok()) {
    return Bad(absl::StrCat("--job_id: ", s.message()));
  }
  c.job_id = FLAGS_job_id;
  return c;
}

std::vector<FlagGroup> TrainerFlagGroups() {
  return {
      {"Cluster",
       {"pservers", "trainer_id", "num_gradient_servers", "job_id",
        "ready_timeout_s", "rpc_retry_s", "shared_memory", "tcp_lane",
        "tcp_lane_connections", "tcp_lane_spin_us", "wait_for_trainers_s"}},
      {"Model and data",
       {"config", "config_set", "train_data", "test_data", "train_labels",
        "test_labels", "num_passes", "max_steps", "batch_size", "shuffle",
        "seed", "load_dir", "save_dir"}},
      {"Synchronisation (docs/design.md, \"Synchronous SGD\")",
       {"mode", "max_staleness", "replicas_to_aggregate", "overlap",
        "layer_pipeline", "async_overlap", "async_prefetch"}},
      {"Compression (docs/compression.md)",
       {"compression", "updates_threshold", "adaptive_threshold",
        "threshold_min_sparsity", "threshold_max_sparsity", "momentum_masking",
        "compressed_pulls", "residual_clipping", "shake_frequency",
        "residual"}},
      {"Faults and checkpoints (docs/fault_tolerance.md)",
       {"replication", "failover_after_ms", "pserver_lease_ms",
        "heartbeat_interval_s", "checkpoint_every_steps"}},
      {"Compute", {"num_threads", "use_gpu", "gpu_id"}},
      {"Output",
       {"metrics_file", "log_every_steps", "progress", "health_port",
        "health_port_file"}},
  };
}

absl::StatusOr<TrainerLaunch> ParseTrainerFlags(int* argc, char*** argv,
                                                const GetEnvFn& env,
                                                ModelSource model) {
  RETURN_IF_ERROR(ParseFlagsWithEnv(argc, argv, env));
  if (*argc > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", (*argv)[1], "'"));
  }
  ASSIGN_OR_RETURN(const std::vector<FlagAlias> aliases,
                   LaunchAliases(env, LaunchRole::kTrainer));
  RETURN_IF_ERROR(ApplyFlagAliases(aliases));
  TrainerLaunch launch;
  ASSIGN_OR_RETURN(launch.options, TrainerOptionsFromFlags(env, model));
  ASSIGN_OR_RETURN(launch.connection, ConnectionOptionsFromFlags());
  launch.options.incarnation = NewIncarnation();
  return launch;
}

uint64_t NewIncarnation() {
  const uint64_t x = (uint64_t{std::random_device{}()} << 32) ^
                     std::random_device{}() ^
                     static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  return x == 0 ? 1 : x;  // 0 means "none sent"
}

}  // namespace shardps
