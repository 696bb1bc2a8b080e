// Tests of zoff::checkpoint against the same computation without checkpointing (LibTorch).
#include "zoff/unit/activation_checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "zoff/core/error.h"
#include "zoff/unit/unit_hooks.h"

namespace zoff {
namespace {

// Same ops, same order, same dropout masks (the RNG state is restored): bitwise equal.
constexpr double kExact = 0.0;

// x + fc2(dropout(gelu(fc1(x)))): a residual block with dropout, so the RNG matters.
struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 12));
    fc2 = register_module("fc2", torch::nn::Linear(12, 6));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return x + fc2(torch::dropout(torch::gelu(fc1(x)), 0.1, is_training()));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

struct Result {
  double loss;
  std::vector<torch::Tensor> grads;
  torch::Tensor input_grad;
  torch::Tensor next_draw;  // the RNG stream after forward and backward
};

Result run(bool checkpointed, bool input_requires_grad) {
  torch::manual_seed(3);
  std::vector<Block> blocks{Block(), Block(), Block()};
  auto x = torch::randn({5, 6}).requires_grad_(input_requires_grad);
  torch::manual_seed(4);
  torch::Tensor h = x * 1.0;  // a non-leaf input, as inside a model
  if (!input_requires_grad) h = h.detach().requires_grad_(true);
  for (auto& b : blocks) h = checkpointed ? checkpointed_unit_forward(b, h) : b(h);
  auto loss = h.square().mean();
  loss.backward();
  Result r;
  r.loss = loss.item<double>();
  for (auto& b : blocks) {
    for (auto& p : b->parameters()) r.grads.push_back(p.grad().clone());
  }
  r.input_grad = input_requires_grad ? x.grad().clone() : torch::Tensor();
  r.next_draw = torch::rand({4});
  return r;
}

TEST(ActivationCheckpoint, GradientsAndDropoutMasksEqualThePlainRun) {
  for (bool input_grad : {true, false}) {
    const auto plain = run(false, input_grad);
    const auto ckpt = run(true, input_grad);
    EXPECT_EQ(ckpt.loss, plain.loss);
    ASSERT_EQ(ckpt.grads.size(), plain.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      EXPECT_LE((ckpt.grads[i] - plain.grads[i]).abs().max().item<double>(), kExact) << i;
    }
    if (input_grad) {
      EXPECT_TRUE(torch::equal(ckpt.input_grad, plain.input_grad));
    }
    // Recomputing in backward does not shift the RNG stream later code sees.
    EXPECT_TRUE(torch::equal(ckpt.next_draw, plain.next_draw));
  }
}

struct CountingHooks : unit::UnitHooks {
  int before = 0, after = 0, backward = 0;
  void before_forward(const torch::nn::Module&) override { ++before; }
  void after_forward(const torch::nn::Module&) override { ++after; }
  void before_backward(const torch::nn::Module&) override { ++backward; }
};

TEST(ActivationCheckpoint, RecomputationRunsTheUnitHooksAgain) {
  Block block;
  CountingHooks hooks;
  unit::install_hooks(*block, &hooks);
  auto x = torch::randn({2, 6}, torch::requires_grad());
  checkpointed_unit_forward(block, x).sum().backward();
  EXPECT_EQ(hooks.before, 2);  // forward, then the recomputation in backward
  EXPECT_EQ(hooks.after, 2);
  EXPECT_GE(hooks.backward, 1);
  {
    torch::NoGradGuard no_grad;
    checkpointed_unit_forward(block, x);
  }
  EXPECT_EQ(hooks.before, 3);  // evaluation: no recomputation to prepare
  unit::remove_hooks(*block);
}

TEST(ActivationCheckpoint, BadUseIsAUsageError) {
  EXPECT_THROW(checkpoint([](const torch::Tensor& x) { return x; }, torch::Tensor()), UsageError);
  auto x = torch::randn({2}, torch::requires_grad());
  EXPECT_THROW(checkpoint([](const torch::Tensor&) { return torch::Tensor(); }, x), UsageError);
}

}  // namespace
}  // namespace zoff
