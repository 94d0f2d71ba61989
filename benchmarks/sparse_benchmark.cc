// Sparse push and pull throughput against a pserver over loopback TCP, with
// Zipf-distributed keys over 2^40, and the pserver's memory per million rows.
//
//   sparse_benchmark [--benchmark_filter=...]
//
// Each iteration pulls and then pushes the rows of one batch of distinct
// keys (Adagrad on the pserver, async, one trainer); rows/s counts the rows
// pulled plus the rows pushed, rows/cpu_s divides them by the CPU time of
// the whole process (pserver and client), a lower bound of the rows per
// pserver core.
#include <time.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "benchmark/benchmark.h"
#include "common/malloc_tuning.h"
#include "common/shard_map.h"
#include "glog/logging.h"
#include "pserver/grpc_server.h"
#include "trainer/client/grpc_ps_client.h"
#include "trainer/client/job_client.h"
#include "trainer/client/sparse_client.h"

namespace shardps {
namespace {

constexpr int kBatchKeys = 8192;

// Keys of rank ~ Zipf(s) over `vocab` ranks, spread over 2^40 by Mix64.
std::vector<std::vector<uint64_t>> ZipfBatches(int num_batches, double s,
                                               double vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double a = std::pow(vocab, 1.0 - s) - 1.0;
  std::vector<std::vector<uint64_t>> batches(num_batches);
  for (auto& batch : batches) {
    absl::flat_hash_set<uint64_t> seen;
    while (static_cast<int>(batch.size()) < kBatchKeys) {
      // Inverse CDF of the continuous power law on [1, vocab].
      const double x = std::pow(a * u(rng) + 1.0, 1.0 / (1.0 - s));
      const uint64_t key =
          Mix64(static_cast<uint64_t>(x)) & ((uint64_t{1} << 40) - 1);
      if (seen.insert(key).second) batch.push_back(key);
    }
  }
  return batches;
}

double ProcessCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Cluster {
  std::unique_ptr<GrpcPsServer> server;
  RetryTimer timer;
  std::unique_ptr<GrpcPsClient> client;
  RequestStamp stamp{0};
  std::unique_ptr<JobClient> job;
  std::unique_ptr<SparseClient> sparse;
};

std::unique_ptr<Cluster> StartCluster(int dim) {
  auto c = std::make_unique<Cluster>();
  GrpcServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  c->server = std::move(*GrpcPsServer::Create(o));
  CHECK(c->server->Start().ok());
  c->client =
      GrpcPsClient::Create("127.0.0.1:" + std::to_string(c->server->port()),
                           RpcOptions{}, &c->timer);
  const std::vector<PsClientInterface*> servers = {c->client.get()};
  c->job = std::make_unique<JobClient>(servers, &c->stamp);
  c->sparse = std::make_unique<SparseClient>(servers, &c->stamp);
  JobSpec job;
  job.set_mode(ASYNC);
  job.set_num_trainers(1);
  job.set_max_staleness(-1);
  TableSpec* t = job.add_tables();
  t->set_name("emb");
  t->set_kind(TableSpec::SPARSE);
  t->mutable_sparse()->set_dim(dim);
  t->mutable_sparse()->mutable_init()->set_type(RowInitializer::UNIFORM);
  t->mutable_sparse()->mutable_init()->set_scale(0.01f);
  t->mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  t->mutable_optimizer()->set_learning_rate(0.05f);
  CHECK(c->job->InitJob(job, ChunkPlan(1), {}).ok());
  return c;
}

void BM_SparsePushPull(benchmark::State& state) {
  const int dim = static_cast<int>(state.range(0));
  auto cluster = StartCluster(dim);
  const auto batches = ZipfBatches(64, 1.1, 1e8, 7);
  std::vector<float> rows(kBatchKeys * dim), grads(kBatchKeys * dim, 0.01f);
  int64_t step = 0, total_rows = 0;
  const double cpu_start = ProcessCpuSeconds();
  for (auto _ : state) {
    const auto& keys = batches[step % batches.size()];
    std::vector<SparseTransfer> pull = {{0, dim, keys, rows.data(), nullptr}};
    std::vector<SparseTransfer> push = {{0, dim, keys, nullptr, grads.data()}};
    CHECK(cluster->sparse->Pull(0, step, pull, nullptr).ok());
    CHECK(cluster->sparse->Push(step, false, push, nullptr).ok());
    total_rows += 2 * static_cast<int64_t>(keys.size());
    ++step;
  }
  const double cpu = ProcessCpuSeconds() - cpu_start;
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(total_rows),
                                                benchmark::Counter::kIsRate);
  // Per second of CPU of the whole process: the pserver's threads and the
  // client's, so a bound below what the pserver alone does per core.
  state.counters["rows/cpu_s"] = total_rows / std::max(cpu, 1e-9);
  const auto stats = cluster->server->store()->SparseStats();
  state.counters["rows_held"] = static_cast<double>(stats[0].counters.rows);
}
BENCHMARK(BM_SparsePushPull)
    ->Arg(8)
    ->Arg(16)
    ->Arg(64)
    ->UseRealTime()
    ->MinTime(2.0);

// Memory of the pserver's table per million rows, ids spread over 2^40.
void BM_SparseMemoryPerMillionRows(benchmark::State& state) {
  const int dim = static_cast<int>(state.range(0));
  for (auto _ : state) {
    OptimizerConfig oc;
    oc.set_type(OptimizerConfig::ADAGRAD);
    oc.set_learning_rate(0.05f);
    auto opt = std::move(*Optimizer::Create(oc, 1));
    SparseTableOptions so;
    so.set_dim(dim);
    SparseTable table(so, opt.get());
    std::mt19937_64 rng(1);
    std::vector<uint64_t> keys(10000);
    std::vector<float> grads(keys.size() * dim, 0.01f);
    const float one[] = {1.0f};
    for (int i = 0; i < 100; ++i) {
      for (auto& k : keys) k = rng() & ((uint64_t{1} << 40) - 1);
      table.Apply(0, keys, grads, one);
    }
    const double mib = table.MemoryBytes() / double(1 << 20);
    state.counters["MiB_per_1M_rows"] =
        mib * 1e6 / static_cast<double>(table.counters().rows);
    state.counters["bytes_per_row"] =
        static_cast<double>(table.MemoryBytes()) / table.counters().rows;
    state.counters["payload_bytes_per_row"] = 4.0 * dim * 2;
  }
}
BENCHMARK(BM_SparseMemoryPerMillionRows)
    ->Arg(8)
    ->Arg(16)
    ->Arg(64)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::TuneMallocForLargeMessages();
  FLAGS_minloglevel = 1;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
