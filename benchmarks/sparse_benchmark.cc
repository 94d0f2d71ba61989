// Sparse push and pull throughput against a pserver over loopback TCP, with
// Zipf-distributed keys over 2^40, the pserver's memory per million rows,
// and push and pull of one table in memory and with a disk tier
// (BM_SparseTiers).
//
//   sparse_benchmark [--benchmark_filter=...]
//
// Each iteration pulls and then pushes the rows of one batch of distinct
// keys (Adagrad on the pserver, async, one trainer); rows/s counts the rows
// pulled plus the rows pushed, rows/cpu_s divides them by the CPU time of
// the whole process (pserver and client), rows/server_cpu_s by that of the
// process less the benchmark's thread: the rows per pserver core, the
// client's gRPC threads counted against the pserver.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "common/launch/malloc_tuning.h"
#include "common/placement/shard_map.h"
#include "glog/logging.h"
#include "pserver/server/grpc_server.h"
#include "pserver/store/disk/row_store.h"
#include "pserver/store/sparse/sparse_table.h"
#include "trainer/client/job_client.h"
#include "trainer/client/sparse_client.h"
#include "trainer/data/sparse_batch.h"
#include "trainer/model/sparse_input.h"
#include "trainer/transport/grpc_ps_client.h"

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

double CpuSeconds(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// CPU time of the whole process, and of the process less the benchmark's
// own thread (the trainer's work): the pserver's threads and the client's
// gRPC threads.
struct CpuClock {
  double process = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
  double thread = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);

  void Report(benchmark::State& state, int64_t rows) const {
    const double p = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - process;
    const double t = CpuSeconds(CLOCK_THREAD_CPUTIME_ID) - thread;
    state.counters["rows/cpu_s"] = rows / std::max(p, 1e-9);
    state.counters["rows/server_cpu_s"] = rows / std::max(p - t, 1e-9);
  }
};

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
  const CpuClock cpu;
  for (auto _ : state) {
    const auto& keys = batches[step % batches.size()];
    std::vector<SparseTransfer> pull = {{0, dim, keys, rows.data(), nullptr}};
    std::vector<SparseTransfer> push = {{0, dim, keys, nullptr, grads.data()}};
    CHECK(cluster->sparse->Pull(0, step, pull, nullptr).ok());
    CHECK(cluster->sparse->Push(step, false, push, nullptr).ok());
    total_rows += 2 * static_cast<int64_t>(keys.size());
    ++step;
  }
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(total_rows),
                                                benchmark::Counter::kIsRate);
  cpu.Report(state, total_rows);
  const auto stats = cluster->server->store()->SparseStats();
  state.counters["rows_held"] = static_cast<double>(stats[0].counters.rows);
}
BENCHMARK(BM_SparsePushPull)
    ->Arg(8)
    ->Arg(16)
    ->Arg(64)
    ->UseRealTime()
    ->MinTime(2.0);

