// causal_attention: both kernels against fp64 attention written with PyTorch's ops (scores,
// -inf mask, softmax, product), forward and the gradients of q, k and v; which kernel kAuto
// takes; bad shapes and kernel names refused.
#include "zoff/models/causal_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/models/gpt.h"
#include "zoff/models/widened_products.h"

namespace zoff::models::causal_attention_test {
namespace {

// Relative error (Frobenius norm of the difference over the reference's) of bf16 results
// against fp64. bf16 keeps 8 significant bits (2^-9 = 2e-3 relative rounding per element)
// and the inputs themselves are rounded; measured (2026-12-08, AMX Xeon, the shapes below):
// materialized output 2.9-3.6e-3, gradients 3.0-4.4e-3; flash output 1.9-2.0e-3 (it sums in
// fp32 and rounds once), gradients 2.5-3.9e-3.
constexpr double kBf16RelTol = 1e-2;
// fp32 inputs: fp32 sums of up to ~1000 terms (measured 1.5-4.9e-7, both kernels).
constexpr double kFp32RelTol = 1e-5;

struct Grads {
  torch::Tensor y, dq, dk, dv;
};

using Attention =
    std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;

Grads run(const Attention& f, const std::vector<torch::Tensor>& qkv, const torch::Tensor& dy) {
  std::vector<torch::Tensor> leaves;
  for (const auto& t : qkv) leaves.push_back(t.detach().clone().requires_grad_());
  auto y = f(leaves[0], leaves[1], leaves[2]);
  y.backward(dy);
  return {y.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
}

// The definition in fp64, PyTorch's plain ops.
torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t T = q.size(2);
  const auto future =
      torch::full({T, T}, -std::numeric_limits<double>::infinity(), q.options()).triu(1);
  const auto scores = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(double(q.size(3)));
  return torch::matmul(torch::softmax(scores + future, -1), v);
}

Attention kernel(AttentionKernel k) {
  return [k](const torch::Tensor& q, const torch::Tensor& kk, const torch::Tensor& v) {
    CausalAttentionOptions o;
    o.kernel = k;
    return causal_attention(q, kk, v, o);
  };
}

double rel_err(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat64) - want).norm().item<double>() / want.norm().item<double>();
}

// q, k, v as the gpt makes them: [B, T, 3, nh, hs] split and transposed (strided views).
std::vector<torch::Tensor> make_qkv(int64_t B, int64_t nh, int64_t T, int64_t hs,
                                    torch::ScalarType dtype) {
  const auto x = torch::randn({B, T, 3, nh, hs}).to(dtype);
  std::vector<torch::Tensor> out;
  for (int64_t i = 0; i < 3; ++i) out.push_back(x.select(2, i).transpose(1, 2));
  return out;
}

void expect_close_to_fp64(AttentionKernel k, int64_t B, int64_t nh, int64_t T, int64_t hs,
                          torch::ScalarType dtype, double tol) {
  torch::manual_seed(T);
  const auto qkv = make_qkv(B, nh, T, hs, dtype);
  const auto dy = torch::randn({B, nh, T, hs}).to(dtype);
  std::vector<torch::Tensor> wide;
  for (const auto& t : qkv) wide.push_back(t.to(torch::kFloat64));
  const auto want = run(reference, wide, dy.to(torch::kFloat64));
  const auto got = run(kernel(k), qkv, dy);
  const std::string what = std::string(attention_kernel_name(k)) + " T=" + std::to_string(T);
  EXPECT_EQ(got.y.scalar_type(), dtype) << what;
  EXPECT_LT(rel_err(got.y, want.y), tol) << what << " output";
  EXPECT_LT(rel_err(got.dq, want.dq), tol) << what << " dq";
  EXPECT_LT(rel_err(got.dk, want.dk), tol) << what << " dk";
  EXPECT_LT(rel_err(got.dv, want.dv), tol) << what << " dv";
}

struct Bf16ProductsGuard {
  explicit Bf16ProductsGuard(Bf16Products mode) { set_bf16_products(mode); }
  ~Bf16ProductsGuard() { set_bf16_products(Bf16Products::kAuto); }
};

TEST(CausalAttention, BothKernelsMatchFp64AttentionInBf16) {
  // T = 70: no tile of the fused kernel is full; T = 1030: many tiles, the last partial.
  for (auto k : {AttentionKernel::kMaterialized, AttentionKernel::kFlash}) {
    expect_close_to_fp64(k, 2, 3, 70, 32, torch::kBFloat16, kBf16RelTol);
    expect_close_to_fp64(k, 1, 2, 1030, 64, torch::kBFloat16, kBf16RelTol);
  }
}

