// 16-bit products computed in fp32 (widened_products.h) against LibTorch's own fp16 and bf16
// ops and an fp32 reference, op by op and through a whole GPT forward and backward.
#include "zoff/models/widened_products.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <limits>
#include <string>

#include "../../src/models/gemv_kernels.h"
#include "zoff/models/gpt.h"
#include "zoff/optim/simd_dispatch.h"

namespace zoff::models::widened_products_test {
namespace {

// One op: the widened product is the fp32 product rounded once, so against the fp32
// reference it is off by at most half an fp16 ulp (2^-11 relative) of each element; allow
// one ulp for the inputs' own rounding being shared.
constexpr double kOneFp16Ulp = 1.0 / 1024;
// A gpt forward in fp16, widened products vs LibTorch's pure-fp16 ops, relative to the
// logits' largest magnitude. Measured on the model below: ~2e-3 (both round every
// activation to fp16; they differ in how the GEMMs accumulate and round).
constexpr double kGptLogitsTolerance = 1e-2;

torch::Tensor max_rel(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max() /
         want.to(torch::kFloat64).abs().max();
}

TEST(WidenedProducts, LinearIsTheFp32ProductRoundedOnce) {
  torch::manual_seed(1);
  const auto x = torch::randn({3, 17, 64}).to(torch::kHalf);
  const auto w = (torch::randn({48, 64}) * 0.1).to(torch::kHalf);
  const auto b = torch::randn({48}).to(torch::kHalf);
  const auto got = widened_linear(x, w, b);
  ASSERT_EQ(got.scalar_type(), torch::kHalf);
  const auto want =
      torch::linear(x.to(torch::kFloat32), w.to(torch::kFloat32), b.to(torch::kFloat32));
  // Exactly the fp32 result rounded to fp16: same ops, same order, one rounding.
  EXPECT_TRUE(torch::equal(got, want.to(torch::kHalf)));
  // And within an fp16 ulp of LibTorch's own fp16 linear.
  const auto pure = torch::linear(x, w, b);
  const auto diff = ((got.to(torch::kFloat32) - pure.to(torch::kFloat32)).abs() /
                     pure.to(torch::kFloat32).abs().clamp_min(1e-3))
                        .max()
                        .item<double>();
  std::printf("  widened vs LibTorch fp16 linear: worst relative difference %.3g\n", diff);
  EXPECT_LE(diff, 2 * kOneFp16Ulp);
}

TEST(WidenedProducts, MatmulAndBaddbmmMatchTheFp32Ops) {
  torch::manual_seed(2);
  const auto a = torch::randn({4, 9, 16}).to(torch::kHalf);
  const auto b = torch::randn({4, 16, 9}).to(torch::kHalf);
  const auto c = torch::randn({9, 9}).to(torch::kHalf);
  auto f = [](const torch::Tensor& t) { return t.to(torch::kFloat32); };
  EXPECT_TRUE(torch::equal(widened_matmul(a, b), torch::matmul(f(a), f(b)).to(torch::kHalf)));
  EXPECT_TRUE(torch::equal(widened_baddbmm(c, a, b, 1.0, 0.25),
                           torch::baddbmm(f(c), f(a), f(b), 1.0, 0.25).to(torch::kHalf)));
}

// Pins the process-wide bf16 choice for one test and puts the automatic one back.
class Bf16ProductsGuard {
 public:
  explicit Bf16ProductsGuard(Bf16Products mode) { set_bf16_products(mode); }
  ~Bf16ProductsGuard() { set_bf16_products(Bf16Products::kAuto); }
  Bf16ProductsGuard(const Bf16ProductsGuard&) = delete;
  Bf16ProductsGuard& operator=(const Bf16ProductsGuard&) = delete;
};

TEST(WidenedProducts, Fp32AndNativeBf16GoStraightToLibTorch) {
  torch::manual_seed(3);
  Bf16ProductsGuard native(Bf16Products::kNative);
  EXPECT_FALSE(bf16_products_widened());
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const auto x = torch::randn({5, 8}).to(dtype);
    const auto w = torch::randn({6, 8}).to(dtype);
    const auto b = torch::randn({6}).to(dtype);
    const auto got = widened_linear(x, w, b);
    EXPECT_EQ(got.scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(got, torch::linear(x, w, b)));
    EXPECT_TRUE(torch::equal(widened_matmul(x, w.t()), torch::matmul(x, w.t())));
    const auto a3 = x.unsqueeze(0), b3 = w.t().unsqueeze(0);
    EXPECT_TRUE(torch::equal(widened_bmm(a3, b3), torch::bmm(a3, b3)));
  }
}

// bf16 widened: every op is the fp32 op on the same values, rounded once to bf16, and
// within a bf16 ulp (2^-8 relative) of LibTorch's own bf16 GEMM (fp32 accumulation too).
TEST(WidenedProducts, WidenedBf16IsTheFp32ProductRoundedOnce) {
  constexpr double kOneBf16Ulp = 1.0 / 128;
  torch::manual_seed(6);
  Bf16ProductsGuard widened(Bf16Products::kWidened);
  EXPECT_TRUE(bf16_products_widened());
  EXPECT_EQ(bf16_products_name(), "widened");
  const auto x = torch::randn({3, 17, 64}).to(torch::kBFloat16);
  const auto w = (torch::randn({48, 64}) * 0.1).to(torch::kBFloat16);
  const auto b = torch::randn({48}).to(torch::kBFloat16);
  auto f = [](const torch::Tensor& t) { return t.to(torch::kFloat32); };
  const auto got = widened_linear(x, w, b);
  ASSERT_EQ(got.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(got, torch::linear(f(x), f(w), f(b)).to(torch::kBFloat16)));
  const auto a = torch::randn({4, 9, 16}).to(torch::kBFloat16);
  const auto c = torch::randn({4, 16, 9}).to(torch::kBFloat16);
  const auto m = torch::randn({9, 9}).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(widened_bmm(a, c), torch::bmm(f(a), f(c)).to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(widened_matmul(a, c), torch::matmul(f(a), f(c)).to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(widened_baddbmm(m, a, c, 1.0, 0.5),
                           torch::baddbmm(f(m), f(a), f(c), 1.0, 0.5).to(torch::kBFloat16)));
  EXPECT_LE(max_rel(got, torch::linear(x, w, b)).item<double>(), 2 * kOneBf16Ulp);
}

TEST(WidenedProducts, GradientsFlowInFp16) {
  torch::manual_seed(4);
  const auto x = torch::randn({6, 32}).to(torch::kHalf).requires_grad_();
  const auto w = torch::randn({16, 32}).to(torch::kHalf).requires_grad_();
  widened_linear(x, w, {}).to(torch::kFloat32).square().sum().backward();
  ASSERT_TRUE(x.grad().defined() && w.grad().defined());
  EXPECT_EQ(x.grad().scalar_type(), torch::kHalf);
  EXPECT_EQ(w.grad().scalar_type(), torch::kHalf);
  // d/dw sum((x w^T)^2) = 2 (x w^T)^T x, in fp32 from the same fp16 values.
  const auto xf = x.detach().to(torch::kFloat32), wf = w.detach().to(torch::kFloat32);
  const auto y = torch::matmul(xf, wf.t()).to(torch::kHalf).to(torch::kFloat32);
  const auto want = torch::matmul((2 * y).t(), xf);
  EXPECT_LE(max_rel(w.grad(), want).item<double>(), 2 * kOneFp16Ulp);
}

// The widened ops' own backward (saving the 16-bit operands) against autograd through
// fp32 casts of the same values: the same fp32 GEMMs on the same numbers, rounded once.
TEST(WidenedProducts, BackwardIsAutogradThroughFp32Casts) {
  Bf16ProductsGuard widened(Bf16Products::kWidened);
  for (auto dtype : {torch::kHalf, torch::kBFloat16}) {
    torch::manual_seed(7);
    auto leaf = [&](std::vector<int64_t> shape) {
      return (torch::randn(shape) * 0.5).to(dtype).requires_grad_();
    };
    const auto x = leaf({2, 5, 8}), w = leaf({6, 8}), b = leaf({6});
    const auto a4 = leaf({2, 3, 5, 4}), b4 = leaf({2, 3, 4, 5});
    const auto q = leaf({3, 5, 4}), k = leaf({3, 4, 5}), c = leaf({5, 5});
    auto f = [](const torch::Tensor& t) { return t.to(torch::kFloat32); };
    auto outputs = [&](bool ours) {
      if (ours) {
        return std::vector<torch::Tensor>{
            widened_linear(x, w, b), widened_linear(x, w, {}), widened_matmul(x, w.t()),
            widened_matmul(a4, b4),  widened_bmm(q, k),        widened_baddbmm(c, q, k, 0.5, 0.25)};
      }
      return std::vector<torch::Tensor>{torch::linear(f(x), f(w), f(b)).to(dtype),
                                        torch::linear(f(x), f(w)).to(dtype),
                                        torch::matmul(f(x), f(w).t()).to(dtype),
                                        torch::matmul(f(a4), f(b4)).to(dtype),
                                        torch::bmm(f(q), f(k)).to(dtype),
                                        torch::baddbmm(f(c), f(q), f(k), 0.5, 0.25).to(dtype)};
    };
    const std::vector<torch::Tensor> inputs = {x, w, b, a4, b4, q, k, c};
    auto grads = [&](bool ours) {
      torch::Tensor loss = torch::zeros({}, torch::kFloat32);
      for (const auto& y : outputs(ours))
        loss = loss + (f(y) * torch::linspace(-1, 1, y.numel()).view(y.sizes())).sum();
      return torch::autograd::grad({loss}, inputs);
    };
    const auto got = grads(true), want = grads(false);
    for (size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_EQ(got[i].scalar_type(), dtype) << "input " << i;
      EXPECT_TRUE(torch::allclose(f(got[i]), f(want[i]), kOneFp16Ulp, 1e-6))
          << "input " << i << ", " << dtype << ": " << max_rel(got[i], want[i]).item<double>();
    }
  }
}

// Weights whose fp32 copy, or whose fp32 product with x, passes the chunk size (4 MiB) go by
// chunks of their rows: a wide weight (20,000 x 64) and a product of many rows (5,000 rows
// into 300 outputs), as linear, linear without bias and the tied head's x @ w^T. Forward
// columns and weight-gradient rows are each one chunk's product; the input gradient sums
// the chunks in fp32 in another order than one GEMM: within one 16-bit ulp of the largest
// element against autograd through fp32 casts.
TEST(WidenedProducts, LargeProductsGoByChunksWithTheSameArithmetic) {
  constexpr double kOneBf16Ulp = 1.0 / 128;
  Bf16ProductsGuard widened(Bf16Products::kWidened);
  struct Shape {
    int64_t rows, in, out;
  };
  for (auto dtype : {torch::kHalf, torch::kBFloat16}) {
    for (const Shape shape : {Shape{21, 64, 20000}, Shape{5000, 64, 300}}) {
      torch::manual_seed(8);
      auto leaf = [&](std::vector<int64_t> sizes) {
        return (torch::randn(sizes) * 0.5).to(dtype).requires_grad_();
      };
      const auto x = leaf({3, shape.rows / 3, shape.in});
      const auto w = leaf({shape.out, shape.in}), b = leaf({shape.out});
      auto f = [](const torch::Tensor& t) { return t.to(torch::kFloat32); };
      auto grads = [&](bool ours) {
        const std::vector<torch::Tensor> ys =
            ours ? std::vector<torch::Tensor>{widened_linear(x, w, b), widened_linear(x, w, {}),
                                              widened_matmul(x, w.t())}
                 : std::vector<torch::Tensor>{torch::linear(f(x), f(w), f(b)).to(dtype),
                                              torch::linear(f(x), f(w)).to(dtype),
                                              torch::matmul(f(x), f(w).t()).to(dtype)};
        torch::Tensor loss = torch::zeros({}, torch::kFloat32);
        std::vector<torch::Tensor> out;
        for (const auto& y : ys) {
          out.push_back(y.detach());
          loss = loss + (f(y) * torch::linspace(-1, 1, y.numel()).view(y.sizes())).sum();
        }
        for (const auto& g : torch::autograd::grad({loss}, {x, w, b})) out.push_back(g);
        return out;
      };
      const auto got = grads(true), want = grads(false);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].scalar_type(), dtype) << i;
        ASSERT_EQ(got[i].sizes(), want[i].sizes()) << i;
        EXPECT_LE(max_rel(got[i], want[i]).item<double>(), kOneBf16Ulp)
            << "output " << i << ", " << dtype << ", " << shape.rows << " x " << shape.in << " -> "
            << shape.out;
      }
    }
  }
}

