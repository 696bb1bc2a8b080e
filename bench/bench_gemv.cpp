// Google Benchmark: one-row bf16 products (generation: one position at a time) at gpt 1.3b's
// MLP shape, weight [8192, 2048] bf16, 2 threads: LibTorch's native bf16 linear (oneDNN;
// fast only on CPUs with bf16 dot products), zoff's one-row kernel (widened_linear without
// autograd, models/gemv_kernels.h; vdpbf16ps where the CPU has it, else widened to fp32),
// the same kernel held to AVX2 (the widened form), and the widened GEMM it replaces (the
// weight widened to fp32 first), beside a probe that only reads the same weights. The
// weights sit on huge pages, as zoff generate holds them. Compare within one run:
//   bench_gemv --benchmark_repetitions=6 --benchmark_enable_random_interleaving=true
//              --benchmark_report_aggregates_only=true Bytes processed = the bf16 weight's bytes
//              per call. Each call takes
// the next of kWeights weights (1.07 GB in all, past the 480 MiB L3 of the machine this was
// written on), so the weights come from DRAM as in generation, where every product reads
// another layer's weight.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <vector>

#include "zoff/core/huge_page_tensor.h"
#include "zoff/models/widened_products.h"
#include "zoff/optim/simd_dispatch.h"

namespace {

using zoff::models::Bf16Products;

constexpr int kThreads = 2;
constexpr int kWeights = 32;  // x 32 MiB

std::vector<torch::Tensor> make_weights() {
  torch::manual_seed(1);
  std::vector<torch::Tensor> weights;
  for (int i = 0; i < kWeights; ++i) {
    // On huge pages, as zoff generate holds its weights (core/huge_page_tensor.h).
    auto w = zoff::empty_on_huge_pages({8192, 2048}, torch::kBFloat16);
    weights.push_back(w.copy_(torch::randn({8192, 2048}) * 0.02));
  }
  return weights;
}

void run(benchmark::State& state, Bf16Products mode, bool grad_mode) {
  at::set_num_threads(kThreads);
  const auto weights = make_weights();
  const auto b = torch::zeros({8192}).to(torch::kBFloat16);
  const auto x = torch::randn({1, 1, 2048}).to(torch::kBFloat16);
  zoff::models::set_bf16_products(mode);
  torch::AutoGradMode grad(grad_mode);  // on: the widened GEMM (the kernel is for inference)
  size_t next = 0;
  for (auto _ : state) {
    auto y = zoff::models::widened_linear(x, weights[next++ % weights.size()], b);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  zoff::models::set_bf16_products(Bf16Products::kAuto);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(weights[0].nbytes()));
}

// The most a one-row product could read: the same weights, 2 threads, each word loaded once
// into 8 independent sums, lines asked for 2 KiB ahead as the kernel does.
void BM_ReadProbe(benchmark::State& state) {
  at::set_num_threads(kThreads);
  const auto weights = make_weights();
  size_t next = 0;
  for (auto _ : state) {
    const auto& w = weights[next++ % weights.size()];
    const auto* p = static_cast<const uint64_t*>(w.data_ptr());
    const auto words = static_cast<int64_t>(w.nbytes() / sizeof(uint64_t));
    at::parallel_for(0, words, 1 << 16, [&](int64_t i0, int64_t i1) {
      uint64_t s[8] = {};
      for (int64_t i = i0; i + 8 <= i1; i += 8) {
        __builtin_prefetch(p + i + 256, 0, 2);
        for (int j = 0; j < 8; ++j) s[j] ^= p[i + j];
      }
      benchmark::DoNotOptimize(s);
    });
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(weights[0].nbytes()));
}

void BM_OneRowNativeBf16(benchmark::State& state) { run(state, Bf16Products::kNative, false); }
void BM_OneRowZoffKernel(benchmark::State& state) { run(state, Bf16Products::kAuto, false); }
void BM_OneRowZoffKernelAvx2(benchmark::State& state) {
  zoff::optim::force_simd_level(zoff::optim::SimdLevel::kAvx2);
  run(state, Bf16Products::kAuto, false);
  zoff::optim::force_simd_level(zoff::optim::SimdLevel::kBest);
}
void BM_OneRowWidenedGemm(benchmark::State& state) { run(state, Bf16Products::kWidened, true); }

BENCHMARK(BM_ReadProbe)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_OneRowNativeBf16)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_OneRowZoffKernel)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_OneRowZoffKernelAvx2)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_OneRowWidenedGemm)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
