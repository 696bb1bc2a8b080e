// fused_gelu against LibTorch's bf16 gelu (fp32 inside, rounded once), forward and backward,
// on every SIMD level this CPU runs; special values; its refusal of bad input.
#include "zoff/models/fused_gelu.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "models/fused_kernel_checks.h"
#include "zoff/core/error.h"
#include "zoff/optim/simd_dispatch.h"

namespace zoff::models::fused_gelu_test {
namespace {

using kernel_checks::differing_fraction;
using kernel_checks::forward_backward;
using kernel_checks::Result;
using kernel_checks::SimdLevelGuard;

// erf by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7) against LibTorch's Sleef erf (1 ulp):
// an fp32 result can land on the other side of a bf16 rounding boundary, so results are at
// most one bf16 ulp apart (2^-7 relative) ...
constexpr double kBf16Ulp = 1.0 / 128.0;
// ... or, where 1 + erf(x / sqrt 2) cancels (x < -3, y and the gradient within ~1e-5 of 0),
// within an absolute floor: |x| / 2 * 3e-7 at |x| <= 6 (beyond, both are exactly 0).
constexpr double kAbsFloor = 2e-6;
// Elements that differ from LibTorch's at all, at most. Measured, x ~ N(0.5, 3^2): none of y,
// 3.0% of dx, nearly all where x < -3 and the gradient Phi(x) + x phi(x) is a difference of
// two near-equal terms. LibTorch's own bf16 dx differs from the correctly rounded one (fp64,
// rounded) in the same 3.0%: neither is exact there, see AtLeastAsAccurateAsLibTorch.
constexpr double kMaxDifferingFraction = 0.05;
// Against the correctly rounded results, the fused kernel may miss at most this many more
// elements (as a fraction) than LibTorch's bf16 path misses.
constexpr double kAccuracyMargin = 0.002;

Result libtorch(const torch::Tensor& x, const torch::Tensor& dy) {
  return forward_backward([](const torch::Tensor& v) { return torch::gelu(v); }, x, dy);
}

Result fused(const torch::Tensor& x, const torch::Tensor& dy) {
  return forward_backward([](const torch::Tensor& v) { return fused_gelu(v); }, x, dy);
}

// Within one bf16 ulp (or the absolute floor) everywhere.
void expect_within_ulp(const torch::Tensor& got, const torch::Tensor& want,
                       const std::string& what) {
  ASSERT_EQ(got.scalar_type(), torch::kBFloat16) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const auto g = got.to(torch::kFloat64), r = want.to(torch::kFloat64);
  const auto diff = (g - r).abs();
  const auto bound = r.abs() * kBf16Ulp + kAbsFloor;
  EXPECT_TRUE(diff.le(bound).all().item<bool>())
      << what << ": largest difference " << diff.max().item<double>();
}

// Against LibTorch: within one ulp, and differing in few elements at all.
void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  expect_within_ulp(got, want, what);
  EXPECT_LE(differing_fraction(got, want), kMaxDifferingFraction) << what;
}

TEST(FusedGelu, MatchesLibTorchOnEverySimdLevel) {
  SimdLevelGuard guard;
  // gpt small's MLP activations, and a size with a tail after whole vectors.
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{8, 256, 1536}, {1001, 37}}) {
    torch::manual_seed(11);
    const auto x = (torch::randn(shape) * 3 + 0.5).to(torch::kBFloat16);
    const auto dy = torch::randn(shape).to(torch::kBFloat16);
    const auto want = libtorch(x, dy);
    for (const auto level : optim::supported_simd_levels()) {
      optim::force_simd_level(level);
      const auto got = fused(x, dy);
      const std::string name = optim::simd_level_name(level) + " " + std::to_string(x.numel());
      expect_close(got.y, want.y, name + " y");
      expect_close(got.dx, want.dx, name + " dx");
    }
  }
}

TEST(FusedGelu, AtLeastAsAccurateAsLibTorch) {
  torch::manual_seed(13);
  const auto x = (torch::randn({1 << 20}) * 3 + 0.5).to(torch::kBFloat16);
  const auto dy = torch::randn({1 << 20}).to(torch::kBFloat16);
  // LibTorch in fp64, rounded once to bf16: the correctly rounded results.
  const auto exact = libtorch(x.to(torch::kFloat64), dy.to(torch::kFloat64));
  const Result truth{exact.y.to(torch::kBFloat16), exact.dx.to(torch::kBFloat16)};
  const auto got = fused(x, dy), want = libtorch(x, dy);
  for (const auto& [name, g, w, t] :
       {std::tuple{"y", got.y, want.y, truth.y}, std::tuple{"dx", got.dx, want.dx, truth.dx}}) {
    const double ours = differing_fraction(g, t), theirs = differing_fraction(w, t);
    EXPECT_LE(ours, theirs + kAccuracyMargin) << name << ": fused " << ours << ", LibTorch "
                                              << theirs << " of the elements not correctly rounded";
    // How many elements miss the correct rounding depends on the CPU's LibTorch kernels (its
    // own bf16 y misses 5.7% of them on an AVX-512 EPYC, measured 2026-11-28): the bound
    // above is relative to LibTorch's, and every element is within one ulp.
    expect_within_ulp(g, t, std::string(name) + " against fp64");
  }
}

TEST(FusedGelu, SpecialValuesAsLibTorch) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto x = torch::tensor({0.0f, -0.0f, inf, -inf, nan, 1e30f, -1e30f, 40.0f, -40.0f, 1e-30f})
                     .to(torch::kBFloat16);
  const auto dy = torch::ones_like(x);
  const auto got = fused(x, dy), want = libtorch(x, dy);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float g = got.y[i].item<float>(), w = want.y[i].item<float>();
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << "y at x = " << x[i].item<float>() << ": " << g;
    } else {
      EXPECT_EQ(g, w) << "y at x = " << x[i].item<float>();
    }
    const float gd = got.dx[i].item<float>(), wd = want.dx[i].item<float>();
    if (std::isnan(wd)) {
      EXPECT_TRUE(std::isnan(gd)) << "dx at x = " << x[i].item<float>() << ": " << gd;
    } else {
      EXPECT_EQ(gd, wd) << "dx at x = " << x[i].item<float>();
    }
  }
}

TEST(FusedGelu, ResultsDoNotDependOnTheThreadCountOrLayout) {
  torch::manual_seed(5);
  const auto x = torch::randn({600, 700}).to(torch::kBFloat16);  // several tasks of kGrain
  const auto dy = torch::randn({600, 700}).to(torch::kBFloat16);
  const auto one = kernel_checks::expect_same_on_one_and_two_threads(
      [](const torch::Tensor& v) { return fused_gelu(v); }, x, dy);
  // A transposed (non-contiguous) input gives the transposed results.
  const auto t = fused(x.t(), dy.t());
  EXPECT_TRUE(torch::equal(t.y, one.y.t()));
  EXPECT_TRUE(torch::equal(t.dx, one.dx.t()));
}

TEST(FusedGelu, BadInputIsAUsageErrorNamingIt) {
  try {
    (void)fused_gelu(torch::zeros({4}, torch::kFloat32));
    ADD_FAILURE() << "accepted fp32 input";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("x is Float"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zoff::models::fused_gelu_test