// A gpt forward in fp16 through zoff's model (widened products) against the same model run
// with LibTorch's fp16 ops throughout (the pure-fp16 reference).
TEST(WidenedProducts, GptLogitsStayCloseToPureFp16) {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.block_size = 32;
  torch::manual_seed(5);
  Gpt model(c);
  model->to(torch::kHalf);
  const auto idx = torch::randint(0, 256, {2, 32});
  const auto widened = model(idx);
  ASSERT_EQ(widened.scalar_type(), torch::kHalf);
  // Pure fp16: the same blocks written with LibTorch's fp16 products.
  torch::NoGradGuard no_grad;
  auto x = model->wte(idx) + model->wpe(torch::arange(32));
  const auto ln = [](torch::nn::LayerNorm& l, const torch::Tensor& t) {
    namespace F = torch::nn::functional;
    return F::layer_norm(t.to(torch::kFloat32), F::LayerNormFuncOptions({t.size(-1)})
                                                    .weight(l->weight.to(torch::kFloat32))
                                                    .bias(l->bias.to(torch::kFloat32))
                                                    .eps(l->options.eps()))
        .to(torch::kHalf);
  };
  for (const auto& m : *model->blocks) {
    auto* block = m->as<GptBlockImpl>();
    const auto h = ln(block->ln_1, x);
    auto parts = torch::linear(h, block->attn->qkv->weight, block->attn->qkv->bias).split(64, 2);
    auto heads = [](const torch::Tensor& t) { return t.view({2, 32, 4, 16}).transpose(1, 2); };
    const auto q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
    const auto mask =
        torch::full({32, 32}, -std::numeric_limits<double>::infinity(), q.options()).triu(1);
    auto att = torch::softmax(torch::matmul(q, k.transpose(-1, -2)) * 0.25 + mask, -1);
    auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({2, 32, 64});
    x = x + torch::linear(y, block->attn->proj->weight, block->attn->proj->bias);
    const auto g =
        torch::gelu(torch::linear(ln(block->ln_2, x), block->fc->weight, block->fc->bias));
    x = x + torch::linear(g, block->mlp_proj->weight, block->mlp_proj->bias);
  }
  const auto pure = torch::matmul(ln(model->ln_f, x), model->wte->weight.t());
  const double diff = max_rel(widened.detach(), pure).item<double>();
  std::printf("  gpt logits, widened vs pure fp16: %.3g of the largest logit\n", diff);
  EXPECT_LE(diff, kGptLogitsTolerance);
}

