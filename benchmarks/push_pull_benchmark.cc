// Dense push and pull throughput against real pservers over loopback TCP.
//
// Each benchmark starts PsServers in this process (port 0, 127.0.0.1) and a
// trainer-side ParamClient over GrpcPsClients connected to 127.0.0.1:port, so
// every byte crosses the kernel's TCP stack, is parsed by gRPC and protobuf
// and, for pushes, goes through the pserver's SGD optimizer. One dense table
// of the payload size (float32), block_size 65536, ASYNC with 1 trainer and
// no staleness bound: a push applies at once and a pull never waits.
//
// Arguments: payload bytes, number of pservers (the payload is split between
// them by the shard map), and shm: 1 moves the values through shared memory
// and the calls through the region's slots (ParamClient::UseSharedMemory, as
// trainers on the pserver's host do), 2 the values through shared memory
// and the calls (offsets) over gRPC (--shared_calls=false), 3 over the TCP
// lane (ParamClient::UseTcpLane, 2 connections per pserver, as trainers on
// other hosts do), 0 all over gRPC on TCP.
// Throughput counts payload bytes once per push, once per pull, and once per
// push+pull round (model bytes synchronised per second). Client and pservers
// share the machine's cores.
//
// Results depend on what ran before in the same process: glibc's malloc
// raises its mmap and trim thresholds after large buffers are freed, and
// fewer page faults make a 4 MiB push about twice as fast after a 64 MiB run.
// For figures a trainer with one model size would see, run one payload per
// process, as scripts/bench/microbench.sh does:
//   push_pull_benchmark --benchmark_filter=/bytes:4194304/
//
// BM_PlainGrpcPush and BM_PlainGrpcPull are the baseline, measured in the
// same process and run (benchmarks/grpc_baseline.h): plain gRPC synchronous
// unary calls carrying one protobuf `bytes` field of the payload size to a
// server in this process that answers at once (no store, no optimizer, no
// chunking). They are the "plain gRPC" row of docs/benchmarks.md
// ("Transport ceilings"), so ShardPS can be divided by a figure taken on the
// same machine at the same time. BM_RawTcpPush and BM_RawTcpPull are the
// ceiling of one loopback TCP connection here (RawTcp below).
//
// --lane_spin_us sets how long the TCP lane's sockets, on both sides,
// retry before they sleep (trainer and pserver --tcp_lane_spin_us; their
// default unless given), to measure what the spin buys:
//   push_pull_benchmark --benchmark_filter=/bytes:262144/ --lane_spin_us=0

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "benchmarks/grpc_baseline.h"
#include "common/launch/malloc_tuning.h"
#include "common/transport/tcp_lane.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "proto/ps_service.pb.h"
#include "pserver/server/grpc_server.h"
#include "trainer/client/job_client.h"
#include "trainer/client/param_client.h"
#include "trainer/transport/grpc_ps_client.h"
#include "trainer/transport/retry_timer.h"

DEFINE_int32(lane_spin_us,
             static_cast<int32_t>(
                 absl::ToInt64Microseconds(shardps::tcp_lane::kDefaultSpin)),
             "microseconds the TCP lane's sockets retry before they sleep "
             "(trainer and pserver --tcp_lane_spin_us)");

