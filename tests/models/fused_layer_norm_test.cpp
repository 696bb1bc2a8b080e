// fused_layer_norm against LibTorch's own path (widen to fp32, layer_norm, round to bf16),
// forward and backward, and its refusals of bad input.
#include "zoff/models/fused_layer_norm.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "zoff/core/error.h"

namespace zoff::models::fused_layer_norm_test {
namespace {

constexpr double kEps = 1e-5;
// The two paths sum in different orders in fp32, so a result can land on the other side of a
// bf16 rounding boundary: at most one bf16 ulp apart (2^-7 relative, with a floor for values
// near zero), in at most this fraction of the elements (measured: ~3e-5 for y and dx).
constexpr double kBf16Ulp = 1.0 / 128.0;
constexpr double kAbsFloor = 1e-6;
constexpr double kMaxDifferingFraction = 1e-3;
// fp32 weight gradients are sums over rows in another order: relative to the largest one.
constexpr double kFp32SumRel = 1e-5;

struct Grads {
  torch::Tensor y, dx, dw, db;
};

// y and the gradients of (y * dy).sum() through `norm`.
template <class Norm>
Grads run(const Norm& norm, const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
          const torch::Tensor& dy) {
  auto xv = x.detach().clone().requires_grad_();
  auto wv = w.detach().clone().requires_grad_();
  auto bv = b.detach().clone().requires_grad_();
  auto y = norm(xv, wv, bv);
  y.backward(dy);
  return {y.detach(), xv.grad(), wv.grad(), bv.grad()};
}

torch::Tensor libtorch_path(const torch::Tensor& x, const torch::Tensor& w,
                            const torch::Tensor& b) {
  return torch::layer_norm(x.to(torch::kFloat32), {x.size(-1)}, w.to(torch::kFloat32),
                           b.to(torch::kFloat32), kEps)
      .to(x.scalar_type());
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const auto g = got.to(torch::kFloat64), r = want.to(torch::kFloat64);
  const auto diff = (g - r).abs();
  if (got.scalar_type() == torch::kFloat32) {
    EXPECT_LE(diff.max().item<double>(), kFp32SumRel * r.abs().max().item<double>()) << what;
    return;
  }
  const auto bound = r.abs() * kBf16Ulp + kAbsFloor;
  EXPECT_TRUE(diff.le(bound).all().item<bool>())
      << what << ": largest difference " << diff.max().item<double>();
  const double differing = diff.gt(0).to(torch::kFloat64).mean().item<double>();
  EXPECT_LE(differing, kMaxDifferingFraction) << what;
}

struct Case {
  std::vector<int64_t> shape;
  torch::ScalarType param_dtype;
};

TEST(FusedLayerNorm, MatchesLibTorchWidenNormalizeRound) {
  // gpt small's activations; a width with a tail after full vectors and rows that are not a
  // multiple of the backward's chunk; fp32 parameters.
  for (const Case& c : {Case{{8, 256, 384}, torch::kBFloat16}, Case{{3, 100, 37}, torch::kBFloat16},
                        Case{{300, 64}, torch::kFloat32}}) {
    torch::manual_seed(7);
    const int64_t C = c.shape.back();
    const auto x = (torch::randn(c.shape) * 3 + 0.5).to(torch::kBFloat16);
    const auto w = (torch::randn({C}) * 0.2 + 1).to(c.param_dtype);
    const auto b = (torch::randn({C}) * 0.1).to(c.param_dtype);
    const auto dy = torch::randn(c.shape).to(torch::kBFloat16);
    const auto want = run(libtorch_path, x, w, b, dy);
    const auto got = run([](const auto& xv, const auto& wv,
                            const auto& bv) { return fused_layer_norm(xv, wv, bv, kEps); },
                         x, w, b, dy);
    const std::string name = "width " + std::to_string(C);
    expect_close(got.y, want.y, name + " y");
    expect_close(got.dx, want.dx, name + " dx");
    expect_close(got.dw, want.dw, name + " dweight");
    expect_close(got.db, want.db, name + " dbias");
  }
}

TEST(FusedLayerNorm, ResultsDoNotDependOnTheThreadCount) {
  torch::manual_seed(3);
  const auto x = torch::randn({1000, 96}).to(torch::kBFloat16);
  const auto w = torch::randn({96}).to(torch::kBFloat16);
  const auto b = torch::randn({96}).to(torch::kBFloat16);
  const auto dy = torch::randn({1000, 96}).to(torch::kBFloat16);
  auto fused = [](const auto& xv, const auto& wv, const auto& bv) {
    return fused_layer_norm(xv, wv, bv, kEps);
  };
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = run(fused, x, w, b, dy);
  at::set_num_threads(2);
  const auto two = run(fused, x, w, b, dy);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(one.y, two.y));
  EXPECT_TRUE(torch::equal(one.dx, two.dx));
  EXPECT_TRUE(torch::equal(one.dw, two.dw));
  EXPECT_TRUE(torch::equal(one.db, two.db));
}

void expect_usage_error(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                        double eps, const std::string& needle) {
  try {
    (void)fused_layer_norm(x, w, b, eps);
    ADD_FAILURE() << "accepted: " << needle;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(FusedLayerNorm, BadInputIsAUsageErrorNamingIt) {
  const auto x = torch::zeros({4, 8}, torch::kBFloat16);
  const auto w = torch::ones({8}, torch::kBFloat16), b = torch::zeros({8}, torch::kBFloat16);
  expect_usage_error(x.to(torch::kFloat32), w, b, kEps, "x is Float");
  expect_usage_error(x, torch::ones({7}, torch::kBFloat16), b, kEps, "weight has shape [7]");
  expect_usage_error(x, w, torch::zeros({8}, torch::kInt64), kEps, "bias is Long");
  expect_usage_error(x, w, b, 0.0, "eps = 0");
  expect_usage_error(torch::zeros({4, 0}, torch::kBFloat16), w, b, kEps, "non-empty last");
}

}  // namespace
}  // namespace zoff::models::fused_layer_norm_test
