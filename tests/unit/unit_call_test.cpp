// Tests of with_unit / unit_forward and the hook registry.
#include "zoff/unit/unit_call.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "zoff/core/error.h"
#include "zoff/unit/unit_hooks.h"

namespace zoff {
namespace {

// Records the calls an engine would get.
struct RecordingHooks : unit::UnitHooks {
  std::vector<std::string> calls;
  void before_forward(const torch::nn::Module&) override { calls.push_back("before"); }
  void after_forward(const torch::nn::Module&) override { calls.push_back("after"); }
  void before_backward(const torch::nn::Module&) override { calls.push_back("backward"); }
};

TEST(UnitCall, WithoutHooksItIsThePlainForward) {
  torch::manual_seed(1);
  torch::nn::Linear lin(3, 2);
  auto x = torch::randn({4, 3});
  EXPECT_TRUE(torch::equal(unit_forward(lin, x), lin(x)));
}

TEST(UnitCall, HooksRunAroundForwardAndBeforeBackward) {
  torch::nn::Linear lin(3, 2);
  RecordingHooks hooks;
  unit::install_hooks(*lin, &hooks);
  auto y = unit_forward(lin, torch::randn({4, 3}));
  EXPECT_EQ(hooks.calls, (std::vector<std::string>{"before", "after"}));
  y.sum().backward();
  EXPECT_EQ(hooks.calls, (std::vector<std::string>{"before", "after", "backward"}));
  {
    torch::NoGradGuard no_grad;  // no backward to prepare for
    unit_forward(lin, torch::randn({4, 3}));
  }
  EXPECT_EQ(hooks.calls.size(), 5u);
  unit::remove_hooks(*lin);
  EXPECT_EQ(unit::hooks_for(*lin), nullptr);
}

TEST(UnitCall, AfterForwardRunsWhenTheComputationThrows) {
  torch::nn::Linear lin(3, 2);
  RecordingHooks hooks;
  unit::install_hooks(*lin, &hooks);
  EXPECT_THROW(unit_forward(lin, torch::randn({4, 5})), c10::Error);  // wrong width
  EXPECT_EQ(hooks.calls, (std::vector<std::string>{"before", "after"}));
  unit::remove_hooks(*lin);
}

TEST(UnitCall, AModuleBelongsToOneEngine) {
  torch::nn::Linear lin(3, 2);
  RecordingHooks a, b;
  unit::install_hooks(*lin, &a);
  EXPECT_THROW(unit::install_hooks(*lin, &b), UsageError);
  unit::remove_hooks(*lin);
}

}  // namespace
}  // namespace zoff
