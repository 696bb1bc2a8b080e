// Tests of with_unit / unit_forward and the hook registry.
#include "zoff/unit/unit_call.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "zoff/core/error.h"
#include "zoff/unit/unit_hooks.h"

namespace zoff::unit_call_test {
namespace {

// Records the calls an engine would get, and which module each was for.
struct RecordingHooks : unit::UnitHooks {
  std::vector<std::string> calls;
  std::vector<const torch::nn::Module*> modules;
  void before_forward(const torch::nn::Module& m) override { record("before", m); }
  void after_forward(const torch::nn::Module& m) override { record("after", m); }
  void before_backward(const torch::nn::Module& m) override { record("backward", m); }
  void record(const char* call, const torch::nn::Module& m) {
    calls.push_back(call);
    modules.push_back(&m);
  }
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
  for (const auto* m : hooks.modules) EXPECT_EQ(m, lin.get());
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
}  // namespace zoff::unit_call_test