// As a trainer's step: a batch of 512 records of 39 features whose ids are
// Zipf over 10^8 ranks (repeats included) goes through SparseInput, which
// deduplicates the ids before the pull and sums each row's gradient before
// the push. rows/s counts the distinct rows pulled plus pushed;
// rows/cpu_s includes the trainer's deduplication and summing.
void BM_SparseTrainerStep(benchmark::State& state) {
  const int dim = static_cast<int>(state.range(0));
  constexpr int kRecords = 512, kFeatures = 39;
  auto cluster = StartCluster(dim);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double s = 1.1, vocab = 1e8, a = std::pow(vocab, 1.0 - s) - 1.0;
  std::vector<SparseBatch> batches(64);
  for (SparseBatch& b : batches) {
    b.offsets.push_back(0);
    for (int r = 0; r < kRecords; ++r) {
      for (int f = 0; f < kFeatures; ++f) {
        const double x = std::pow(a * u(rng) + 1.0, 1.0 / (1.0 - s));
        b.ids.push_back(Mix64(static_cast<uint64_t>(x) * kFeatures + f) &
                        ((uint64_t{1} << 40) - 1));
        b.values.push_back(1.0f);
      }
      b.offsets.push_back(static_cast<int64_t>(b.ids.size()));
    }
  }
  SparseInput input(dim, kFeatures, 0);
  std::vector<float> h(kRecords * input.width()), dh(h.size(), 1e-3f);
  int64_t step = 0, total_rows = 0, occurrences = 0;
  const CpuClock cpu;
  for (auto _ : state) {
    input.SetBatch(&batches[step % batches.size()]);
    std::vector<SparseTransfer> pull = {
        {0, dim, input.keys(), input.rows().data(), nullptr}};
    CHECK(cluster->sparse->Pull(0, step, pull, nullptr).ok());
    input.Forward(h.data());
    input.Backward(dh.data());
    std::vector<SparseTransfer> push = {
        {0, dim, input.keys(), nullptr, input.grads().data()}};
    CHECK(cluster->sparse->Push(step, false, push, nullptr).ok());
    total_rows += 2 * static_cast<int64_t>(input.keys().size());
    occurrences += kRecords * kFeatures;
    ++step;
  }
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(total_rows),
                                                benchmark::Counter::kIsRate);
  cpu.Report(state, total_rows);
  state.counters["distinct"] =
      static_cast<double>(total_rows) / 2 / static_cast<double>(occurrences);
}
BENCHMARK(BM_SparseTrainerStep)->Arg(16)->UseRealTime()->MinTime(2.0);