namespace shardps {
namespace {

constexpr int64_t kBlockSize = 65536;
constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

// Pservers, clients and buffers for one (payload, pservers) pair. Members are
// destroyed in reverse order: the trainer side before the pservers.
struct Cluster {
  int64_t num_values = 0;
  std::vector<std::unique_ptr<GrpcPsServer>> servers;
  std::unique_ptr<RetryTimer> timer;
  std::vector<std::unique_ptr<GrpcPsClient>> clients;
  RequestStamp stamp{0, /*incarnation=*/1};
  std::unique_ptr<JobClient> job;
  std::unique_ptr<ParamClient> params;
  std::vector<float> grads;
  std::vector<float> values;
  int64_t step = 0;
};

JobSpec MakeJob(int64_t num_values) {
  JobSpec job;
  job.set_mode(ASYNC);
  job.set_num_trainers(1);
  job.set_max_staleness(-1);
  job.set_global_batch_size(1);
  TableSpec* t = job.add_tables();
  t->set_name("dense");
  t->add_shape(num_values);
  t->set_block_size(kBlockSize);
  t->mutable_optimizer()->set_type(OptimizerConfig::SGD);
  t->mutable_optimizer()->set_learning_rate(0.01f);
  return job;
}

// A pserver on 127.0.0.1 at a port the kernel picks, started.
absl::StatusOr<std::unique_ptr<GrpcPsServer>> StartLocalServer() {
  GrpcServerOptions opts;
  opts.host = "127.0.0.1";
  opts.port = 0;
  opts.tcp_lane_spin = absl::Microseconds(FLAGS_lane_spin_us);
  auto server = GrpcPsServer::Create(opts);
  if (!server.ok()) return server.status();
  absl::Status st = (*server)->Start();
  if (!st.ok()) return st;
  return server;
}

absl::StatusOr<std::unique_ptr<Cluster>> StartCluster(int64_t payload_bytes,
                                                      int num_servers,
                                                      int shared_memory) {
  auto c = std::make_unique<Cluster>();
  c->num_values = payload_bytes / static_cast<int64_t>(sizeof(float));
  std::vector<PsClientInterface*> ifaces;
  c->timer = std::make_unique<RetryTimer>();
  for (int s = 0; s < num_servers; ++s) {
    auto server = StartLocalServer();
    if (!server.ok()) return server.status();
    c->clients.push_back(
        GrpcPsClient::Create(absl::StrCat("127.0.0.1:", (*server)->port()),
                             RpcOptions{}, c->timer.get()));
    ifaces.push_back(c->clients.back().get());
    c->servers.push_back(std::move(*server));
  }
  c->job = std::make_unique<JobClient>(ifaces, &c->stamp);
  c->params = std::make_unique<ParamClient>(
      ifaces, &c->stamp,
      std::vector<DenseTableLayout>{{"dense", c->num_values, kBlockSize}});
  // Small gradients keep the values finite however long the benchmark runs.
  c->grads.assign(c->num_values, 1e-3f);
  c->values.assign(c->num_values, 0.0f);
  std::vector<float> init(c->num_values, 0.5f);
  const JobSpec job = MakeJob(c->num_values);
  absl::Status st = c->job->Register();
  if (st.ok()) st = c->job->InitJob(job, c->params->chunks(), {init.data()});
  if (st.ok()) st = c->job->WaitUntilReady(job, absl::Seconds(30));
  if (!st.ok()) return st;
  // Every pserver that holds a block must take the lane.
  const int holding = c->params->holding_servers();
  if (shared_memory == 3) {
    TcpLanePsClient::Options lane;
    lane.connections = 2;
    lane.spin = absl::Microseconds(FLAGS_lane_spin_us);
    if (c->params->UseTcpLane(lane) != holding) {
      return absl::UnavailableError("TCP lane: see the log");
    }
  } else if (shared_memory != 0) {
    if (c->params->UseSharedMemory(shared_memory == 1) != holding) {
      return absl::UnavailableError("shared memory: see the log");
    }
  }
  return c;
}

// The cluster of the running benchmark. Google Benchmark calls a benchmark
// function several times while it sizes the iteration count; they share one
// cluster, which is replaced when the arguments change.
std::unique_ptr<Cluster>& CurrentCluster() {
  static auto* c = new std::unique_ptr<Cluster>();
  return *c;
}
std::tuple<int64_t, int, int>& CurrentKey() {
  static auto* k = new std::tuple<int64_t, int, int>(0, 0, 0);
  return *k;
}

Cluster* GetCluster(benchmark::State& state) {
  const std::tuple<int64_t, int, int> key(state.range(0),
                                          static_cast<int>(state.range(1)),
                                          static_cast<int>(state.range(2)));
  std::unique_ptr<Cluster>& c = CurrentCluster();
  if (c == nullptr || CurrentKey() != key) {
    c.reset();  // free the previous payload's memory first
    auto started =
        StartCluster(std::get<0>(key), std::get<1>(key), std::get<2>(key));
    if (!started.ok()) {
      state.SkipWithError(started.status().ToString().c_str());
      return nullptr;
    }
    c = std::move(*started);
    CurrentKey() = key;
  }
  return c.get();
}

absl::Status PushOnce(Cluster* c, TransferStats* stats) {
  return c->params->Push(c->step++, {c->grads.data()}, stats);
}

absl::Status PullOnce(Cluster* c, TransferStats* stats) {
  return c->params->Pull(/*min_version=*/0, c->step, {c->values.data()}, stats);
}

enum class Op { kPush, kPull, kRound };

void RunTransfer(benchmark::State& state, Op op) {
  Cluster* c = GetCluster(state);
  if (c == nullptr) return;
  const int64_t payload = c->num_values * static_cast<int64_t>(sizeof(float));
  const StoreCounters before = c->servers[0]->store()->counters();
  TransferStats stats;
  int64_t wire_bytes = 0, rpcs = 0;
  for (auto _ : state) {
    absl::Status st;
    if (op != Op::kPull) {
      st = PushOnce(c, &stats);
      wire_bytes += stats.bytes;
      rpcs += stats.rpcs;
    }
    if (st.ok() && op != Op::kPush) {
      st = PullOnce(c, &stats);
      wire_bytes += stats.bytes;
      rpcs += stats.rpcs;
    }
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(c->values.data());
  }
  const int64_t iters = static_cast<int64_t>(state.iterations());
  if (iters == 0) return;
  // A pull must see the pushes applied by SGD: 0.5 - k * 0.01 * 1e-3.
  if (op == Op::kRound && !(c->values[0] < 0.5f)) {
    state.SkipWithError("pulled value unchanged: push was not applied");
    return;
  }
  state.SetBytesProcessed(iters * payload);
  state.counters["MiB/s"] = benchmark::Counter(
      static_cast<double>(iters * payload) / kMiB, benchmark::Counter::kIsRate);
  state.counters["rpcs/op"] = static_cast<double>(rpcs) / iters;
  state.counters["wire_overhead"] =
      static_cast<double>(wire_bytes) /
      static_cast<double>(iters * payload * (op == Op::kRound ? 2 : 1));
  if (op != Op::kPull) {
    const StoreCounters after = c->servers[0]->store()->counters();
    // Blocks that server 0's optimizer applied per push (its share).
    state.counters["s0_block_updates/op"] =
        static_cast<double>(after.block_updates - before.block_updates) / iters;
  }
  state.SetLabel(absl::StrCat(payload / kKiB, "KiB x", state.range(1),
                              state.range(2) == 1   ? " shm"
                              : state.range(2) == 2 ? " shm, gRPC calls"
                              : state.range(2) == 3 ? " TCP lane"
                                                    : "",
                              op == Op::kPush   ? " push"
                              : op == Op::kPull ? " pull"
                                                : " push+pull"));
}

// The baseline of the running benchmark, replaced when the payload changes.
std::unique_ptr<PlainGrpc>& CurrentPlainGrpc() {
  static auto* p = new std::unique_ptr<PlainGrpc>();
  return *p;
}

PlainGrpc* GetPlainGrpc(benchmark::State& state) {
  std::unique_ptr<PlainGrpc>& p = CurrentPlainGrpc();
  if (p == nullptr || p->payload_bytes() != state.range(0)) {
    p.reset();
    auto started = PlainGrpc::Start(state.range(0));
    if (!started.ok()) {
      state.SkipWithError(started.status().ToString().c_str());
      return nullptr;
    }
    p = std::move(*started);
  }
  return p.get();
}

void RunPlainGrpc(benchmark::State& state, Op op) {
  PlainGrpc* p = GetPlainGrpc(state);
  if (p == nullptr) return;
  const int64_t payload = p->payload_bytes();
  for (auto _ : state) {
    absl::Status st = op == Op::kPush ? p->Push() : p->Pull();
    if (!st.ok()) {
      state.SkipWithError(absl::StrCat("plain gRPC: ", st.message()).c_str());
      break;
    }
  }
  const int64_t iters = static_cast<int64_t>(state.iterations());
  if (iters == 0) return;
  const int64_t wire =
      op == Op::kPush ? p->push_wire_bytes() : p->pull_wire_bytes();
  state.SetBytesProcessed(iters * payload);
  state.counters["MiB/s"] = benchmark::Counter(
      static_cast<double>(iters * payload) / kMiB, benchmark::Counter::kIsRate);
  state.counters["rpcs/op"] = 1;
  state.counters["wire_overhead"] =
      static_cast<double>(wire) / static_cast<double>(payload);
  state.SetLabel(absl::StrCat(payload / kKiB, "KiB plain gRPC",
                              op == Op::kPush ? " push" : " pull"));
}

// The ceiling of one TCP connection on this machine: a thread of this
// process that reads the payload and answers one byte (a push), or reads
// one byte and sends the payload (a pull), over TcpLaneSocket (spinning as
// the lane's do, --lane_spin_us); no header, parsing, check or optimizer.
// What the TCP lane could reach at most.
class RawTcp {
 public:
  static absl::StatusOr<std::unique_ptr<RawTcp>> Start(int64_t bytes) {
    const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (listener < 0 ||
        bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        listen(listener, 1) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return absl::UnavailableError("raw TCP: cannot listen");
    }
    auto r = std::unique_ptr<RawTcp>(new RawTcp(bytes));
    r->server_ = std::thread([r = r.get(), listener] {
      const int fd = accept(listener, nullptr, nullptr);
      close(listener);
      if (fd < 0) return;
      auto socket = std::make_unique<TcpLaneSocket>(fd, "raw");
      socket->set_spin(absl::Microseconds(FLAGS_lane_spin_us));
      r->Serve(std::move(socket));
    });
    auto c = TcpLaneSocket::Connect("127.0.0.1", ntohs(a.sin_port),
                                    absl::Now() + absl::Seconds(10));
    if (!c.ok()) return c.status();
    r->client_ = *std::move(c);
    r->client_->set_spin(absl::Microseconds(FLAGS_lane_spin_us));
    return r;
  }
  ~RawTcp() {
    if (client_ != nullptr) client_->Shutdown();
    server_.join();
  }
  int64_t payload_bytes() const { return static_cast<int64_t>(data_.size()); }
  absl::Status Push() {
    char op = 'P', ack = 0;
    absl::Status s = client_->Write(
        {IoVec(&op, 1), IoVec(data_.data(), data_.size())}, Deadline());
    return s.ok() ? client_->Read({IoVec(&ack, 1)}, Deadline()) : s;
  }
  absl::Status Pull() {
    char op = 'L';
    absl::Status s = client_->Write({IoVec(&op, 1)}, Deadline());
    return s.ok()
               ? client_->Read({IoVec(data_.data(), data_.size())}, Deadline())
               : s;
  }

