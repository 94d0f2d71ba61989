// pserver: holds a shard of a model's parameters and applies the optimizer.
// See README.md and docs/flags.md.
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/launch/accept_guard.h"
#include "common/launch/address.h"
#include "common/launch/flag_help.h"
#include "common/launch/flags.h"
#include "common/launch/launch_env.h"
#include "common/launch/malloc_tuning.h"
#include "common/launch/process_limits.h"
#include "common/monitoring/monitoring.h"
#include "common/storage/env.h"
#include "common/storage/fault_injection_env.h"
#include "common/transport/transport_security.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "pserver/server/grpc_server.h"
#include "pserver/store/disk/row_store.h"

DEFINE_int32(port, shardps::kDefaultPort,
             "TCP port to serve on; 0 picks a free port");
DEFINE_string(port_file, "",
              "if set, write the bound port to this file once serving");
DEFINE_int32(num_gradient_servers, 0,
             "trainers in the job; 0 accepts the count the chief sends");
DEFINE_string(host, "0.0.0.0", "address to listen on");
DEFINE_bool(tcp_lane, true,
            "serve trainers' float32 dense pushes and pulls on a TCP port of "
            "their own, without gRPC's copies (docs/wire_protocol.md, \"TCP "
            "lane\"); never with TLS");
DEFINE_int32(tcp_lane_port, 0,
             "the TCP lane's port on --host; 0 picks a free one (trainers "
             "learn it over gRPC)");
DEFINE_int32(tcp_lane_spin_us, 50,
             "microseconds a TCP lane connection that would wait (for the "
             "next call, or within one) polls before it sleeps, in [0, "
             "10000], while at most one other lane call or polling "
             "connection is counted: "
             "costs up to that much of a core per wait, saves a wake-up; 0 "
             "when cores are scarce "
             "(docs/performance.md, \"TCP lane\")");
DEFINE_int32(max_pull_wait_s, 20,
             "a pull that waits longer is answered DEADLINE_EXCEEDED naming "
             "the trainers it waits for (the trainer retries)");

DEFINE_int32(trainer_timeout, 60,
             "a registered trainer silent this many seconds (no heartbeat, "
             "pull or push), or one that has not sent its part of a sync "
             "step this long after another did, is dropped from the "
             "barrier; 0 = never");
DEFINE_string(checkpoint_dir, "",
              "directory for this pserver's checkpoints, a folder per job "
              "(<dir>/<job_id>/); each job's newest complete one is loaded "
              "at start. Empty: no checkpoints");
DEFINE_string(restore_from, "",
              "a job checkpoint written by any number of pservers (a folder "
              "holding their --checkpoint_dirs, a shared mount, or what "
              "ps_checkpoint reshard wrote): a job with no checkpoint in "
              "--checkpoint_dir starts from its newest complete one, "
              "resharded to this pserver's place when the chief starts the "
              "job (docs/fault_tolerance.md, \"Restoring onto other "
              "pservers\"). Must lie outside --checkpoint_dir");
DEFINE_string(shared_checkpoint_root, "",
              "a folder every pserver of the job writes its checkpoints "
              "under (a shared mount; --checkpoint_dir must lie inside it, "
              "one folder per pserver): the pserver that completes a step "
              "writes the step's job manifest there (<root>/<job>/JOB-<step>)"
              ", and --restore_from=<root> restores the job onto any number "
              "of pservers");
DEFINE_int32(full_checkpoint_every, 1,
             "of every this many checkpoints the first is full and the "
             "others are deltas holding only the rows and blocks changed "
             "since the checkpoint before (docs/checkpoint_format.md, "
             "\"Deltas\"); --keep_checkpoints then counts full ones, each "
             "with its deltas. 1: every checkpoint full");
DEFINE_int32(keep_checkpoints, 2, "complete checkpoints kept per job (>= 1)");
DEFINE_int32(max_jobs, 16,
             "jobs this pserver holds at once (trainers' --job_id); a "
             "request for another is refused RESOURCE_EXHAUSTED");
DEFINE_int32(job_retention, 600,
             "seconds after the last request naming a job (its trainers "
             "heartbeat every second) that the job is freed, after its final "
             "checkpoint; its checkpoints stay. The default job is kept");
DEFINE_int64(max_memory_mb, 0,
             "what a job's tables and optimizer state may hold here; a job "
             "that needs more is refused (RESOURCE_EXHAUSTED). 0: 3/4 of the "
             "machine's memory, or of the cgroup's memory.max when lower");
