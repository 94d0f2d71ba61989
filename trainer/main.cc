// trainer: trains a model against the pservers. See README.md and
// docs/flags.md.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/malloc_tuning.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "kernels/blas.h"
#include "kernels/cuda_backend.h"
#include "trainer/client/grpc_ps_client.h"
#include "trainer/trainer.h"

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
DEFINE_string(mode, "sync", "sync (a barrier per step) or async");
DEFINE_int32(max_staleness, -1,
             "async: a trainer may run at most this many "
             "steps ahead of the slowest; -1 = unbounded");
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
DEFINE_double(updates_threshold, 1e-3,
              "--compression=threshold: the threshold, or the adaptive "
              "algorithm's starting value");
DEFINE_bool(adaptive_threshold, true,
            "--compression=threshold: adapt the threshold to keep the sent "
            "fraction in [1e-4, 1e-2] (DL4J's AdaptiveThresholdAlgorithm); "
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
DEFINE_double(heartbeat_interval_s, 1.0,
              "seconds between heartbeats to every pserver (keep it well "
              "under the pservers' --trainer_timeout); 0 = none");
DEFINE_string(progress, "auto",
              "progress bar on stderr: auto (when stderr is "
              "a terminal), on or off");

namespace {

// One line naming the problem, then exit 2.
[[noreturn]] void Fail(const std::string& msg) {
  std::cerr << "trainer: " << msg << "\n";
  std::exit(2);
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

shardps::ModelConfig ReadConfig(const std::string& path) {
  if (path.empty()) Fail("--config is required (a .pbtxt model config)");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    Fail(absl::StrCat("--config=", path, ": no such file"));
  }
  std::ifstream f(path);
  if (!f) Fail(absl::StrCat("--config=", path, ": cannot read the file"));
  std::stringstream ss;
  ss << f.rdbuf();
  shardps::ModelConfig config;
  google::protobuf::TextFormat::Parser parser;
  OneLineErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(ss.str(), &config)) {
    Fail(absl::StrCat("--config=", path, ": ", errors.first));
  }
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  shardps::TuneMallocForLargeMessages();
  gflags::SetUsageMessage(
      "trainer --pservers=host1:7164,host2:7164 --trainer_id=k "
      "--num_gradient_servers=N --config=configs/fmnist_mlp.pbtxt");
  FLAGS_logtostderr = true;
  absl::Status s =
      shardps::ParseFlagsWithEnv(&argc, &argv, shardps::ProcessEnv());
  if (!s.ok()) Fail(std::string(s.message()));
  if (argc > 1) Fail(absl::StrCat("unexpected argument '", argv[1], "'"));
  google::InitGoogleLogging(argv[0]);

  shardps::TrainerOptions o;
  // Trainer id and count: flags or SHARDPS_ variables, then the scheduler.
  shardps::SchedulerRank sched;
  s = shardps::DetectSchedulerRank(shardps::ProcessEnv(), &sched);
  if (!s.ok()) Fail(std::string(s.message()));
  o.num_trainers = FLAGS_num_gradient_servers;
  if (!shardps::FlagWasSet("num_gradient_servers")) {
    o.num_trainers = sched.size.value_or(1);
  }
  if (o.num_trainers <= 0) {
    Fail(absl::StrCat("--num_gradient_servers must be positive, got ",
                      o.num_trainers));
  }
  o.trainer_id = FLAGS_trainer_id;
  if (!shardps::FlagWasSet("trainer_id")) {
    if (sched.rank.has_value()) {
      o.trainer_id = *sched.rank;
    } else if (o.num_trainers == 1) {
      o.trainer_id = 0;
    } else {
      Fail(
          "--trainer_id is not set and no scheduler variable "
          "(OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, "
          "JOB_COMPLETION_INDEX) gives it");
    }
  }
  if (o.trainer_id < 0 || o.trainer_id >= o.num_trainers) {
    const std::string source =
        shardps::FlagWasSet("trainer_id")
            ? absl::StrCat("--trainer_id=", o.trainer_id)
            : absl::StrCat(sched.source.substr(0, sched.source.find('/')), "=",
                           o.trainer_id, ": the trainer id");
    Fail(absl::StrCat(source, " must be in [0, ", o.num_trainers,
                      ") (the trainer count is ", o.num_trainers, ")"));
  }

  std::vector<std::string> addresses;
  for (absl::string_view a :
       absl::StrSplit(FLAGS_pservers, ',', absl::SkipWhitespace())) {
    auto addr = shardps::GrpcPsClient::NormalizeAddress(std::string(a));
    if (!addr.ok()) Fail(absl::StrCat("--pservers: ", addr.status().message()));
    addresses.push_back(*addr);
  }
  if (addresses.empty()) Fail("--pservers is required (host:port,...)");

  o.config = ReadConfig(FLAGS_config);
  shardps::DataConfig* data = o.config.mutable_data();
  if (!FLAGS_train_data.empty()) data->set_train_images(FLAGS_train_data);
  if (!FLAGS_test_data.empty()) data->set_test_images(FLAGS_test_data);
  if (!FLAGS_train_labels.empty()) data->set_train_labels(FLAGS_train_labels);
  if (!FLAGS_test_labels.empty()) data->set_test_labels(FLAGS_test_labels);
  if (FLAGS_mode == "sync") {
    o.mode = shardps::SYNC;
  } else if (FLAGS_mode == "async") {
    o.mode = shardps::ASYNC;
  } else {
    Fail(absl::StrCat("--mode=", FLAGS_mode, ": must be sync or async"));
  }
  if (FLAGS_max_staleness < -1) Fail("--max_staleness must be >= -1");
  if (FLAGS_max_staleness >= 0 && o.mode != shardps::ASYNC) {
    Fail("--max_staleness applies to --mode=async only");
  }
  o.max_staleness = FLAGS_max_staleness;
  o.num_passes = FLAGS_num_passes > 0        ? FLAGS_num_passes
                 : o.config.num_passes() > 0 ? o.config.num_passes()
                                             : 1;
  if (FLAGS_num_passes < 0) Fail("--num_passes must be >= 0");
  if (FLAGS_max_steps < 0) Fail("--max_steps must be >= 0");
  o.max_steps = FLAGS_max_steps;
  if (FLAGS_batch_size < 0) Fail("--batch_size must be >= 0");
  o.batch_size = FLAGS_batch_size > 0        ? FLAGS_batch_size
                 : o.config.batch_size() > 0 ? o.config.batch_size()
                                             : 64;
  o.shuffle = FLAGS_shuffle;
  o.shuffle_seed = FLAGS_seed;
  o.metrics_file = FLAGS_metrics_file;
  o.save_dir = FLAGS_save_dir;
  o.load_dir = FLAGS_load_dir;
  if (FLAGS_log_every_steps <= 0) Fail("--log_every_steps must be positive");
  o.log_every_steps = FLAGS_log_every_steps;
  if (FLAGS_num_threads <= 0) Fail("--num_threads must be positive");
  if (FLAGS_ready_timeout_s <= 0) Fail("--ready_timeout_s must be positive");
  if (FLAGS_rpc_retry_s <= 0) Fail("--rpc_retry_s must be positive");
  o.ready_timeout = absl::Seconds(FLAGS_ready_timeout_s);
  if (FLAGS_progress == "auto") {
    o.progress_bar = isatty(STDERR_FILENO);
  } else if (FLAGS_progress == "on" || FLAGS_progress == "off") {
    o.progress_bar = FLAGS_progress == "on";
  } else {
    Fail("--progress must be auto, on or off");
  }
  if (FLAGS_compression != "none" && FLAGS_compression != "fp16" &&
      FLAGS_compression != "bf16" && FLAGS_compression != "threshold") {
    Fail(absl::StrCat("--compression=", FLAGS_compression,
                      ": must be none, fp16, bf16 or threshold"));
  }
  o.compression = FLAGS_compression;
  if (!(FLAGS_updates_threshold > 0) ||
      !std::isfinite(FLAGS_updates_threshold)) {
    Fail("--updates_threshold must be positive and finite");
  }
  if (FLAGS_shake_frequency < 0) Fail("--shake_frequency must be >= 0");
  o.updates_threshold = FLAGS_updates_threshold;
  o.adaptive_threshold = FLAGS_adaptive_threshold;
  o.residual_clipping = FLAGS_residual_clipping;
  o.shake_frequency = FLAGS_shake_frequency;
  o.use_residual = FLAGS_residual;
  o.momentum_masking = FLAGS_momentum_masking;
  if (!(FLAGS_threshold_min_sparsity > 0) ||
      !(FLAGS_threshold_min_sparsity <= FLAGS_threshold_max_sparsity) ||
      !(FLAGS_threshold_max_sparsity < 1)) {
    Fail(
        "--threshold_min_sparsity and --threshold_max_sparsity need "
        "0 < min <= max < 1");
  }
  o.min_sparsity = FLAGS_threshold_min_sparsity;
  o.max_sparsity = FLAGS_threshold_max_sparsity;
  if (FLAGS_use_gpu) {
    absl::StatusOr<int> devices = shardps::CudaDeviceCount();
    if (!devices.ok()) {
      Fail(absl::StrCat("--use_gpu: no usable CUDA device (",
                        devices.status().message(), ")"));
    }
    if (*devices == 0) {
      Fail("--use_gpu: no usable CUDA device (cudaGetDeviceCount: 0 devices)");
    }
    o.gpu_id = FLAGS_gpu_id;
    if (o.gpu_id < 0) {
      int local_rank = 0;
      s = shardps::DetectLocalRank(shardps::ProcessEnv(), &local_rank);
      if (!s.ok()) Fail(absl::StrCat("--gpu_id: ", s.message()));
      o.gpu_id = local_rank % *devices;
    } else if (o.gpu_id >= *devices) {
      Fail(absl::StrCat("--gpu_id=", o.gpu_id, ": only ", *devices,
                        " CUDA device(s) visible"));
    }
    o.use_gpu = true;
  } else if (shardps::FlagWasSet("gpu_id")) {
    Fail("--gpu_id applies to --use_gpu only");
  }
  o.cpu_threads = FLAGS_num_threads;
  if (FLAGS_checkpoint_every_steps < 0) {
    Fail("--checkpoint_every_steps must be >= 0");
  }
  o.checkpoint_every_steps = FLAGS_checkpoint_every_steps;
  if (FLAGS_replicas_to_aggregate < 0 ||
      FLAGS_replicas_to_aggregate > o.num_trainers) {
    Fail(absl::StrCat("--replicas_to_aggregate must be in [0, ", o.num_trainers,
                      "] (the trainer count)"));
  }
  if (FLAGS_replicas_to_aggregate > 0 && o.mode != shardps::SYNC) {
    Fail("--replicas_to_aggregate applies to --mode=sync only");
  }
  o.replicas_to_aggregate = FLAGS_replicas_to_aggregate;
  if (o.replicas_to_aggregate > 0 && o.checkpoint_every_steps > 0) {
    Fail(
        "--replicas_to_aggregate and --checkpoint_every_steps cannot be "
        "combined yet: with backup workers the pservers share no step "
        "boundary to checkpoint at (docs/fault_tolerance.md)");
  }
  if (!(FLAGS_heartbeat_interval_s >= 0) ||
      !std::isfinite(FLAGS_heartbeat_interval_s)) {
    Fail("--heartbeat_interval_s must be >= 0");
  }
  // 64 random bits: a restarted trainer is told apart from its previous
  // process.
  o.incarnation = (uint64_t{std::random_device{}()} << 32) ^
                  std::random_device{}() ^
                  static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  shardps::SetBlasThreads(FLAGS_num_threads);

  shardps::RetryTimer timer;
  shardps::RpcOptions rpc;
  rpc.retry_budget = absl::Seconds(FLAGS_rpc_retry_s);
  std::vector<std::unique_ptr<shardps::GrpcPsClient>> clients;
  std::vector<shardps::PsClientInterface*> servers;
  for (const auto& a : addresses) {
    clients.push_back(shardps::GrpcPsClient::Create(a, rpc, &timer));
    servers.push_back(clients.back().get());
  }
  // Heartbeats get clients of their own that give up within an interval,
  // so that one unreachable pserver never holds them up.
  std::vector<std::unique_ptr<shardps::GrpcPsClient>> hb_clients;
  if (FLAGS_heartbeat_interval_s > 0) {
    shardps::RpcOptions hb;
    hb.attempt_deadline = absl::Seconds(FLAGS_heartbeat_interval_s * 2 + 1);
    hb.retry_budget = absl::Seconds(FLAGS_heartbeat_interval_s);
    for (const auto& a : addresses) {
      hb_clients.push_back(shardps::GrpcPsClient::Create(a, hb, &timer));
      o.heartbeat_servers.push_back(hb_clients.back().get());
    }
    o.heartbeat_interval = absl::Seconds(FLAGS_heartbeat_interval_s);
  }
  // SIGTERM and SIGINT: leave the job between two steps and die of the
  // signal. A trainer that cannot reach the end of its step within 1 s (it
  // waits for a peer, or for the chief) dies of it then; so does a second
  // signal.
  static std::atomic<int> stop_signal{0};
  static std::atomic<bool> stop_requested{false};
  o.stop_requested = &stop_requested;
  struct sigaction sa = {};
  sa.sa_handler = [](int sig) {
    if (stop_requested.exchange(true)) {
      signal(sig, SIG_DFL);
      raise(sig);
    }
    stop_signal.store(sig);
  };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  auto die_of_signal = [] {
    const int sig = stop_signal.load() != 0 ? stop_signal.load() : SIGTERM;
    signal(sig, SIG_DFL);
    raise(sig);
  };
  std::thread([die_of_signal] {
    while (!stop_requested.load()) absl::SleepFor(absl::Milliseconds(100));
    absl::SleepFor(absl::Seconds(1));
    die_of_signal();
  }).detach();
  shardps::Trainer trainer(o, servers);
  s = trainer.Run();
  if (absl::IsCancelled(s)) {
    std::cerr << "trainer: " << s.message() << "\n";
    die_of_signal();
  }
  if (!s.ok()) {
    LOG(ERROR) << "trainer " << o.trainer_id << " failed: " << s;
    std::cerr << "trainer: " << s.message() << "\n";
    return 1;
  }
  const auto& r = trainer.result();
  LOG(INFO) << "trainer " << o.trainer_id << " done: " << r.steps
            << " steps, test accuracy " << r.test_accuracy;
  return 0;
}
