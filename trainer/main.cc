// trainer: trains a model against the pservers. See README.md and
// docs/flags.md. Parses the flags into TrainerOptions (trainer/flags/flags.h),
// connects to the pservers over gRPC, and runs a Trainer.
#include <atomic>
#include <csignal>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/grpc/grpc_health.h"
#include "common/launch/flags.h"
#include "common/launch/malloc_tuning.h"
#include "common/launch/port_file.h"
#include "common/monitoring/monitoring.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "kernels/blas.h"
#include "trainer/flags/flags.h"
#include "trainer/flags/grpc_launch.h"
#include "trainer/monitoring/trainer_monitoring.h"
#include "trainer/trainer.h"

DEFINE_int32(health_port, -1,
             "serve gRPC's health service (grpc.health.v1) on this port, at "
             "--monitoring_host: NOT_SERVING until the trainer has joined a "
             "ready job, SERVING while it trains; 0 picks a free port; -1: "
             "none");
DEFINE_string(health_port_file, "",
              "if set, write the bound health port to this file");

namespace {

// One line naming the problem, then exit 2.
[[noreturn]] void Fail(absl::string_view msg) {
  std::cerr << "trainer: " << msg << "\n";
  std::exit(2);
}

// The trainer's readiness on gRPC's health service, and its Prometheus
// metrics: what main serves about the Trainer.
class Monitoring : public shardps::TrainingObserver {
 public:
  // Serves what the flags ask for; exits 2 naming the flag on failure.
  Monitoring(const std::string& job_id, int trainer_id,
             const shardps::TransportSecurity& security) {
    // A trainer listens nowhere else: every interface, for Prometheus.
    auto m = shardps::MonitoringOptionsFromFlags("0.0.0.0");
    if (!m.ok()) Fail(m.status().message());
    if (absl::Status s = m->UseTls(security.tls_cert_pem, security.tls_key_pem,
                                   security.tls_ca_pem);
        !s.ok()) {
      Fail(s.message());
    }
    if (FLAGS_health_port < -1 || FLAGS_health_port > 65535) {
      Fail("--health_port must be in [-1, 65535]");
    }
    if (FLAGS_health_port < 0 && !FLAGS_health_port_file.empty()) {
      Fail("--health_port_file needs --health_port (0 for a free port)");
    }
    if (m->port >= 0) {
      metrics_ = std::make_unique<shardps::TrainerMetrics>(job_id, trainer_id);
      auto server =
          shardps::MonitoringServer::Start(*m, {metrics_->registry()});
      if (!server.ok()) Fail(server.status().message());
      server_ = *std::move(server);
    }
    if (FLAGS_health_port >= 0) StartHealth(m->host);
  }
  void Ready(int64_t step) override {
    if (metrics_ != nullptr) metrics_->Ready(step);
    SetServing(true);
  }
  void StepDone(const shardps::StepReport& s) override {
    if (metrics_ != nullptr) metrics_->StepDone(s);
  }
  void Evaluated(const shardps::EvalReport& e) override {
    if (metrics_ != nullptr) metrics_->Evaluated(e);
  }
  void Recovered(int64_t from, int64_t to) override {
    if (metrics_ != nullptr) metrics_->Recovered(from, to);
  }
  void CheckpointsFailed(int64_t n) override {
    if (metrics_ != nullptr) metrics_->CheckpointsFailed(n);
  }
  void Stopped() override {
    if (metrics_ != nullptr) metrics_->Stopped();
    SetServing(false);
  }

 private:
  void StartHealth(const std::string& host) {
    auto health = shardps::GrpcHealthServer::Start(host, FLAGS_health_port,
                                                   FLAGS_health_port_file);
    if (!health.ok()) {
      Fail(absl::StrCat("--health_port: ", health.status().message()));
    }
    health_ = *std::move(health);
    LOG(INFO) << "health service on " << host << ":" << health_->port();
  }
  void SetServing(bool serving) {
    if (health_ != nullptr) health_->SetServing(serving);
  }

  std::unique_ptr<shardps::TrainerMetrics> metrics_;
  std::unique_ptr<shardps::MonitoringServer> server_;
  std::unique_ptr<shardps::GrpcHealthServer> health_;
};

std::atomic<int> stop_signal{0};
std::atomic<bool> stop_requested{false};

void DieOfSignal() {
  const int sig = stop_signal.load() != 0 ? stop_signal.load() : SIGTERM;
  signal(sig, SIG_DFL);
  raise(sig);
}

// SIGTERM and SIGINT: leave the job between two steps and die of the
// signal. A trainer that cannot reach the end of its step within 1 s (it
// waits for a peer, or for the chief) dies of it then; so does a second
// signal.
void HandleStopSignals() {
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
  std::thread([] {
    while (!stop_requested.load()) absl::SleepFor(absl::Milliseconds(100));
    absl::SleepFor(absl::Seconds(1));
    DieOfSignal();
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  shardps::TuneMallocForLargeMessages();
  constexpr char kUsage[] =
      "trainer --pservers=host1:7164,host2:7164 --trainer_id=k "
      "--num_gradient_servers=N --config=configs/fmnist_mlp.pbtxt";
  if (shardps::HelpRequested(argc, argv)) {
    std::vector<shardps::FlagGroup> groups = shardps::TrainerFlagGroups();
    groups.push_back(shardps::SecurityFlagGroup());
    groups.push_back(shardps::MonitoringFlagGroup());
    shardps::PrintFlagHelp(kUsage, groups, std::cout);
    return 0;
  }
  gflags::SetUsageMessage(kUsage);
  FLAGS_logtostderr = true;
  absl::StatusOr<shardps::TrainerLaunch> launch = shardps::ParseTrainerFlags(
      &argc, &argv, shardps::ProcessEnv(), shardps::ModelSource::kConfig);
  if (!launch.ok()) Fail(launch.status().message());
  google::InitGoogleLogging(argv[0]);
  // A crash (SIGSEGV, SIGBUS, ...) logs its signal and stack before the
  // process dies; HandleStopSignals below replaces glog's SIGTERM handler.
  google::InstallFailureSignalHandler();
  shardps::TrainerOptions* o = &launch->options;
  shardps::SetBlasThreads(o->cpu_threads);

  Monitoring monitoring(launch->connection.job_id, o->trainer_id,
                        launch->connection.security);
  o->observer = &monitoring;
  std::unique_ptr<shardps::PserverConnections> conn =
      shardps::ConnectTrainer(&*launch);
  o->stop_requested = &stop_requested;
  HandleStopSignals();
  shardps::Trainer trainer(*o, conn->servers);
  const absl::Status s = trainer.Run();
  monitoring.Stopped();
  if (absl::IsCancelled(s)) {
    std::cerr << "trainer: " << s.message() << "\n";
    DieOfSignal();
  }
  if (!s.ok()) {
    LOG(ERROR) << "trainer " << o->trainer_id << " failed: " << s;
    std::cerr << "trainer: " << s.message() << "\n";
    return 1;
  }
  const auto& r = trainer.result();
  LOG(INFO) << "trainer " << o->trainer_id << " done: " << r.steps
            << " steps, test accuracy " << r.test_accuracy;
  return 0;
}
