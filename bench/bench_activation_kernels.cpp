// Google Benchmark: zoff's fused bf16 GELU, LayerNorm and causal softmax (models/) against
// LibTorch's ops on the same tensors, forward and forward + backward, at gpt small's shapes
// per rank (batch 8, context 256: MLP activations [8, 256, 1536], LayerNorm input
// [8, 256, 384], attention scores [8 x 6 heads, 256, 256]), one thread as each rank of a
// 2-rank run on this 2-core machine.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <limits>
#include <vector>

#include "zoff/models/fused_causal_softmax.h"
#include "zoff/models/fused_gelu.h"
#include "zoff/models/fused_layer_norm.h"

namespace {

constexpr double kEps = 1e-5;

torch::Tensor activations(std::vector<int64_t> shape) {
  at::set_num_threads(1);
  torch::manual_seed(1);
  return (torch::randn(shape) * 2).to(torch::kBFloat16);
}

// Forward only (arg 0) or forward + backward of (y * dy).sum() (arg 1) through `op`, on x0.
template <class Op>
void run(benchmark::State& state, const torch::Tensor& x0, const Op& op) {
  const bool backward = state.range(0) == 1;
  const auto dy = torch::randn(x0.sizes()).to(torch::kBFloat16);
  for (auto _ : state) {
    auto x = x0.detach().requires_grad_(backward);
    auto y = op(x);
    if (backward) y.backward(dy);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * x0.numel());
}

template <class Op>
void run(benchmark::State& state, const std::vector<int64_t>& shape, const Op& op) {
  run(state, activations(shape), op);
}

const std::vector<int64_t> kMlpShape{8, 256, 1536};
const std::vector<int64_t> kNormShape{8, 256, 384};
const std::vector<int64_t> kScoresShape{48, 256, 256};
constexpr double kScale = 0.125;  // 1 / sqrt(head size 64)

void BM_GeluLibTorch(benchmark::State& state) {
  run(state, kMlpShape, [](const torch::Tensor& x) { return torch::gelu(x); });
}
void BM_GeluFused(benchmark::State& state) {
  run(state, kMlpShape, [](const torch::Tensor& x) { return zoff::models::fused_gelu(x); });
}

// LibTorch's path for bf16 activations as torch.autocast runs it: widen, fp32 layer_norm, round.
void BM_LayerNormLibTorch(benchmark::State& state) {
  const auto w = torch::ones({384}), b = torch::zeros({384});
  run(state, kNormShape, [&](const torch::Tensor& x) {
    return torch::layer_norm(x.to(torch::kFloat32), {384}, w, b, kEps).to(torch::kBFloat16);
  });
}
void BM_LayerNormFused(benchmark::State& state) {
  const auto w = torch::ones({384}), b = torch::zeros({384});
  run(state, kNormShape,
      [&](const torch::Tensor& x) { return zoff::models::fused_layer_norm(x, w, b, kEps); });
}

// LibTorch's path before the fused kernel: baddbmm wrote alpha q k^T plus the -inf mask, so
// the softmax's input is scaled and masked already; its backward is the bf16 softmax's.
void BM_CausalSoftmaxLibTorch(benchmark::State& state) {
  const int64_t T = kScoresShape.back();
  const auto future =
      torch::full({T, T}, -std::numeric_limits<double>::infinity(), torch::kBFloat16).triu(1);
  run(state, activations(kScoresShape) * kScale + future,
      [](const torch::Tensor& x) { return torch::softmax(x, -1); });
}
void BM_CausalSoftmaxFused(benchmark::State& state) {
  run(state, kScoresShape,
      [](const torch::Tensor& x) { return zoff::models::fused_causal_softmax(x, kScale); });
}

BENCHMARK(BM_GeluLibTorch)->ArgName("backward")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GeluFused)->ArgName("backward")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LayerNormLibTorch)->ArgName("backward")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LayerNormFused)->ArgName("backward")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CausalSoftmaxLibTorch)
    ->ArgName("backward")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CausalSoftmaxFused)
    ->ArgName("backward")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