 private:
  explicit RawTcp(int64_t bytes) : data_(bytes, 1), served_(bytes) {}
  static absl::Time Deadline() { return absl::Now() + absl::Seconds(60); }
  void Serve(std::unique_ptr<TcpLaneSocket> socket) {
    char op = 0;
    while (socket->Read({IoVec(&op, 1)}, absl::InfiniteFuture()).ok()) {
      absl::Status s;
      if (op == 'P') {
        s = socket->Read({IoVec(served_.data(), served_.size())}, Deadline());
        if (s.ok()) s = socket->Write({IoVec("k", 1)}, Deadline());
      } else {
        s = socket->Write({IoVec(served_.data(), served_.size())}, Deadline());
      }
      if (!s.ok()) return;
    }
  }

  std::vector<char> data_, served_;
  std::unique_ptr<TcpLaneSocket> client_;
  std::thread server_;
};

std::unique_ptr<RawTcp>& CurrentRawTcp() {
  static auto* p = new std::unique_ptr<RawTcp>();
  return *p;
}

void RunRawTcp(benchmark::State& state, Op op) {
  std::unique_ptr<RawTcp>& p = CurrentRawTcp();
  if (p == nullptr || p->payload_bytes() != state.range(0)) {
    p.reset();
    auto started = RawTcp::Start(state.range(0));
    if (!started.ok()) {
      state.SkipWithError(started.status().ToString().c_str());
      return;
    }
    p = *std::move(started);
  }
  for (auto _ : state) {
    absl::Status st = op == Op::kPush ? p->Push() : p->Pull();
    if (!st.ok()) {
      state.SkipWithError(absl::StrCat("raw TCP: ", st.message()).c_str());
      break;
    }
  }
  const int64_t iters = static_cast<int64_t>(state.iterations());
  state.SetBytesProcessed(iters * p->payload_bytes());
  state.counters["MiB/s"] =
      benchmark::Counter(static_cast<double>(iters * p->payload_bytes()) / kMiB,
                         benchmark::Counter::kIsRate);
  state.SetLabel(absl::StrCat(p->payload_bytes() / kKiB, "KiB raw TCP",
                              op == Op::kPush ? " push" : " pull"));
}

void BM_Push(benchmark::State& state) { RunTransfer(state, Op::kPush); }
void BM_Pull(benchmark::State& state) { RunTransfer(state, Op::kPull); }
void BM_PushPull(benchmark::State& state) { RunTransfer(state, Op::kRound); }

// Payloads from 64 KiB to 64 MiB; 1 and 2 pservers. MinTime bounds each run:
// a 64 MiB transfer takes 20 to 100 ms here, so at least 3 iterations.
void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"bytes", "pservers", "shm"});
  for (int shm : {0, 1, 2, 3}) {
    for (int servers : {1, 2}) {
      for (int64_t bytes :
           {64 * kKiB, 256 * kKiB, 1 * kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB}) {
        b->Args({bytes, servers, shm});
      }
    }
  }
  // CPU: the whole process's (client and pservers), per operation.
  b->UseRealTime()->MeasureProcessCPUTime();
  b->Unit(benchmark::kMillisecond)->MinTime(0.3);
}

