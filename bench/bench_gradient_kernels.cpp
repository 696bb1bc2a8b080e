// Google Benchmark: the step's gradient pass (average over ranks + the norm's squares) beside
// the LibTorch ops it replaced and a memcpy of the same bytes (read n floats, write n floats:
// the pass's memory bound), over gpt small's shard on each of 2 ranks (7.2M floats, 28.8 MB:
// inside this machine's 32 MB L3 when nothing else runs) and 64M floats (256 MB, in DRAM).
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstring>
#include <vector>

#include "zoff/optim/gradient_kernels.h"

namespace {

std::vector<float> gradient(int64_t n) {
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 2001 - 1000) * 1e-5f;
  return g;
}

void BM_DivideAndSumSquares(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto g = gradient(n);
  for (auto _ : state) {
    // Dividing by 1 keeps the values (and the pass's loads and stores) the same every time.
    benchmark::DoNotOptimize(zoff::optim::divide_and_sum_squares(g.data(), g.size(), 1.0f));
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}

void BM_TorchDivThenSquareSum(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto g = torch::from_blob(gradient(n).data(), {n}).clone();
  for (auto _ : state) {
    g.div_(1.0);
    double total = 0;  // as the engine did: 64K-element chunks, so no shard-sized temporary
    for (int64_t at = 0; at < n; at += 65536) {
      total += g.narrow(0, at, std::min<int64_t>(65536, n - at)).square().sum().item<double>();
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}

void BM_MemcpyProbe(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto a = gradient(n);
  std::vector<float> b(n);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), n * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}

BENCHMARK(BM_DivideAndSumSquares)
    ->Arg(7200000)
    ->Arg(int64_t{1} << 26)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TorchDivThenSquareSum)
    ->Arg(7200000)
    ->Arg(int64_t{1} << 26)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MemcpyProbe)->Arg(7200000)->Arg(int64_t{1} << 26)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
