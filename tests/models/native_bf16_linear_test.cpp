// native_bf16_linear against ATen's bf16 linear and fp64 (forward, every gradient, frozen
// operands, no bias), transpose_16bit against LibTorch's transposed copy, bad input refused.
#include "zoff/models/native_bf16_linear.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/optim/simd_dispatch.h"

namespace zoff::models::native_bf16_linear_test {
namespace {

// Relative error (norm) of bf16 gradients against fp64 from the same bf16 operands: the
// products sum in fp32 and round once to bf16 (2^-9 relative per element); measured
// 1.6-1.7e-3 for both ATen's linear and this one (2026-12-08, AMX Xeon).
constexpr double kBf16RelTol = 4e-3;
// This linear's gradient error may exceed ATen's own by at most this fraction.
constexpr double kAccuracyMargin = 0.05;

struct Grads {
  torch::Tensor y, dx, dw, db;
};

Grads run(bool ours, const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
          const torch::Tensor& dy) {
  auto xl = x.detach().clone().requires_grad_();
  auto wl = w.detach().clone().requires_grad_();
  auto bl = b.detach().clone().requires_grad_();
  auto y = ours ? native_bf16_linear(xl, wl, bl) : torch::linear(xl, wl, bl);
  y.backward(dy);
  return {y.detach(), xl.grad(), wl.grad(), bl.grad()};
}

double rel_err(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat64) - want).norm().item<double>() / want.norm().item<double>();
}

TEST(NativeBf16Linear, ForwardIsAtensAndGradientsAreAsAccurate) {
  // gpt small's fc and mlp projection, an odd shape, a 2-D input.
  const std::vector<std::vector<int64_t>> shapes = {
      {8, 256, 384, 1536}, {8, 256, 1536, 384}, {3, 37, 50, 70}, {1, 129, 33, 17}};
  for (const auto& s : shapes) {
    torch::manual_seed(s[2]);
    const auto x = torch::randn({s[0], s[1], s[2]}).to(torch::kBFloat16);
    const auto w = (torch::randn({s[3], s[2]}) * 0.05).to(torch::kBFloat16);
    const auto b = torch::randn({s[3]}).to(torch::kBFloat16);
    const auto dy = torch::randn({s[0], s[1], s[3]}).to(torch::kBFloat16);
    const auto ours = run(true, x, w, b, dy);
    const auto aten = run(false, x, w, b, dy);
    const auto exact = run(false, x.to(torch::kFloat64), w.to(torch::kFloat64),
                           b.to(torch::kFloat64), dy.to(torch::kFloat64));
    const std::string what = std::to_string(s[2]) + " -> " + std::to_string(s[3]);
    EXPECT_TRUE(torch::equal(ours.y, aten.y)) << what;
    EXPECT_TRUE(torch::equal(ours.dx, aten.dx)) << what;  // the same product as ATen's
    EXPECT_TRUE(torch::equal(ours.db, aten.db)) << what;
    EXPECT_EQ(ours.dw.scalar_type(), torch::kBFloat16);
    const double err = rel_err(ours.dw, exact.dw), aten_err = rel_err(aten.dw, exact.dw);
    EXPECT_LT(err, kBf16RelTol) << what;
    EXPECT_LE(err, aten_err * (1.0 + kAccuracyMargin)) << what;
  }
}

TEST(NativeBf16Linear, FrozenOperandsAndNoBias) {
  torch::manual_seed(1);
  const auto x = torch::randn({4, 24}).to(torch::kBFloat16);
  const auto w = torch::randn({10, 24}).to(torch::kBFloat16).requires_grad_();
  // x needs no gradient (the first layer's input): only w's is computed.
  auto y = native_bf16_linear(x, w, torch::Tensor());
  y.sum().backward();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(torch::equal(w.grad(), torch::mm(torch::ones({10, 4}, x.options()), x)));
  // A frozen weight: x's gradient only.
  auto xg = x.clone().requires_grad_();
  native_bf16_linear(xg, w.detach(), torch::Tensor()).sum().backward();
  EXPECT_TRUE(torch::equal(xg.grad(), torch::mm(torch::ones({4, 10}, x.options()), w.detach())));
}

TEST(NativeBf16Linear, AppliesOnlyToBf16CpuOperandsUnderAutograd) {
  const auto x = torch::randn({4, 8}).to(torch::kBFloat16);
  const auto w = torch::randn({3, 8}).to(torch::kBFloat16).requires_grad_();
  EXPECT_TRUE(native_bf16_linear_applies(x, w, torch::Tensor()));
  EXPECT_FALSE(native_bf16_linear_applies(x, w.detach(), torch::Tensor()));  // nothing to train
  EXPECT_FALSE(native_bf16_linear_applies(x.to(torch::kFloat32), w, torch::Tensor()));
  EXPECT_FALSE(native_bf16_linear_applies(x[0], w, torch::Tensor()));  // 1-D x
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(native_bf16_linear_applies(x, w, torch::Tensor()));
  }
  try {
    native_bf16_linear(x.to(torch::kFloat32), w, torch::Tensor());
    ADD_FAILURE() << "fp32 x accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("Float"), std::string::npos) << e.what();
  }
}

// Puts the best SIMD level back however the test ends.
struct SimdLevelGuard {
  ~SimdLevelGuard() { optim::force_simd_level(optim::SimdLevel::kBest); }
};

TEST(Transpose16bit, EqualsLibTorchsTransposedCopyOnEverySimdLevelAndThreadCount) {
  SimdLevelGuard guard;
  const int threads = at::get_num_threads();
  // Multiples of the 8 x 8 tiles and of the 256-row strips, ragged edges, single rows.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {2048, 1536}, {1000, 1003}, {7, 3}, {1, 9}, {9, 1}, {300, 17}, {513, 64}};
  for (const auto level : optim::supported_simd_levels()) {
    optim::force_simd_level(level);
    for (int n : {1, 2}) {
      at::set_num_threads(n);
      for (const auto& [r, c] : shapes) {
        const auto t = torch::randint(-30000, 30000, {r, c}, torch::kInt16).view(torch::kBFloat16);
        EXPECT_TRUE(torch::equal(transpose_16bit(t).view(torch::kInt16),
                                 t.t().contiguous().view(torch::kInt16)))
            << r << " x " << c << ", " << n << " threads, " << optim::simd_level_name(level);
      }
    }
  }
  at::set_num_threads(threads);
  // A strided source is made contiguous first; fp16 is 16-bit too.
  const auto s = torch::randn({40, 30}).to(torch::kHalf).narrow(1, 3, 20);
  EXPECT_TRUE(torch::equal(transpose_16bit(s), s.t().contiguous()));
}

TEST(Transpose16bit, RefusesOtherRanksAndWidths) {
  for (const auto& t : {torch::zeros({2, 3, 4}, torch::kBFloat16), torch::zeros({2, 3})}) {
    try {
      transpose_16bit(t);
      ADD_FAILURE() << t.sizes();
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("transpose_16bit"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace zoff::models::native_bf16_linear_test
