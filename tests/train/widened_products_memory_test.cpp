// The widened products' fp32 memory, measured by the activation meter's allocator: a large
// weight is widened a chunk at a time into scratch, never whole (widened_products.cpp).
#include <gtest/gtest.h>

#include <cstdio>

#include "zoff/engine/activation_meter.h"
#include "zoff/models/widened_products.h"

namespace zoff::train::widened_products_memory_test {
namespace {

// The chunks' bound (widened_products.cpp: three per-thread buffers of at most 4 MiB) plus
// x and its gradient in fp32 (64 x 4096 x 4 bytes each): what the products may hold beyond
// their 16-bit results.
constexpr int64_t kScratchBytes = 3 * (int64_t{4} << 20);
constexpr int64_t kRowsFp32Bytes = 2 * 64 * 4096 * 4;

TEST(WidenedProductsMemory, ALargeWeightIsNeverWidenedWhole) {
  models::set_bf16_products(models::Bf16Products::kWidened);
  engine::ActivationMeter meter;  // installs the counting allocator
  torch::manual_seed(1);
  // gpt 6.7b's MLP weight shape: 32 MiB in bf16, 64 MiB as one fp32 copy.
  const auto w = (torch::randn({4096, 4096}) * 0.02).to(torch::kBFloat16).requires_grad_();
  const auto b = torch::zeros({4096}, torch::kBFloat16).requires_grad_();
  const auto x = torch::randn({64, 4096}).to(torch::kBFloat16).requires_grad_();
  const int64_t weight_fp32 = w.numel() * 4;

  engine::ActivationMeter::reset_peak();
  const int64_t before = engine::ActivationMeter::live_bytes();
  const auto y = models::widened_linear(x, w, b);
  const auto grads = torch::autograd::grad({y.to(torch::kFloat32).sum()}, {x, w, b});
  const int64_t peak = engine::ActivationMeter::peak_live_bytes() - before;
  models::set_bf16_products(models::Bf16Products::kAuto);

  // The 16-bit results every bf16 product returns (y, the three gradients) and the bound.
  int64_t results = y.numel() * 2;
  for (const auto& g : grads) results += g.numel() * 2;
  std::printf(
      "  4096 x 4096 bf16 linear, forward + backward: peak %.1f MiB beyond its inputs "
      "(16-bit results %.1f MiB, one fp32 copy of the weight %.1f MiB)\n",
      peak / 1048576.0, results / 1048576.0, weight_fp32 / 1048576.0);
  EXPECT_LE(peak, results + kScratchBytes + kRowsFp32Bytes);
  EXPECT_LT(peak, weight_fp32) << "a whole fp32 copy of the weight was made";
}

}  // namespace
}  // namespace zoff::train::widened_products_memory_test
