// OpenBLAS sgemm vs Eigen at the MLP's layer shapes (784-256-128-10), for the
// forward product X*W and the two backward products X^T*dY and dY*W^T.
// Run with OPENBLAS_NUM_THREADS=1 to compare single-threaded kernels.

#include <cstdint>
#include <random>
#include <vector>

#include "Eigen/Core"
#include "benchmark/benchmark.h"
#include "kernels/blas.h"

namespace shardps {
namespace {

using RowMatrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

enum Product { kForward = 0, kWeightGrad = 1, kInputGrad = 2 };

struct Operands {
  std::vector<float> x;   // batch x in
  std::vector<float> w;   // in x out
  std::vector<float> dy;  // batch x out
  std::vector<float> out;
};

Operands MakeOperands(int batch, int in, int out) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto fill = [&](size_t n) {
    std::vector<float> v(n);
    for (float& f : v) f = dist(rng);
    return v;
  };
  Operands o;
  o.x = fill(static_cast<size_t>(batch) * in);
  o.w = fill(static_cast<size_t>(in) * out);
  o.dy = fill(static_cast<size_t>(batch) * out);
  // Big enough for any of the three results.
  o.out.assign(static_cast<size_t>(in) * out + static_cast<size_t>(batch) * in,
               0.0f);
  return o;
}

void SetCounters(benchmark::State& state, int batch, int in, int out) {
  const double flops = 2.0 * batch * in * out;
  state.counters["GFLOPS"] = benchmark::Counter(
      flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(state.range(3) == kForward      ? "X*W"
                 : state.range(3) == kWeightGrad ? "Xt*dY"
                                                 : "dY*Wt");
}

void BM_OpenBlas(benchmark::State& state) {
  const int batch = state.range(0), in = state.range(1), out = state.range(2);
  const int product = state.range(3);
  SetBlasThreads(1);
  Operands o = MakeOperands(batch, in, out);
  for (auto _ : state) {
    switch (product) {
      case kForward:  // (batch x in) * (in x out)
        Gemm(false, false, batch, out, in, 1.0f, o.x.data(), in, o.w.data(),
             out, 0.0f, o.out.data(), out);
        break;
      case kWeightGrad:  // (in x batch) * (batch x out)
        Gemm(true, false, in, out, batch, 1.0f, o.x.data(), in, o.dy.data(),
             out, 0.0f, o.out.data(), out);
        break;
      default:  // (batch x out) * (out x in)
        Gemm(false, true, batch, in, out, 1.0f, o.dy.data(), out, o.w.data(),
             out, 0.0f, o.out.data(), in);
        break;
    }
    benchmark::DoNotOptimize(o.out.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, batch, in, out);
}

void BM_Eigen(benchmark::State& state) {
  const int batch = state.range(0), in = state.range(1), out = state.range(2);
  const int product = state.range(3);
  Eigen::setNbThreads(1);
  Operands o = MakeOperands(batch, in, out);
  Eigen::Map<const RowMatrix> x(o.x.data(), batch, in);
  Eigen::Map<const RowMatrix> w(o.w.data(), in, out);
  Eigen::Map<const RowMatrix> dy(o.dy.data(), batch, out);
  Eigen::Map<RowMatrix> y(o.out.data(), batch, out);
  Eigen::Map<RowMatrix> dw(o.out.data(), in, out);
  Eigen::Map<RowMatrix> dx(o.out.data(), batch, in);
  for (auto _ : state) {
    switch (product) {
      case kForward:
        y.noalias() = x * w;
        break;
      case kWeightGrad:
        dw.noalias() = x.transpose() * dy;
        break;
      default:
        dx.noalias() = dy * w.transpose();
        break;
    }
    benchmark::DoNotOptimize(o.out.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, batch, in, out);
}

void LayerShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "in", "out", "product"});
  const int layers[][2] = {{784, 256}, {256, 128}, {128, 10}};
  for (int batch : {64, 128}) {
    for (const auto& l : layers) {
      for (int product : {kForward, kWeightGrad, kInputGrad}) {
        b->Args({batch, l[0], l[1], product});
      }
    }
  }
}

BENCHMARK(BM_OpenBlas)->Apply(LayerShapes);
BENCHMARK(BM_Eigen)->Apply(LayerShapes);

}  // namespace
}  // namespace shardps

BENCHMARK_MAIN();
