// Optimizer update throughput of the CPU functors (kernels/optimizer_cpu.h)
// in GB/s of memory touched, next to a memcpy of the same number of floats.
//
// Bytes per element: the gradient is read (4), the value read and written
// (8), and each state vector read and written (8 each): SGD 12, momentum and
// Adagrad 20, Adam 28. memcpy reads and writes n floats: 8 per element.
// Argument: number of floats (1M fits in L2/L3, 16M streams from DRAM).
// Single-threaded, like the pserver's per-block updates.

#include <cstdint>
#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/optimizer_cpu.h"
#include "optimizer/optimizer.h"

namespace shardps {
namespace {

void SetThroughput(benchmark::State& state, int64_t bytes_per_element,
                   int floats_arg = 0) {
  const int64_t bytes = state.range(floats_arg) * bytes_per_element;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(bytes) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

// Small gradients and a tiny learning rate keep values finite and normal
// (no denormal slow paths) however many iterations run.
std::vector<float> Filled(int64_t n, float v) {
  return std::vector<float>(static_cast<size_t>(n), v);
}

void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> src = Filled(n, 1.0f), dst = Filled(n, 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  SetThroughput(state, 2 * sizeof(float));
}

void BM_Sgd(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> g = Filled(n, 1e-3f), p = Filled(n, 0.5f);
  for (auto _ : state) {
    ApplySgd<CpuDevice>()(1e-3f, 1.0f, g, absl::MakeSpan(p));
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
  }
  SetThroughput(state, 3 * sizeof(float));
}

void BM_Momentum(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> g = Filled(n, 1e-3f), p = Filled(n, 0.5f),
                     v = Filled(n, 0.0f);
  for (auto _ : state) {
    ApplyMomentum<CpuDevice>()(1e-3f, 0.9f, /*nesterov=*/false, 1.0f, g,
                               absl::MakeSpan(p), absl::MakeSpan(v));
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
  }
  SetThroughput(state, 5 * sizeof(float));
}

void BM_Adagrad(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> g = Filled(n, 1e-3f), p = Filled(n, 0.5f),
                     acc = Filled(n, 0.1f);
  for (auto _ : state) {
    ApplyAdagrad<CpuDevice>()(1e-3f, 1e-10f, 1.0f, g, absl::MakeSpan(p),
                              absl::MakeSpan(acc));
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
  }
  SetThroughput(state, 5 * sizeof(float));
}

void BM_Adam(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> g = Filled(n, 1e-3f), p = Filled(n, 0.5f),
                     m = Filled(n, 0.0f), v = Filled(n, 0.0f);
  for (auto _ : state) {
    ApplyAdam<CpuDevice>()(1e-3f, 0.9f, 0.999f, 1e-8f, 1.0f, g,
                           absl::MakeSpan(p), absl::MakeSpan(m),
                           absl::MakeSpan(v));
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
  }
  SetThroughput(state, 7 * sizeof(float));
}

// The pserver's update of one dense block (Optimizer::Apply), and the same
// update checked for non-finite results (Optimizer::ApplyIfFinite, which
// saves each chunk first): what the check costs. Arguments: the type
// (1 momentum, 3 Adam), the block's floats (65536 is the default block).
void OptimizerUpdate(benchmark::State& state, bool checked) {
  OptimizerConfig c;
  c.set_type(static_cast<OptimizerConfig::Type>(state.range(0)));
  c.set_learning_rate(1e-3f);
  c.set_momentum(0.9f);
  auto opt = *Optimizer::Create(c, 1);
  const int64_t n = state.range(1);
  std::vector<float> g = Filled(n, 1e-3f), p = Filled(n, 0.5f);
  std::vector<std::vector<float>> state_vectors(opt->num_slots(),
                                                Filled(n, 0.0f));
  std::vector<absl::Span<float>> slots;
  for (auto& s : state_vectors) slots.push_back(absl::MakeSpan(s));
  int64_t step = 0;
  for (auto _ : state) {
    if (checked) {
      benchmark::DoNotOptimize(
          opt->ApplyIfFinite(step, step, 1.0f, g, absl::MakeSpan(p), slots));
    } else {
      opt->Apply(step, step, 1.0f, g, absl::MakeSpan(p), slots);
    }
    ++step;
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
  }
  SetThroughput(state, (3 + 2 * opt->num_slots()) * sizeof(float), 1);
}

void BM_BlockUpdate(benchmark::State& state) { OptimizerUpdate(state, false); }
void BM_BlockUpdateIfFinite(benchmark::State& state) {
  OptimizerUpdate(state, true);
}

void BlockSizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "floats"});
  for (int type : {OptimizerConfig::MOMENTUM, OptimizerConfig::ADAM}) {
    for (int floats : {1 << 16, 1 << 20}) b->Args({type, floats});
  }
  b->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.3);
}

BENCHMARK(BM_BlockUpdate)->Apply(BlockSizes);
BENCHMARK(BM_BlockUpdateIfFinite)->Apply(BlockSizes);

void Sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("floats")->Arg(1 << 20)->Arg(16 << 20);
  b->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.3);
}

// 64M floats (256 MiB): the size of docs/benchmarks.md's memcpy figure, to tell
// how this machine compares with the one the peers were measured on.
BENCHMARK(BM_Memcpy)->Apply(Sizes)->Arg(64 << 20);
BENCHMARK(BM_Sgd)->Apply(Sizes);
BENCHMARK(BM_Momentum)->Apply(Sizes);
BENCHMARK(BM_Adagrad)->Apply(Sizes);
BENCHMARK(BM_Adam)->Apply(Sizes);

}  // namespace
}  // namespace shardps

BENCHMARK_MAIN();