// The one-row kernel against the fp32 product rounded once: its fp32 sums run in another
// order, so a result may round to the neighbouring bf16 value: one bf16 ulp (2^-8 relative)
// of the row's largest output, plus fp32 noise.
constexpr double kGemvBf16Tolerance = 1.0 / 256;

// Every product shape of the kernel against the fp32 product: K with a SIMD tail (and one
// below a vector), N not a multiple of the parallel grain, 1..4 rows, with and without a
// bias, and a leading batch shape.
void expect_few_row_products_match_fp32(const std::string& label) {
  torch::manual_seed(3);
  torch::NoGradGuard no_grad;
  for (const int64_t K : {13, 37, 64, 515, 2048}) {
    const auto w = (torch::randn({300, K}) * 0.1).to(torch::kBFloat16);
    const auto b = torch::randn({300}).to(torch::kBFloat16);
    for (const int64_t rows : {1, 2, 3, 4}) {
      const auto x = torch::randn({rows, 1, K}).to(torch::kBFloat16);
      for (const bool bias : {true, false}) {
        const torch::Tensor bb = bias ? b : torch::Tensor();
        const auto got = widened_linear(x, w, bb);
        ASSERT_EQ(got.scalar_type(), torch::kBFloat16);
        ASSERT_EQ(got.sizes(), (std::vector<int64_t>{rows, 1, 300}));
        const auto want = torch::linear(x.to(torch::kFloat32), w.to(torch::kFloat32),
                                        bias ? b.to(torch::kFloat32) : torch::Tensor());
        EXPECT_LE(max_rel(got, want).item<double>(), kGemvBf16Tolerance)
            << label << " K " << K << " rows " << rows << " bias " << bias;
      }
    }
  }
}

