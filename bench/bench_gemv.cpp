// Google Benchmark: one-row bf16 products (generation: one position at a time) at gpt 1.3b's
// MLP shape, weight [8192, 2048] bf16, 2 threads: LibTorch's native bf16 linear (oneDNN;
// fast only on CPUs with bf16 dot products), zoff's one-row kernel (widened_linear without
// autograd, models/gemv_kernels.h) and the widened GEMM it replaces there (the weight
// widened to fp32 first). Bytes processed = the bf16 weight's bytes per call. Each call takes
// the next of kWeights weights (1.07 GB in all, past the 480 MiB L3 of the machine this was
// written on), so the weights come from DRAM as in generation, where every product reads
// another layer's weight.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <vector>

#include "zoff/models/widened_products.h"

namespace {

using zoff::models::Bf16Products;

constexpr int kThreads = 2;
constexpr int kWeights = 32;  // x 32 MiB

void run(benchmark::State& state, Bf16Products mode, bool grad_mode) {
  at::set_num_threads(kThreads);
  torch::manual_seed(1);
  std::vector<torch::Tensor> weights;
  for (int i = 0; i < kWeights; ++i) {
    weights.push_back((torch::randn({8192, 2048}) * 0.02).to(torch::kBFloat16));
  }
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

void BM_OneRowNativeBf16(benchmark::State& state) { run(state, Bf16Products::kNative, false); }
void BM_OneRowZoffKernel(benchmark::State& state) { run(state, Bf16Products::kWidened, false); }
void BM_OneRowWidenedGemm(benchmark::State& state) { run(state, Bf16Products::kWidened, true); }

BENCHMARK(BM_OneRowNativeBf16)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_OneRowZoffKernel)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_OneRowWidenedGemm)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