BENCHMARK(BM_Push)->Apply(Args);
BENCHMARK(BM_Pull)->Apply(Args);
BENCHMARK(BM_PushPull)->Apply(Args);

void BM_PlainGrpcPush(benchmark::State& state) {
  RunPlainGrpc(state, Op::kPush);
}
void BM_PlainGrpcPull(benchmark::State& state) {
  RunPlainGrpc(state, Op::kPull);
}

// The same payloads as Args, one server.
void PlainGrpcArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"bytes"});
  for (int64_t bytes :
       {64 * kKiB, 256 * kKiB, 1 * kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB}) {
    b->Args({bytes});
  }
  b->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
}

BENCHMARK(BM_PlainGrpcPush)->Apply(PlainGrpcArgs);
BENCHMARK(BM_PlainGrpcPull)->Apply(PlainGrpcArgs);

void BM_RawTcpPush(benchmark::State& state) { RunRawTcp(state, Op::kPush); }
void BM_RawTcpPull(benchmark::State& state) { RunRawTcp(state, Op::kPull); }
BENCHMARK(BM_RawTcpPush)->Apply(PlainGrpcArgs);
BENCHMARK(BM_RawTcpPull)->Apply(PlainGrpcArgs);

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::TuneMallocForLargeMessages();  // as pserver and trainer do
  // The pservers log every job start at INFO; keep the output to the results.
  FLAGS_minloglevel = 1;
  benchmark::Initialize(&argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, /*remove_flags=*/true);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Keeps gRPC's shared callback completion queue referenced for the whole
  // run. Without it, replacing a cluster can drop that queue's last reference
  // on one of its own "nexting" threads: GrpcPsClient's per-call state
  // (holding a ClientContext, hence a channel) is released there after `done`
  // has run, and gRPC 1.51 then joins that thread from itself and frees the
  // queue under it ("assertion failed: prior > 0" in grpc_cq_internal_unref,
  // an abort). A started pserver that serves nothing holds one reference
  // until the end.
  auto anchor = shardps::StartLocalServer();
  if (!anchor.ok()) {
    LOG(ERROR) << "cannot start a pserver: " << anchor.status();
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  // Stop the pservers before static destruction tears down gRPC, and let the
  // callback threads release the last calls before the anchor goes.
  shardps::CurrentCluster().reset();
  shardps::CurrentPlainGrpc().reset();
  absl::SleepFor(absl::Milliseconds(200));
  anchor->reset();
  benchmark::Shutdown();
  return 0;
}
