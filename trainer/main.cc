// trainer: trains a model against the pservers. See README.md and
// docs/flags.md. Parses the flags into TrainerOptions (trainer/flags.h),
// connects to the pservers over gRPC, and runs a Trainer.
#include <atomic>
#include <csignal>
#include <iostream>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/malloc_tuning.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "kernels/blas.h"
#include "trainer/client/grpc_ps_client.h"
#include "trainer/client/retry_timer.h"
#include "trainer/flags.h"
#include "trainer/trainer.h"

namespace {

// One line naming the problem, then exit 2.
[[noreturn]] void Fail(absl::string_view msg) {
  std::cerr << "trainer: " << msg << "\n";
  std::exit(2);
}

// The gRPC clients of the pservers: one each for the training calls, and
// (with heartbeats) one each that gives up within an interval, so that one
// unreachable pserver never holds the heartbeats up.
struct Connections {
  shardps::RetryTimer timer;
  std::vector<std::unique_ptr<shardps::GrpcPsClient>> clients;
  std::vector<std::unique_ptr<shardps::GrpcPsClient>> heartbeat_clients;
  std::vector<shardps::PsClientInterface*> servers;
  std::vector<shardps::PsClientInterface*> heartbeat_servers;
};

std::unique_ptr<Connections> Connect(const shardps::ConnectionOptions& c) {
  auto conn = std::make_unique<Connections>();
  shardps::RpcOptions rpc;
  rpc.retry_budget = c.rpc_retry;
  rpc.job_id = c.job_id;
  shardps::RpcOptions hb;
  hb.job_id = c.job_id;
  hb.attempt_deadline = c.heartbeat_interval * 2 + absl::Seconds(1);
  hb.retry_budget = c.heartbeat_interval;
  for (const auto& a : c.addresses) {
    conn->clients.push_back(
        shardps::GrpcPsClient::Create(a, rpc, &conn->timer, c.security));
    conn->servers.push_back(conn->clients.back().get());
    if (c.heartbeat_interval > absl::ZeroDuration()) {
      conn->heartbeat_clients.push_back(
          shardps::GrpcPsClient::Create(a, hb, &conn->timer, c.security));
      conn->heartbeat_servers.push_back(conn->heartbeat_clients.back().get());
    }
  }
  return conn;
}

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
  gflags::SetUsageMessage(
      "trainer --pservers=host1:7164,host2:7164 --trainer_id=k "
      "--num_gradient_servers=N --config=configs/fmnist_mlp.pbtxt");
  FLAGS_logtostderr = true;
  absl::Status s =
      shardps::ParseFlagsWithEnv(&argc, &argv, shardps::ProcessEnv());
  if (!s.ok()) Fail(s.message());
  if (argc > 1) Fail(absl::StrCat("unexpected argument '", argv[1], "'"));
  google::InitGoogleLogging(argv[0]);

  absl::StatusOr<shardps::TrainerOptions> o =
      shardps::TrainerOptionsFromFlags(shardps::ProcessEnv());
  if (!o.ok()) Fail(o.status().message());
  absl::StatusOr<shardps::ConnectionOptions> c =
      shardps::ConnectionOptionsFromFlags();
  if (!c.ok()) Fail(c.status().message());
  // 64 random bits: a restarted trainer is told apart from its previous
  // process.
  o->incarnation = (uint64_t{std::random_device{}()} << 32) ^
                   std::random_device{}() ^
                   static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  shardps::SetBlasThreads(o->cpu_threads);

  std::unique_ptr<Connections> conn = Connect(*c);
  o->heartbeat_servers = conn->heartbeat_servers;
  o->heartbeat_interval = c->heartbeat_interval;
  o->stop_requested = &stop_requested;
  HandleStopSignals();
  shardps::Trainer trainer(*o, conn->servers);
  s = trainer.Run();
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