// Memory of the pserver's table per million rows, ids spread over 2^40, by
// row dim, optimizer (its OptimizerConfig::Type: 2 ADAGRAD, 3 ADAM, 6
// ROWWISE_ADAGRAD, 7 ROWWISE_ADAM) and storage_type (0 FLOAT32, 1 BF16).
void BM_SparseMemoryPerMillionRows(benchmark::State& state) {
  const int dim = static_cast<int>(state.range(0));
  const auto type = static_cast<OptimizerConfig::Type>(state.range(1));
  const auto storage =
      static_cast<SparseTableOptions::RowStorage>(state.range(2));
  state.SetLabel(OptimizerConfig::Type_Name(type) + " " +
                 SparseTableOptions::RowStorage_Name(storage));
  for (auto _ : state) {
    OptimizerConfig oc;
    oc.set_type(type);
    oc.set_learning_rate(0.05f);
    auto opt = std::move(*Optimizer::Create(oc, 1));
    SparseTableOptions so;
    so.set_dim(dim);
    so.set_storage_type(storage);
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
    state.counters["payload_bytes_per_row"] =
        RowCodec(storage).bytes_per_float() * (dim + opt->StateFloats(dim));
  }
}
BENCHMARK(BM_SparseMemoryPerMillionRows)
    ->ArgsProduct({{8, 16, 64},
                   {OptimizerConfig::ADAGRAD, OptimizerConfig::ROWWISE_ADAGRAD,
                    OptimizerConfig::ADAM, OptimizerConfig::ROWWISE_ADAM},
                   {SparseTableOptions::FLOAT32, SparseTableOptions::BF16}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// The rows of one table (no transport), push and pull at dim 16 with the
// Zipf batches of BM_SparsePushPull, by storage_type (0 FLOAT32, 1 BF16)
// and where the rows are: cache_pct 0 in memory without limit, else a
// disk tier whose memory caches that percentage of the working set (the
// distinct keys of the batches; rows/s after a warm-up pass over them).
// bytes_per_row: memory over rows in memory; disk_bytes_per_row: the
// store's files over rows on disk.
// A table of rows of kDim floats (Adagrad) in `storage`, in memory
// (cache_pct 0), or with a disk tier in `dir` whose memory holds cache_pct
// percent of `rows` rows.
std::unique_ptr<SparseTable> TierTable(SparseTableOptions::RowStorage storage,
                                       int cache_pct, int64_t rows,
                                       const Optimizer* opt,
                                       const std::string& dir) {
  constexpr int kDim = 16;
  SparseTableOptions so;
  so.set_dim(kDim);
  so.set_storage_type(storage);
  std::unique_ptr<RowStore> store;
  int64_t share = 0;
  if (cache_pct > 0) {
    so.mutable_disk();
    // A row and its share of the index (at most 3/4 full, 8 bytes an entry).
    const int64_t row_bytes =
        RowSlab::RowBytes(kDim + opt->StateFloats(kDim), RowCodec(storage)) +
        16;
    share = rows * cache_pct / 100 * row_bytes;
    RowStore::Options ro;
    ro.dir = dir;
    ro.filter_bytes = std::max<int64_t>(64 << 10, share / 16);  // as planned
    store = std::move(*RowStore::Open(ro));
  }
  return std::make_unique<SparseTable>(so, opt, SparseTable::kDefaultStripes,
                                       nullptr, share, nullptr,
                                       std::move(store));
}

void BM_SparseTiers(benchmark::State& state) {
  constexpr int kDim = 16;
  const auto storage =
      static_cast<SparseTableOptions::RowStorage>(state.range(0));
  const int cache_pct = static_cast<int>(state.range(1));
  const auto batches = ZipfBatches(64, 1.1, 1e8, 7);
  absl::flat_hash_set<uint64_t> working_set;
  for (const auto& b : batches) working_set.insert(b.begin(), b.end());
  OptimizerConfig oc;
  oc.set_type(OptimizerConfig::ADAGRAD);
  oc.set_learning_rate(0.05f);
  auto opt = std::move(*Optimizer::Create(oc, 1));
  const std::string dir = absl::StrCat("/tmp/shardps-sparse-tiers-", getpid());
  std::unique_ptr<SparseTable> t =
      TierTable(storage, cache_pct, static_cast<int64_t>(working_set.size()),
                opt.get(), dir);
  SparseTable& table = *t;
  std::vector<float> rows(kBatchKeys * kDim), grads(kBatchKeys * kDim, 0.01f);
  const float one[] = {1.0f};
  int64_t step = 0;
  for (const auto& keys : batches) {  // every row made once
    table.Read(keys, rows.data());
    table.Apply(++step, keys, grads, one);
  }
  int64_t total_rows = 0;
  for (auto _ : state) {
    const auto& keys = batches[step % batches.size()];
    table.Read(keys, rows.data());
    table.Apply(++step, keys, grads, one);
    total_rows += 2 * static_cast<int64_t>(keys.size());
  }
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(total_rows),
                                                benchmark::Counter::kIsRate);
  const SparseCounters c = table.counters();
  state.counters["working_set"] = static_cast<double>(working_set.size());
  state.counters["rows_in_memory"] = static_cast<double>(c.rows);
  state.counters["bytes_per_row"] =
      static_cast<double>(table.MemoryBytes()) / std::max<int64_t>(1, c.rows);
  if (cache_pct > 0) {
    uint64_t disk_bytes = 0;
    for (const auto& f : std::filesystem::recursive_directory_iterator(dir)) {
      if (f.is_regular_file()) disk_bytes += f.file_size();
    }
    const int64_t on_disk = static_cast<int64_t>(working_set.size()) - c.rows;
    state.counters["disk_bytes_per_row"] =
        static_cast<double>(disk_bytes) / std::max<int64_t>(1, on_disk);
    state.counters["loaded/iter"] =
        static_cast<double>(c.loaded_rows) / std::max<int64_t>(1, step);
  }
  state.SetLabel(SparseTableOptions::RowStorage_Name(storage) +
                 (cache_pct > 0 ? absl::StrCat(" disk, cache ", cache_pct, "%")
                                : std::string(" memory")));
}
BENCHMARK(BM_SparseTiers)
    ->ArgsProduct({{SparseTableOptions::FLOAT32, SparseTableOptions::BF16},
                   {0, 50, 20, 10}})
    ->UseRealTime()
    ->MinTime(2.0);

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
