// Tests of zoff::checkpoint against the same computation without it (plain LibTorch).
#include "zoff/unit/activation_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/unit/unit_hooks.h"

namespace zoff::activation_checkpoint_test {
namespace {

using ::testing::HasSubstr;

// Largest |checkpointed - plain| allowed for losses and gradients. The recomputation runs
// the same ops on the same values in the same order, with the same dropout masks (the RNG
// state is restored), and each parameter gets its gradient once: bitwise equal. Different
// masks would show as ~1e-2, a different summation order as ~1e-7.
constexpr double kExact = 0.0;

// x + fc2(dropout(gelu(fc1(x)))), x [B, 6]: a residual block whose dropout (p = 0.1 while
// training) makes the RNG state matter.
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

struct Run {
  torch::Tensor loss;
  std::vector<std::pair<std::string, torch::Tensor>> grads;  // every block's parameters
  torch::Tensor input_grad;                                  // undefined if not required
  torch::Tensor next_draw;  // torch::rand({8}) after forward and backward
};

// Three blocks in sequence on x [5, 6], loss = mean(h^2), backward, then the next draws.
Run run_blocks(bool checkpointed, bool input_requires_grad, uint64_t dropout_seed = 4) {
  torch::manual_seed(3);
  std::vector<Block> blocks{Block(), Block(), Block()};
  auto x = torch::randn({5, 6}).requires_grad_(input_requires_grad);
  torch::manual_seed(dropout_seed);
  torch::Tensor h = x;
  for (auto& b : blocks) h = checkpointed ? checkpointed_unit_forward(b, h) : b(h);
  auto loss = h.square().mean();
  loss.backward();
  Run r;
  r.loss = loss.detach();
  for (size_t i = 0; i < blocks.size(); ++i) {
    for (const auto& p : blocks[i]->named_parameters()) {
      r.grads.emplace_back(std::to_string(i) + "." + p.key(), p.value().grad());
    }
  }
  if (input_requires_grad) r.input_grad = x.grad();
  r.next_draw = torch::rand({8});
  return r;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

void expect_same_training(const Run& ckpt, const Run& plain) {
  EXPECT_LE(max_diff(ckpt.loss, plain.loss), kExact) << "loss";
  ASSERT_EQ(ckpt.grads.size(), plain.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    const auto& [name, grad] = ckpt.grads[i];
    ASSERT_TRUE(grad.defined()) << name << " got no gradient under checkpointing";
    const double d = max_diff(grad, plain.grads[i].second);
    EXPECT_LE(d, kExact) << name << ": largest difference " << d;
  }
  ASSERT_EQ(ckpt.input_grad.defined(), plain.input_grad.defined());
  if (plain.input_grad.defined()) {
    EXPECT_LE(max_diff(ckpt.input_grad, plain.input_grad), kExact) << "input gradient";
  }
}

TEST(ActivationCheckpoint, MatchesThePlainRunWhenTheInputRequiresGrad) {
  expect_same_training(run_blocks(true, true), run_blocks(false, true));
}

// The first block's input is data: only its parameters require grad. The re-entrant
// torch.utils.checkpoint would drop their gradients here.
TEST(ActivationCheckpoint, MatchesThePlainRunWhenOnlyParametersRequireGrad) {
  expect_same_training(run_blocks(true, false), run_blocks(false, false));
}

// The comparison above would catch mismatched dropout masks: other masks, other gradients.
TEST(ActivationCheckpoint, TheGradientsDependOnTheDropoutMasks) {
  const auto a = run_blocks(false, true, /*dropout_seed=*/4);
  const auto b = run_blocks(false, true, /*dropout_seed=*/5);
  EXPECT_GT(max_diff(a.grads.front().second, b.grads.front().second), 1e-4);
}

// Recomputing in backward draws the masks again; the stream later code sees is unchanged.
TEST(ActivationCheckpoint, LeavesTheRngStreamAsWithoutCheckpointing) {
  for (bool input_requires_grad : {true, false}) {
    const auto plain = run_blocks(false, input_requires_grad);
    const auto ckpt = run_blocks(true, input_requires_grad);
    EXPECT_TRUE(torch::equal(ckpt.next_draw, plain.next_draw)) << input_requires_grad;
  }
}

// Token ids cannot require grad at all; the embedding's weight still gets its gradient.
TEST(ActivationCheckpoint, AnIntegerInputWorks) {
  torch::manual_seed(1);
  torch::nn::Embedding emb(10, 4);
  const auto ids = torch::tensor({1, 3, 3, 7});
  emb(ids).square().sum().backward();
  const auto plain = emb->weight.grad().clone();
  emb->weight.mutable_grad().reset();
  checkpointed_unit_forward(emb, ids).square().sum().backward();
  ASSERT_TRUE(emb->weight.grad().defined());
  EXPECT_TRUE(torch::equal(emb->weight.grad(), plain));
}

TEST(ActivationCheckpoint, RunsTheFunctionAgainOnlyInBackward) {
  int calls = 0;
  auto fn = [&calls](const torch::Tensor& x) {
    ++calls;
    return x.sin();
  };
  auto x = torch::randn({3}, torch::requires_grad());
  auto y = activation_checkpoint(fn, x);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(torch::equal(y, x.sin()));
  y.sum().backward();
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(torch::allclose(x.grad(), x.cos()));
  torch::NoGradGuard no_grad;  // evaluation: no backward, nothing saved
  const auto z = activation_checkpoint(fn, x);
  EXPECT_EQ(calls, 3);
  EXPECT_FALSE(z.requires_grad());
}

// Records the calls an engine would get, as in unit_call_test.
struct RecordingHooks : unit::UnitHooks {
  std::vector<std::string> calls;
  void before_forward(const torch::nn::Module&) override { calls.push_back("before"); }
  void after_forward(const torch::nn::Module&) override { calls.push_back("after"); }
  void before_backward(const torch::nn::Module&) override { calls.push_back("backward"); }
};

// The interaction the header documents: the recomputation is a second forward of the unit,
// inside backward, and before_backward comes from the recomputed output.
TEST(ActivationCheckpoint, RecomputationRunsTheUnitHooksAgain) {
  Block block;
  RecordingHooks hooks;
  unit::install_hooks(*block, &hooks);
  auto x = torch::randn({2, 6}, torch::requires_grad());
  auto y = checkpointed_unit_forward(block, x);
  EXPECT_EQ(hooks.calls, (std::vector<std::string>{"before", "after"}));
  y.sum().backward();
  EXPECT_EQ(hooks.calls,
            (std::vector<std::string>{"before", "after", "before", "after", "backward"}));
  unit::remove_hooks(*block);
}

TEST(ActivationCheckpoint, WithoutGradTheUnitRunsOnce) {
  Block block;
  RecordingHooks hooks;
  unit::install_hooks(*block, &hooks);
  {
    torch::NoGradGuard no_grad;
    checkpointed_unit_forward(block, torch::randn({2, 6}));
  }
  EXPECT_EQ(hooks.calls, (std::vector<std::string>{"before", "after"}));
  unit::remove_hooks(*block);
}

// The message of the UsageError f() throws, "" if it throws none.
template <typename F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(ActivationCheckpoint, BadUseIsAUsageErrorNamingTheProblem) {
  auto identity = [](const torch::Tensor& x) { return x; };
  auto undefined = [](const torch::Tensor&) { return torch::Tensor(); };
  auto x = torch::randn({2}, torch::requires_grad());
  EXPECT_THAT(usage_error([&] { activation_checkpoint(identity, torch::Tensor()); }),
              HasSubstr("input tensor is undefined"));
  EXPECT_THAT(usage_error([&] { activation_checkpoint(nullptr, x); }),
              HasSubstr("function is empty"));
  EXPECT_THAT(usage_error([&] { activation_checkpoint(undefined, x); }),
              HasSubstr("returned an undefined tensor"));
  torch::NoGradGuard no_grad;
  EXPECT_THAT(usage_error([&] { activation_checkpoint(undefined, x); }),
              HasSubstr("returned an undefined tensor"));
}

// The recomputation would put gradients into .grad of leaves grad() was not asked about.
TEST(ActivationCheckpoint, AutogradGradThroughACheckpointIsAUsageError) {
  Block block;
  auto x = torch::randn({2, 6}, torch::requires_grad());
  auto loss = checkpointed_unit_forward(block, x).sum();
  EXPECT_THAT(usage_error([&] { torch::autograd::grad({loss}, {x}); }),
              HasSubstr("plain tensor.backward()"));
  for (const auto& p : block->parameters()) EXPECT_FALSE(p.grad().defined());
}

}  // namespace
}  // namespace zoff::activation_checkpoint_test
