// Threshold/bitmap codec throughput (common/threshold_codec.h) in GB/s of the
// fp32 residual (4 bytes per element, read by encode; the target of decode),
// next to a memcpy of the same n floats (also counted as 4n bytes, so the
// columns compare directly; memcpy moves 8n).
//
// Arguments: n floats (1M fits in cache, 16M and 64M stream from DRAM) and
// the density k/n in millionths: 100, 1000 and 10000 give threshold messages
// (k/n = 1e-4, 1e-3, 1e-2); 100000 (k/n = 0.1 > 1/16) gives a bitmap.
// Selected elements are at 1.5 (t = 1), at random places; the others are
// uniform in (-0.45, 0.45), so no sign-only bitmap states.
// Encode restores the residual outside the timed region each iteration.
// Single-threaded.

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "compression/threshold_codec.h"

namespace shardps {
namespace {

constexpr float kThreshold = 1.0f;

void SetThroughput(benchmark::State& state, int64_t n) {
  const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(bytes) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

std::vector<float> Residual(int64_t n, double density) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<float> small(-0.45f, 0.45f);
  std::bernoulli_distribution hot(density);
  std::vector<float> r(static_cast<size_t>(n));
  for (float& v : r) v = hot(rng) ? 1.5f : small(rng);
  return r;
}

void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> src(n, 1.0f), dst(n, 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  SetThroughput(state, n);
}

void BM_Encode(benchmark::State& state) {
  const int64_t n = state.range(0);
  const double density = state.range(1) * 1e-6;
  const std::vector<float> pristine = Residual(n, density);
  std::vector<float> r = pristine;
  std::vector<int32_t> msg;
  msg.reserve(BitmapMessageInts(n));
  int64_t bytes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::memcpy(r.data(), pristine.data(), n * sizeof(float));
    msg.clear();
    state.ResumeTiming();
    absl::StatusOr<EncodeInfo> info =
        EncodeThresholdOrBitmap(absl::MakeSpan(r), kThreshold, &msg);
    benchmark::DoNotOptimize(msg.data());
    benchmark::ClobberMemory();
    if (!info.ok()) {
      state.SkipWithError("encode failed");
      break;
    }
    bytes = static_cast<int64_t>(info->bytes);
  }
  SetThroughput(state, n);
  state.counters["msg_bytes"] = static_cast<double>(bytes);
  state.counters["vs_fp32"] =
      static_cast<double>(bytes) / (4.0 * static_cast<double>(n));
}

void BM_Decode(benchmark::State& state) {
  const int64_t n = state.range(0);
  const double density = state.range(1) * 1e-6;
  std::vector<float> r = Residual(n, density);
  std::vector<int32_t> msg;
  if (!EncodeThresholdOrBitmap(absl::MakeSpan(r), kThreshold, &msg).ok()) {
    state.SkipWithError("encode failed");
    return;
  }
  std::vector<float> target(n, 0.0f);
  for (auto _ : state) {
    absl::Status s = DecodeAdd(msg, absl::MakeSpan(target));
    benchmark::DoNotOptimize(target.data());
    benchmark::ClobberMemory();
    if (!s.ok()) {
      state.SkipWithError("decode failed");
      break;
    }
  }
  SetThroughput(state, n);
  state.counters["fmt"] = msg.empty() ? -1 : msg[3];
}

void Sizes(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.3);
}

void Codec(benchmark::internal::Benchmark* b) {
  b->ArgNames({"floats", "ppm"});
  for (int64_t n : {int64_t{1} << 20, int64_t{16} << 20, int64_t{64} << 20}) {
    for (int64_t ppm : {100, 1000, 10000, 100000}) b->Args({n, ppm});
  }
  Sizes(b);
}

BENCHMARK(BM_Memcpy)
    ->ArgName("floats")
    ->Arg(1 << 20)
    ->Arg(16 << 20)
    ->Arg(64 << 20)
    ->Apply(Sizes);
BENCHMARK(BM_Encode)->Apply(Codec);
BENCHMARK(BM_Decode)->Apply(Codec);

}  // namespace
}  // namespace shardps

BENCHMARK_MAIN();