TEST(CausalAttention, BothKernelsMatchFp64AttentionInFp32) {
  for (auto k : {AttentionKernel::kMaterialized, AttentionKernel::kFlash}) {
    expect_close_to_fp64(k, 2, 3, 70, 32, torch::kFloat32, kFp32RelTol);
  }
}

TEST(CausalAttention, AutoStreamsLongBf16WindowsWhereBf16ProductsAreNative) {
  const auto bf16 = torch::kBFloat16;
  {
    Bf16ProductsGuard native(Bf16Products::kNative);
    EXPECT_TRUE(
        flash_attention_applies(AttentionKernel::kAuto, kFlashMinContext, bf16, true, false));
    EXPECT_FALSE(
        flash_attention_applies(AttentionKernel::kAuto, kFlashMinContext - 1, bf16, true, false));
    EXPECT_FALSE(flash_attention_applies(AttentionKernel::kAuto, kFlashMinContext, torch::kFloat32,
                                         true, false));
    EXPECT_FALSE(flash_attention_applies(AttentionKernel::kAuto, kFlashMinContext, bf16,
                                         /*cpu=*/false, false));
    EXPECT_FALSE(flash_attention_applies(AttentionKernel::kAuto, kFlashMinContext, bf16, true,
                                         /*dropout_active=*/true));
  }
  {
    Bf16ProductsGuard widened(Bf16Products::kWidened);
    EXPECT_FALSE(
        flash_attention_applies(AttentionKernel::kAuto, kFlashMinContext, bf16, true, false));
    // A kernel named explicitly is taken whatever the window.
    EXPECT_TRUE(flash_attention_applies(AttentionKernel::kFlash, 8, torch::kFloat32, true, false));
    EXPECT_FALSE(
        flash_attention_applies(AttentionKernel::kMaterialized, 1 << 20, bf16, true, false));
  }
}

TEST(CausalAttention, AutoComputesExactlyWhatTheKernelItChoosesComputes) {
  torch::manual_seed(3);
  const auto qkv = make_qkv(1, 2, kFlashMinContext, 32, torch::kBFloat16);
  const auto dy = torch::randn({1, 2, kFlashMinContext, 32}).to(torch::kBFloat16);
  for (auto mode : {Bf16Products::kNative, Bf16Products::kWidened}) {
    Bf16ProductsGuard guard(mode);
    const auto chosen =
        mode == Bf16Products::kNative ? AttentionKernel::kFlash : AttentionKernel::kMaterialized;
    const auto a = run(kernel(AttentionKernel::kAuto), qkv, dy);
    const auto b = run(kernel(chosen), qkv, dy);
    EXPECT_TRUE(torch::equal(a.y, b.y) && torch::equal(a.dq, b.dq) && torch::equal(a.dk, b.dk) &&
                torch::equal(a.dv, b.dv))
        << attention_kernel_name(chosen);
  }
}

TEST(CausalAttention, GptTrainsAlikeWithEitherKernel) {
  // The same model and window through both kernels: the losses agree to bf16 rounding and
  // every parameter gets a gradient.
  GptConfig c = gpt_preset("tiny");
  std::vector<double> losses;
  for (auto k : {AttentionKernel::kMaterialized, AttentionKernel::kFlash}) {
    c.attention = k;
    torch::manual_seed(7);
    Gpt model(c);
    model->to(torch::kBFloat16);
    torch::manual_seed(8);
    const auto tokens = torch::randint(0, c.vocab_size, {2, c.block_size + 1});
    const auto loss =
        gpt_loss(model(tokens.narrow(1, 0, c.block_size)), tokens.narrow(1, 1, c.block_size));
    loss.backward();
    for (const auto& p : model->parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_GT(p.grad().abs().sum().item<double>(), 0.0);
    }
    losses.push_back(loss.item<double>());
  }
  EXPECT_NEAR(losses[0], losses[1], losses[0] * kBf16RelTol);
}

TEST(CausalAttention, BadShapesAndKernelNamesAreUsageErrorsNamingThem) {
  const auto q = torch::randn({1, 2, 8, 4});
  CausalAttentionOptions o;
  auto expect_usage_error = [](const auto& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_usage_error(
      [&] {
        causal_attention(q, torch::randn({1, 2, 9, 4}), q, o);
      },
      "[1, 2, 9, 4]");
  expect_usage_error([&] { causal_attention(q[0], q[0], q[0], o); }, "[2, 8, 4]");
  expect_usage_error([&] { causal_attention(q, q.to(torch::kBFloat16), q, o); }, "BFloat16");
  expect_usage_error([] { parse_attention_kernel("fast"); }, "'fast'");
  EXPECT_EQ(parse_attention_kernel("flash"), AttentionKernel::kFlash);
  EXPECT_STREQ(attention_kernel_name(parse_attention_kernel("materialized")), "materialized");
}

}  // namespace
}  // namespace zoff::models::causal_attention_test
