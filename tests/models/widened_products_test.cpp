// fp16 products computed in fp32 (widened_products.h) against LibTorch's own fp16 ops and an
// fp32 reference, op by op and through a whole GPT forward and backward.
#include "zoff/models/widened_products.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <limits>

#include "zoff/models/gpt.h"

namespace zoff::models {
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
  const auto want = torch::linear(x.to(torch::kFloat32), w.to(torch::kFloat32), b.to(torch::kFloat32));
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

TEST(WidenedProducts, OtherDtypesGoStraightToLibTorch) {
  torch::manual_seed(3);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const auto x = torch::randn({5, 8}).to(dtype);
    const auto w = torch::randn({6, 8}).to(dtype);
    const auto b = torch::randn({6}).to(dtype);
    const auto got = widened_linear(x, w, b);
    EXPECT_EQ(got.scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(got, torch::linear(x, w, b)));
    EXPECT_TRUE(torch::equal(widened_matmul(x, w.t()), torch::matmul(x, w.t())));
  }
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
    return F::layer_norm(t.to(torch::kFloat32),
                         F::LayerNormFuncOptions({t.size(-1)})
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
    const auto g = torch::gelu(torch::linear(ln(block->ln_2, x), block->fc->weight, block->fc->bias));
    x = x + torch::linear(g, block->mlp_proj->weight, block->mlp_proj->bias);
  }
  const auto pure = torch::matmul(ln(model->ln_f, x), model->wte->weight.t());
  const double diff = max_rel(widened.detach(), pure).item<double>();
  std::printf("  gpt logits, widened vs pure fp16: %.3g of the largest logit\n", diff);
  EXPECT_LE(diff, kGptLogitsTolerance);
}

}  // namespace
}  // namespace zoff::models