TEST(WidenedProducts, FewRowsWithoutAutogradReadBf16WeightsOnceAndMatchTheFp32Product) {
  // Widened or automatic (the kernel either way), at the best SIMD level (vdpbf16ps on CPUs
  // with AVX512-BF16) and held to AVX2 (weights widened to fp32 in the kernel).
  for (const auto mode : {Bf16Products::kWidened, Bf16Products::kAuto}) {
    Bf16ProductsGuard guard(mode);
    for (const auto level : {optim::SimdLevel::kBest, optim::SimdLevel::kAvx2}) {
      optim::force_simd_level(level);
      expect_few_row_products_match_fp32(
          std::string(mode == Bf16Products::kAuto ? "auto " : "widened ") +
          optim::simd_level_name(level) +
          (detail::bf16_gemv_uses_dot_products() ? " (vdpbf16ps)" : ""));
    }
    optim::force_simd_level(optim::SimdLevel::kBest);
  }
  // Five rows, or autograd on: the widened GEMM as before (the same fp32 product rounded).
  Bf16ProductsGuard widened(Bf16Products::kWidened);
  const auto w = torch::randn({8, 16}).to(torch::kBFloat16);
  const auto x = torch::randn({5, 16}).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(
      widened_linear(x, w, torch::Tensor()),
      torch::matmul(x.to(torch::kFloat32), w.to(torch::kFloat32).t()).to(torch::kBFloat16)));
}

// Pinned native, a one-row product is LibTorch's, bit for bit (ZOFF_BF16_PRODUCTS=native).
TEST(WidenedProducts, NativeSendsFewRowProductsToLibTorch) {
  Bf16ProductsGuard native(Bf16Products::kNative);
  torch::manual_seed(4);
  torch::NoGradGuard no_grad;
  const auto w = torch::randn({300, 515}).to(torch::kBFloat16);
  const auto b = torch::randn({300}).to(torch::kBFloat16);
  const auto x = torch::randn({1, 515}).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(widened_linear(x, w, b), torch::linear(x, w, b)));
}

}  // namespace
}  // namespace zoff::models::widened_products_test
