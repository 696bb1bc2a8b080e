// A gradient the engine would lose, and backward calls it does not see, are errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine_test_support.h"
#include "zoff/core/error.h"
#include "zoff/engine/zero_engine.h"
#include "zoff/unit/activation_checkpoint.h"

namespace zoff::engine::backward_misuse_test {
namespace {

// One Linear applied in two checkpointed segments: each re-entrant backward accumulates
// its gradient, so it arrives twice in one engine.backward().
struct TwiceImpl : torch::nn::Module {
  TwiceImpl() { lin = register_module("lin", torch::nn::Linear(4, 4)); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto f = [this](const torch::Tensor& h) { return torch::tanh(lin(h)); };
    return zoff::activation_checkpoint(f, zoff::activation_checkpoint(f, x));
  }
  torch::nn::Linear lin{nullptr};
};
TORCH_MODULE(Twice);

TEST(BackwardMisuse, SecondGradientInOneBackwardNamesTheParameter) {
  for (int stage : {0, 2, 3}) {
    torch::manual_seed(1);
    Twice model;
    auto cfg = testing::base_config(stage, 1, 4, 1);
    testing::run_ranks(1, [&](dist::CommPtr comm, int) {
      ZeroEngine engine(model.ptr(), cfg, comm);
      auto x = torch::randn({4, 4}, torch::requires_grad());
      try {
        engine.backward(model(x).sum());
        ADD_FAILURE() << "stage " << stage << ": the second gradient was accepted";
      } catch (const std::exception& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("lin."), std::string::npos) << what;
        EXPECT_NE(what.find("second gradient"), std::string::npos) << what;
      }
    });
  }
}

}  // namespace
}  // namespace zoff::engine::backward_misuse_test