DEFINE_int32(max_shared_regions, 256,
             "shared-memory regions that trainers on this host may hold at "
             "once, over all jobs (one per trainer; each costs a memfd, a "
             "mapping and a serving thread); past it, values go over TCP. 0: "
             "none");
DEFINE_int32(max_connections_per_ip, 0,
             "connections one IP address may hold open at once; one more "
             "is closed as soon as accepted, so that a flood from one host "
             "leaves room for the others. 0: half of what the open-file "
             "limit allows");
DEFINE_int64(max_memory_mb_per_job, 0,
             "what one job's tables and optimizer state may hold here, "
             "within --max_memory_mb for all jobs, so that one job cannot "
             "starve the others (RESOURCE_EXHAUSTED past it). 0: no limit "
             "of its own");

DEFINE_string(sparse_store_dir, "",
              "a local directory for the rows of sparse tables with a disk "
              "tier (SparseTableOptions.disk; RocksDB, one database per "
              "table, in pserver-<pid>/, emptied at start and removed at "
              "exit). Working memory, not durability: checkpoints and "
              "replication keep the rows. Empty: such tables are refused");

namespace {

// 3/4 of the physical memory, or of the cgroup (v2) limit when that is
// lower: what --max_memory_mb=0 means.
int64_t DefaultMemoryLimitBytes() {
  int64_t bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
                  static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");
  int64_t limit = 0;
  if (cgroup >> limit && limit > 0 && limit < bytes) bytes = limit;
  return bytes / 4 * 3;
}

// The server's options from the flags; a bad value is one line on stderr
// and exit code 2.
// One line naming the problem, then exit 2.
[[noreturn]] void FailFlags(absl::string_view msg) {
  std::cerr << "pserver: " << msg << "\n";
  std::exit(2);
}

// Where the pserver listens and how: the port, the TCP lane, TLS and
// tokens, /metrics.
void ListenFromFlags(shardps::GrpcServerOptions* options) {
  options->host = FLAGS_host;
  options->port = FLAGS_port;
  options->port_file = FLAGS_port_file;
  if (FLAGS_tcp_lane_port < 0 || FLAGS_tcp_lane_port > 65535) {
    FailFlags("--tcp_lane_port must be in [0, 65535]");
  }
  options->tcp_lane = FLAGS_tcp_lane;
  options->tcp_lane_port = FLAGS_tcp_lane_port;
  if (FLAGS_tcp_lane_spin_us < 0 || FLAGS_tcp_lane_spin_us > 10000) {
    FailFlags("--tcp_lane_spin_us must be in [0, 10000]");
  }
  options->tcp_lane_spin = absl::Microseconds(FLAGS_tcp_lane_spin_us);
  auto security =
      shardps::LoadTransportSecurity(shardps::TransportSecurityFilesFromFlags(),
                                     shardps::TransportRole::kServer);
  if (!security.ok()) FailFlags(security.status().message());
  options->security = *std::move(security);
  // /metrics where the pserver listens, unless told otherwise.
  auto monitoring = shardps::MonitoringOptionsFromFlags(FLAGS_host);
  if (!monitoring.ok()) FailFlags(monitoring.status().message());
  const shardps::TransportSecurity& tls = options->security;
  if (absl::Status s =
          monitoring->UseTls(tls.tls_cert_pem, tls.tls_key_pem, tls.tls_ca_pem);
      !s.ok()) {
    FailFlags(s.message());
  }
  options->monitoring = *monitoring;
}

// The bounds on what the jobs may hold and wait for.
void CheckLimitFlags() {
  if (FLAGS_max_pull_wait_s <= 0)
    FailFlags("--max_pull_wait_s must be positive");
  if (FLAGS_trainer_timeout < 0) FailFlags("--trainer_timeout must be >= 0");
  if (FLAGS_keep_checkpoints < 1) FailFlags("--keep_checkpoints must be >= 1");
  if (FLAGS_max_jobs < 1) FailFlags("--max_jobs must be >= 1");
  if (FLAGS_max_shared_regions < 0 || FLAGS_max_shared_regions > 65536) {
    FailFlags("--max_shared_regions must be in [0, 65536]");
  }
  if (FLAGS_job_retention < 1) FailFlags("--job_retention must be >= 1");
  if (FLAGS_max_memory_mb < 0 || FLAGS_max_memory_mb > (int64_t{1} << 40)) {
    FailFlags("--max_memory_mb must be in [0, 2^40]");
  }
  if (FLAGS_max_memory_mb_per_job < 0 ||
      FLAGS_max_memory_mb_per_job > (int64_t{1} << 40)) {
    FailFlags("--max_memory_mb_per_job must be in [0, 2^40]");
  }
  if (FLAGS_full_checkpoint_every < 1 || FLAGS_full_checkpoint_every > 100000) {
    FailFlags("--full_checkpoint_every must be in [1, 100000]");
  }
}

// The jobs: their stores, checkpoints, memory and lifetimes.
shardps::PserverOptions JobsFromFlags(shardps::Env* checkpoint_env) {
  CheckLimitFlags();
  shardps::PserverOptions p;
  p.store.num_trainers = FLAGS_num_gradient_servers;
  p.store.max_pull_wait = absl::Seconds(FLAGS_max_pull_wait_s);
  p.store.trainer_timeout = absl::Seconds(FLAGS_trainer_timeout);
  p.store.max_memory_bytes = FLAGS_max_memory_mb > 0
                                 ? FLAGS_max_memory_mb << 20
                                 : DefaultMemoryLimitBytes();
  p.checkpoint_dir = FLAGS_checkpoint_dir;
  p.restore_from = FLAGS_restore_from;
  p.shared_checkpoint_root = FLAGS_shared_checkpoint_root;
  if (!p.shared_checkpoint_root.empty()) {
    const std::string root(absl::StripSuffix(p.shared_checkpoint_root, "/"));
    if (FLAGS_checkpoint_dir.empty() ||
        !absl::StartsWith(FLAGS_checkpoint_dir, root + "/")) {
      FailFlags(
          "--shared_checkpoint_root needs a --checkpoint_dir inside it (one "
          "folder per pserver, e.g. --checkpoint_dir=<root>/pserver-0)");
    }
  }
  p.keep_checkpoints = FLAGS_keep_checkpoints;
  p.full_checkpoint_every = FLAGS_full_checkpoint_every;
  p.max_memory_bytes_per_job = FLAGS_max_memory_mb_per_job << 20;
  p.max_jobs = FLAGS_max_jobs;
  p.max_shared_regions = FLAGS_max_shared_regions;
  p.job_retention = absl::Seconds(FLAGS_job_retention);
  p.env = checkpoint_env;
  if (!FLAGS_sparse_store_dir.empty()) {
    absl::StatusOr<std::string> dir =
        shardps::RowStore::MakeProcessDir(FLAGS_sparse_store_dir);
    if (!dir.ok()) FailFlags(dir.status().message());
    p.store.sparse_store_dir = *dir;
  }
  return p;
}

shardps::GrpcServerOptions OptionsFromFlags(shardps::Env* checkpoint_env) {
  shardps::GrpcServerOptions options;
  // The limits first, as before: a bad one is told before the files.
  options.pserver = JobsFromFlags(checkpoint_env);
  ListenFromFlags(&options);
  return options;
}

// Raises the open-file limit and guards it: every connection holds a file
// descriptor; the last 64 are kept from connections, and one address
// holds at most --max_connections_per_ip (common/launch/accept_guard.h).
shardps::OpenFileLimit GuardConnections() {
  if (FLAGS_max_connections_per_ip < 0) {
    std::cerr << "pserver: --max_connections_per_ip must be >= 0 (0: "
                 "half of what the open-file limit allows)\n";
    std::exit(2);
  }
  shardps::OpenFileLimit files = shardps::RaiseOpenFileLimit();
  const int cap = shardps::EnableAcceptGuard(64);
  files.per_address = FLAGS_max_connections_per_ip > 0
                          ? FLAGS_max_connections_per_ip
                          : std::max(1, cap / 2);
  shardps::SetConnectionsPerAddress(files.per_address);
  return files;
}

// Logs the limits on connections; exits 2 when the address-space limit
// leaves no room for the memory the pserver may use (gRPC aborts rather
// than refusing a request when an allocation fails).
void LogLimits(const shardps::OpenFileLimit& files, int64_t max_memory) {
  shardps::LogOpenFileLimit(files);
  LOG(INFO) << "at most " << files.per_address
            << " connections from one address (--max_connections_per_ip)";
  constexpr int64_t kGrpcRoom = int64_t{1} << 30;
  const absl::Status s = shardps::CheckAddressSpace(
      static_cast<uint64_t>(max_memory + kGrpcRoom),
      absl::StrCat("--max_memory_mb (", max_memory >> 20,
                   " MiB) and 1024 MiB for gRPC's buffers and requests"));
  if (!s.ok()) {
    std::cerr << "pserver: " << s.message() << "\n";
    LOG(ERROR) << s.message();
    std::exit(2);
  }
}

// The pserver's flags as --help groups, in the order --help shows them.
std::vector<shardps::FlagGroup> PserverFlagGroups() {
  return {{"Server",
           {"port", "port_file", "host", "num_gradient_servers",
            "max_pull_wait_s", "trainer_timeout", "tcp_lane", "tcp_lane_port",
            "tcp_lane_spin_us", "max_connections_per_ip"}},
          {"Jobs and memory",
           {"max_jobs", "job_retention", "max_memory_mb",
            "max_memory_mb_per_job", "max_shared_regions", "sparse_store_dir"}},
          {"Checkpoints (docs/checkpoint_format.md)",
           {"checkpoint_dir", "keep_checkpoints", "full_checkpoint_every",
            "restore_from", "shared_checkpoint_root"}},
          shardps::SecurityFlagGroup(),
          shardps::MonitoringFlagGroup()};
}

// The flags of the command line and the environment, then the launchers'
// aliases (TF_CONFIG and PADDLE_INIT_*: the lowest-precedence defaults);
// exits 2 naming the problem.
void ParseFlags(int* argc, char*** argv) {
  absl::Status s =
      shardps::ParseFlagsWithEnv(argc, argv, shardps::ProcessEnv());
  if (!s.ok()) FailFlags(s.message());
  if (*argc > 1) {
    FailFlags(absl::StrCat("unexpected argument '", (*argv)[1], "'"));
  }
  auto aliases = shardps::LaunchAliases(shardps::ProcessEnv(),
                                        shardps::LaunchRole::kPserver);
  if (!aliases.ok()) FailFlags(aliases.status().message());
  s = shardps::ApplyFlagAliases(*aliases);
  if (!s.ok()) FailFlags(s.message());
}

// Serves until SIGTERM or SIGINT, which a thread takes to shut the server
// down; the exit status.
int Serve(const shardps::GrpcServerOptions& options) {
  const shardps::OpenFileLimit files = GuardConnections();
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = shardps::GrpcPsServer::Create(options);
  if (!server.ok()) {
    std::cerr << "pserver: " << server.status().message() << "\n";
    return 2;
  }
  if (absl::Status s = (*server)->Start(); !s.ok()) {
    std::cerr << "pserver: " << s.message() << "\n";
    return 1;
  }
  LogLimits(files, options.pserver.store.max_memory_bytes);
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    LOG(INFO) << "signal " << sig << ": shutting down";
    (*server)->Shutdown();
  });
  (*server)->Wait();
  signal_thread.detach();
  // The jobs' tables go, and their disk tiers with them; then the
  // process's directory under --sparse_store_dir.
  server->reset();
  if (const std::string& dir = options.pserver.store.sparse_store_dir;
      !dir.empty()) {
    std::error_code ec;
    std::filesystem::remove(dir, ec);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  shardps::TuneMallocForLargeMessages();
  constexpr char kUsage[] =
      "pserver --port=7164 --num_gradient_servers=N [--port_file=PATH]";
  if (shardps::HelpRequested(argc, argv)) {
    shardps::PrintFlagHelp(kUsage, PserverFlagGroups(), std::cout);
    return 0;
  }
  gflags::SetUsageMessage(kUsage);
  FLAGS_logtostderr = true;
  ParseFlags(&argc, &argv);
  // Fault injection for the multi-process tests (kill during a checkpoint
  // write): SHARDPS_TEST_CHECKPOINT_FAULT, see
  // common/storage/fault_injection_env.h.
  auto fault_env = shardps::CheckpointFaultEnvFromEnvironment(
      shardps::Env::Default(), shardps::ProcessEnv());
  if (!fault_env.ok()) FailFlags(fault_env.status().message());
  const shardps::GrpcServerOptions options = OptionsFromFlags(fault_env->get());
  google::InitGoogleLogging(argv[0]);
  // A crash (SIGSEGV, SIGBUS, ...) logs its signal and stack before the
  // process dies. SIGTERM, which glog's handler also takes, is blocked
  // in Serve and taken by the signal thread.
  google::InstallFailureSignalHandler();
  if (*fault_env != nullptr) {
    LOG(WARNING) << "checkpoint fault injection armed by "
                 << shardps::kCheckpointFaultEnvVar;
  }
  return Serve(options);
}
